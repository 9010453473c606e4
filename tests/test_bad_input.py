"""Bad input gets a 4xx problem body, never a 5xx, and nothing is half-written."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, uid
from jsonschema import Draft202012Validator

from recall_server import config
from recall_server.app import create_app
from recall_server.openapi import document

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


# ---- what the schema allows, the server takes; what it refuses, the schema says ----------------------


@pytest.fixture(scope="module")
def published() -> dict:
    """The document `recall-server openapi` writes (what the server serves), from the code under test."""
    return document(create_app(config.Settings(database_url="postgresql://unused")))


def parameter(doc: dict, path: str, name: str) -> dict:
    return next(p for p in doc["paths"][path]["get"]["parameters"] if p["name"] == name)


def checkpoint(thread: str, checkpoint_id: str, metadata: object) -> dict:
    return {"thread_id": thread, "checkpoint_id": checkpoint_id, "type": "msgpack", "checkpoint": "",
            "metadata": metadata}


@pytest.mark.parametrize(("tag", "status"), [("", 400), ("lang", 400), (":en", 400), ("lang:", 200),
                                             ("lang:en", 200), ("url:https://x", 200)])
def test_a_tag_filter_is_key_colon_value_as_its_published_items_pattern_says(
        client: httpx.Client, published: dict, tag: str, status: int) -> None:
    items = parameter(published, "/memories", "tag")["schema"]["oneOf"][0]["items"]
    assert bool(re.search(items["pattern"], tag)) == (status == 200)
    response = client.get("/memories", params={"tag": tag})
    assert response.status_code == status, response.text
    if status == 400:
        assert_problem(response, 400, "tag")


def test_one_tag_key_given_two_values_matches_no_memory(client: httpx.Client) -> None:
    space = ["t", uid("thr")[4:]]
    made = client.post("/memories", json={"namespace": space, "key": "k", "value": 1, "tags": {"lang": "en"}})
    assert made.status_code == 201, made.text
    one = client.get("/memories", params={"namespace": "/".join(space), "tag": ["lang:en"]}).json()
    assert [m["key"] for m in one["data"]] == ["k"]
    both = client.get("/memories", params={"namespace": "/".join(space), "tag": ["lang:en", "lang:de"]})
    assert both.status_code == 200, both.text
    assert both.json() == {"data": [], "next_cursor": None, "has_more": False}
    assert_problem(client.get("/memories", params={"tag": ["lang:en", "lang:de"], "cursor": "abc.def"}), 400,
                   "Invalid cursor")  # reading no row still checks the cursor


@pytest.mark.parametrize(("path", "name"), [("/checkpoints", "metadata_contains"), ("/memories", "value_contains")])
def test_a_json_filter_is_published_as_a_json_object(published: dict, path: str, name: str) -> None:
    param = parameter(published, path, name)
    assert "schema" not in param and param["content"] == {"application/json": {"schema": {"type": "object"}}}
    assert "At most 4096 characters of JSON" in param["description"]


def test_a_metadata_filter_holding_a_nul_matches_no_checkpoint(client: httpx.Client) -> None:
    """No stored metadata holds a NUL (a put refuses one), so such a filter, a JSON object as published, is
    an empty page, not jsonb's refusal."""
    thread = uid("lg")
    assert client.post("/checkpoints", json=checkpoint(thread, "c1", {"step": "a"})).status_code == 201
    for contains in ('{"step": "a\\u0000"}', '{"st\\u0000ep": "a"}'):
        page = client.get("/checkpoints", params={"thread_id": thread, "metadata_contains": contains})
        assert page.status_code == 200 and page.json()["data"] == [], page.text
    found = client.get("/checkpoints", params={"thread_id": thread, "metadata_contains": '{"step": "a"}'}).json()
    assert [c["checkpoint_id"] for c in found["data"]] == ["c1"]


