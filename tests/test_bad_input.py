"""Bad input gets a 4xx problem body, never a 5xx, and nothing is half-written."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, uid

POSTS = ["/threads", "/workers", "/triggers"]


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize("body", [b"{bad", b"", b"[]", b"null", b'{"title": ', b"\xff\xfe", b'"just a string"'])
def test_malformed_or_non_object_json_is_400(client: httpx.Client, path: str, body: bytes) -> None:
    assert_problem(client.post(path, content=body, headers={"content-type": "application/json"}), 400)


@pytest.mark.parametrize(("path", "body"), [
    ("/threads", {"title": 5}),
    ("/threads", {"title": "t", "status": ["open"]}),
    ("/threads", {"title": "t", "unknown_field": 1}),
    ("/threads", {"title": ""}),
    ("/threads", {"title": "two\nlines"}),
    ("/threads", {"title": "t" * 121}),
    ("/threads", {"id": "thr_" + "x" * 65, "title": "t"}),
    ("/workers", {"name": None}),
    ("/triggers", {"source": "s"}),
    ("/triggers", {"source": "s", "summary": "s", "neighbours": "trg_a"}),
    ("/triggers", {"source": "s", "summary": "s", "occurred_at": "yesterday"}),
    ("/triggers", {"source": "s", "summary": "s", "neighbours": [f"trg_{i}" for i in range(17)]}),
])
def test_wrong_types_unknown_fields_and_limits_are_400(client: httpx.Client, path: str, body: dict) -> None:
    assert_problem(client.post(path, json=body), 400)


def test_a_dangling_link_is_422_naming_the_id_and_writes_nothing(client: httpx.Client, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    ghost = uid("trg")
    trigger = uid("trg")
    body = {"id": trigger, "source": "s", "summary": "s", "thread_id": thread, "neighbours": [ghost]}
    problem = assert_problem(client.post("/triggers", json=body), 422, ghost)
    assert problem["missing"] == [ghost]
    assert sql("SELECT count(*) FROM triggers WHERE id = $1", trigger)[0][0] == 0
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = $1", thread)[0][0] == 0
    assert client.get(f"/threads/{thread}").json()["events_total"] == 0


def test_dangling_links_on_every_create_are_422(client: httpx.Client, graph: Graph) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    assert_problem(client.post("/triggers", json={"source": "s", "summary": "s", "thread_id": uid("thr")}), 422)
    assert_problem(client.post(f"/threads/{thread}/owners", json={"worker_id": uid("wkr")}), 422)
    assert_problem(client.post(f"/workers/{worker}/reports", json={"thread_id": uid("thr"), "summary": "s"}), 422)
    assert_problem(client.post(f"/workers/{worker}/reports",
                               json={"thread_id": thread, "summary": "s", "refs": [uid("trg")]}), 422)
    assert_problem(client.post(f"/threads/{thread}/events", json={"summary": "s", "ref": uid("rpt")}), 422)
    assert client.get(f"/threads/{thread}").json()["events_total"] == 0


def test_wrong_kind_ids_in_bodies_are_400_naming_the_field_and_the_kind(client: httpx.Client, graph: Graph) -> None:
    """openapi.yaml types each body ID by kind (ThreadId, ...): a wrong-kind ID breaks the schema."""
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    assert_problem(client.post("/triggers", json={"source": "s", "summary": "s", "thread_id": worker}), 400,
                   "thread_id: Expected `str` matching regex '^thr_")
    assert_problem(client.post(f"/threads/{thread}/owners", json={"worker_id": thread}), 400, "worker_id: Expected")
    assert_problem(client.post(f"/workers/{worker}/reports",
                               json={"thread_id": thread, "summary": "s", "refs": [thread]}), 400, "regex '^trg_")
    assert client.get(f"/threads/{thread}").json()["events_total"] == 0


def test_posting_to_a_missing_parent_is_404(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    assert_problem(client.post(f"/threads/{uid('thr')}/events", json={"summary": "s"}), 404)
    assert_problem(client.post(f"/threads/{uid('thr')}/owners", json={"worker_id": graph.worker()["id"]}), 404)
    assert_problem(client.post(f"/workers/{uid('wkr')}/reports", json={"thread_id": thread, "summary": "s"}), 404)
    assert_problem(client.patch(f"/threads/{uid('thr')}", json={"status": "closed"}), 404)


def test_a_non_string_payload_with_a_text_content_type_is_422(client: httpx.Client) -> None:
    body = {"source": "s", "summary": "s", "content_type": "text/plain", "payload": {"not": "text"}}
    assert_problem(client.post("/triggers", json=body), 422)


def test_a_thread_takes_at_most_16_owners(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    for _ in range(16):
        assert client.post(f"/threads/{thread}/owners", json={"worker_id": graph.worker()["id"]}).status_code == 201
    assert_problem(client.post(f"/threads/{thread}/owners", json={"worker_id": graph.worker()["id"]}), 422)
    view = client.get(f"/threads/{thread}").json()
    assert len(view["owner_workers"]) == 16 and view["events_total"] == 16


@pytest.fixture(scope="module")
def small_limit_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("small") / "log", RECALL_MAX_BODY_BYTES="2048")
    yield proc.start().url
    proc.stop()


def test_an_oversized_body_is_413_and_writes_nothing(small_limit_server: str, api_key: str, sql) -> None:
    trigger = uid("trg")
    body = {"id": trigger, "source": "s", "summary": "s", "payload": "x" * 5000}
    response = httpx.post(f"{small_limit_server}/triggers", json=body, headers={"Authorization": f"Bearer {api_key}"})
    assert_problem(response, 413)
    assert sql("SELECT count(*) FROM triggers WHERE id = $1", trigger)[0][0] == 0


def test_a_nul_character_in_text_is_a_client_error(client: httpx.Client) -> None:
    response = client.post("/threads", json={"title": "a\u0000b"})
    assert 400 <= response.status_code < 500


@pytest.mark.parametrize("body", [
    {"id": "thr_newline\n", "title": "t"},  # Python's $ matched before a final newline: an ID no GET could reach
    {"title": "a title\n"},
    {"title": "t", "summary": "one line\n"},
    {"title": "t", "app_id": "router-1\n"},
])
def test_a_final_newline_is_not_one_line_and_writes_nothing(client: httpx.Client, body: dict) -> None:
    before = client.get("/threads", params={"limit": 500}).json()["data"]
    assert_problem(client.post("/threads", json=body), 400)
    assert client.get("/threads", params={"limit": 500}).json()["data"] == before


# ---- characters drawn as nothing, and spellings that look alike -----------------------------------------

DRAWN_AS_NOTHING = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u034f", "\ufe0f", "\u180e",
                    "\U000e0041"]


@pytest.mark.parametrize("char", DRAWN_AS_NOTHING)
def test_free_text_is_stored_without_characters_drawn_as_nothing(client: httpx.Client, graph: Graph,
                                                                  char: str) -> None:
    """Titles, summaries, names and labels are stored as a reader sees them: a zero-width space, joiner, word
    joiner, byte order mark, soft hyphen, variation selector or tag character is dropped (text.free_text), so
    "refu\u200bnds" is stored, shown and searched as "refunds"."""
    thread = client.post("/threads", json={"title": f"refu{char}nds", "summary": f"{char}late"}).json()
    assert (thread["title"], thread["summary"]) == ("refunds", "late")
    assert client.get(f"/threads/{thread['id']}").json()["title"] == "refunds"
    patched = client.patch(f"/threads/{thread['id']}", json={"title": f"re{char}opened"})
    assert patched.json()["title"] == "reopened", patched.text
    worker = client.post("/workers", json={"name": f"bot{char}", "summary": "s"}).json()
    assert worker["name"] == "bot"
    note = client.post(f"/threads/{thread['id']}/events", json={"summary": f"ship{char}ped"})
    assert note.json()["summary"] == "shipped", note.text
    memory = client.post("/memories", json={"namespace": ["t", uid("n")], "key": "k", "value": 1,
                                            "summary": f"to{char}ne"}).json()
    assert memory["summary"] == "tone"


def test_free_text_is_stored_in_unicode_nfc(client: httpx.Client) -> None:
    """Composed and decomposed `café` are one spelling in free text too; a combining mark that a zero-width
    space held apart from its letter composes with it once the space is dropped."""
    for title in ("caf\u00e9", "cafe\u0301", "cafe\u200b\u0301"):
        made = client.post("/threads", json={"title": title}).json()
        assert made["title"] == "caf\u00e9", made


@pytest.mark.parametrize("body, field", [
    ({"title": "\u200b\u2060"}, "title"),  # nothing left of it
    ({"title": "\u0958" * 120}, "title"),  # NFC decomposes U+0958 (a composition exclusion): 240 characters
    ({"title": "t", "summary": "\u0958" * 101}, "summary"),
])
def test_free_text_emptied_or_grown_past_its_limit_is_400_naming_the_field(client: httpx.Client, body: dict,
                                                                           field: str) -> None:
    before = client.get("/threads", params={"limit": 500}).json()["data"]
    problem = assert_problem(client.post("/threads", json=body), 400)
    assert f"{field} must be" in problem["detail"] and "Unicode NFC" in problem["detail"], problem
    assert client.get("/threads", params={"limit": 500}).json()["data"] == before