@pytest.mark.parametrize(("metadata", "stored"), [
    ({"source": "a\u0000b"}, False), ({"a\u0000": 1}, False), ({"deep": [{"x": ["\u0000"]}]}, False),
    ({"source": "a\\u0000b"}, True),  # a backslash, then the text u0000: no NUL
    ({"step": 1, "writes": {"node": ["x"]}}, True),
])
def test_checkpoint_metadata_with_a_nul_is_refused_naming_the_field_as_the_schema_says(
        client: httpx.Client, published: dict, metadata: dict, stored: bool) -> None:
    body = checkpoint(uid("lg"), "c1", metadata)
    schema = Draft202012Validator({"$ref": "#/components/schemas/PutCheckpoint", **published})
    assert schema.is_valid(body) == stored
    response = client.post("/checkpoints", json=body)
    if stored:
        assert response.status_code == 201, response.text
    else:
        assert assert_problem(response, 400, "NUL")["field"] == "metadata"


def test_a_checkpoint_thread_copied_onto_itself_copies_nothing(client: httpx.Client) -> None:
    """Two equal fields are a request no JSON Schema can refuse: the copy is LangGraph's savers' no-op."""
    thread = uid("lg")
    assert client.post("/checkpoints", json=checkpoint(thread, "c1", {})).status_code == 201
    copied = client.post("/checkpoints/copy", json={"source_thread_id": thread, "target_thread_id": thread})
    assert copied.status_code == 200 and copied.json() == {"checkpoints": 0}, copied.text
    assert [c["checkpoint_id"] for c in client.get("/checkpoints", params={"thread_id": thread}).json()["data"]] \
        == ["c1"]
    missing = uid("lg")
    assert_problem(client.post("/checkpoints/copy", json={"source_thread_id": missing, "target_thread_id": missing}),
                   404)


@pytest.mark.parametrize(("since", "until", "shown"), [
    ("0001-01-01T00:00:00+01:00", None, True),  # before the year 1 in UTC: every message is after it
    (None, "9999-12-31T23:59:59-01:00", True),  # after the year 9999 in UTC: every message is before it
    ("9999-12-31T23:59:59-01:00", None, False),
    (None, "0001-01-01T00:00:00+01:00", False),
])
def test_message_bounds_take_every_date_time_the_schema_allows(
        client: httpx.Client, graph: Graph, published: dict, since: str | None, until: str | None,
        shown: bool) -> None:
    for name in ("since", "until"):
        assert parameter(published, "/threads/{thread_id}/messages", name)["schema"]["oneOf"][0]["format"] \
            == "date-time"
    thread = graph.thread()["id"]
    assert client.post(f"/threads/{thread}/messages", json={"messages": [
        {"role": "user", "content": "hello"}]}).status_code == 201
    params = {k: v for k, v in (("since", since), ("until", until)) if v}
    page = client.get(f"/threads/{thread}/messages", params=params)
    assert page.status_code == 200, page.text
    assert len(page.json()["data"]) == (1 if shown else 0)
    assert_problem(client.get(f"/threads/{thread}/messages", params={"since": "2026-01-01T00:00:00"}), 400,
                   "UTC offset")


@pytest.mark.parametrize(("at", "stored"), [
    ("0001-01-01T00:00:00+01:00", False),  # the year 0 in UTC
    ("0001-01-01T23:00:00+01:00", False),  # the published rule is by day and sign, and so is the server's
    ("0001-01-01T00:00:00Z", True), ("0001-01-01T00:00:00-05:00", True), ("0001-01-02T00:00:00+23:59", True),
    ("9999-12-31T23:00:00-05:00", False), ("9999-12-31T23:59:59Z", True), ("9999-12-31T23:59:59-00:00", True),
])
def test_a_stored_time_lies_within_the_years_1_to_9999_in_utc_as_the_schema_says(
        client: httpx.Client, graph: Graph, published: dict, at: str, stored: bool) -> None:
    schema = Draft202012Validator({"$ref": "#/components/schemas/AppendMessages", **published})
    thread = graph.thread()["id"]
    body = {"messages": [{"role": "user", "content": "hello", "at": at}]}
    assert schema.is_valid(body) == stored
    said = client.post(f"/threads/{thread}/messages", json=body)
    trigger = client.post("/triggers", json={"source": "s", "summary": "s", "occurred_at": at})
    if stored:
        assert said.status_code == 201 and trigger.status_code == 201, (said.text, trigger.text)
    else:
        assert assert_problem(said, 400, "years 1-9999 in UTC")["field"] == "messages[0].at"
        assert assert_problem(trigger, 400, "years 1-9999 in UTC")["field"] == "occurred_at"
