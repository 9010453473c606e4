"""Contract 4: cursors page a thread's log with every event exactly once, in order, while it grows; and a list of
large items within a page byte budget, each item still once."""

from __future__ import annotations

import base64
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from helpers import Graph, assert_problem, create_key, uid

from recall_server.cursor import PAGE_BYTES, json_size


def walk(client: httpx.Client, path: str, limit: int, cursor: str | None = None) -> tuple[list[dict], str | None]:
    items: list[dict] = []
    while True:
        params = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        page = client.get(path, params=params)
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["data"]
        cursor = body["next_cursor"]
        if not body["has_more"]:
            return items, cursor
        assert page.headers["link"].endswith('rel="next"')


def test_paging_while_others_append_yields_every_seq_once_in_order(base_url: str, api_key: str, graph: Graph) -> None:
    thread = graph.thread()["id"]
    writers, per_writer = 4, 40
    done = threading.Event()

    def append(n: int) -> None:
        with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
            for i in range(per_writer):
                response = c.post(f"/threads/{thread}/events", json={"summary": f"w{n} e{i}"})
                assert response.status_code == 201, response.text

    def page_concurrently() -> list[int]:
        seen: list[int] = []
        with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
            cursor = None
            while True:
                finished = done.is_set()  # read before the page, so the page sees every append
                response = c.get(f"/threads/{thread}/events",
                                 params={"limit": 3, **({"cursor": cursor} if cursor else {})})
                assert response.status_code == 200, response.text
                body = response.json()
                seen += [e["seq"] for e in body["data"]]
                cursor = body["next_cursor"]
                if finished and not body["has_more"]:
                    return seen

    with ThreadPoolExecutor(writers + 1) as pool:
        reader = pool.submit(page_concurrently)
        for future in [pool.submit(append, n) for n in range(writers)]:
            future.result()
        done.set()
        seen = reader.result(timeout=120)
    assert seen == list(range(1, writers * per_writer + 1))


def test_an_old_cursor_keeps_working_after_more_appends(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    for i in range(5):
        graph.note(thread, f"e{i}")
    first = client.get(f"/threads/{thread}/events", params={"limit": 2}).json()
    assert [e["seq"] for e in first["data"]] == [1, 2]
    for i in range(5, 8):
        graph.note(thread, f"e{i}")
    rest, _ = walk(client, f"/threads/{thread}/events", 2, first["next_cursor"])
    assert [e["seq"] for e in rest] == [3, 4, 5, 6, 7, 8]


def test_the_last_cursor_picks_up_events_appended_later(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    graph.note(thread, "one")
    items, tail = walk(client, f"/threads/{thread}/events", 10)
    assert [e["summary"] for e in items] == ["one"] and tail
    graph.note(thread, "two")
    later, _ = walk(client, f"/threads/{thread}/events", 10, tail)
    assert [e["summary"] for e in later] == ["two"]


def test_events_carry_seq_type_at_summary_and_ref(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    trigger = graph.trigger(thread_id=thread, summary="filed here")
    event = client.get(f"/threads/{thread}/events").json()["data"][0]
    assert event.keys() == {"seq", "type", "at", "summary", "ref"}
    assert (event["seq"], event["type"], event["summary"], event["ref"]) == (1, "trigger_filed", "filed here",
                                                                             trigger["id"])


@pytest.mark.parametrize("mangle", [
    lambda c: c[:-1],
    lambda c: c[:5],
    lambda c: "A" + c[1:] if c[0] != "A" else "B" + c[1:],
    lambda c: c.replace(".", ""),
    lambda c: "WzJd." + c.split(".")[1],  # a forged position ([2]) under the real signature of [1]
    lambda c: "garbage",
    lambda c: c + "=",
])
def test_a_forged_or_corrupted_cursor_is_a_400_problem(client: httpx.Client, graph: Graph, mangle) -> None:
    thread = graph.thread()["id"]
    for i in range(3):
        graph.note(thread, f"e{i}")
    cursor = client.get(f"/threads/{thread}/events", params={"limit": 1}).json()["next_cursor"]
    assert_problem(client.get(f"/threads/{thread}/events", params={"cursor": mangle(cursor)}), 400, "cursor")


def test_a_cursor_is_bound_to_the_list_it_came_from(client: httpx.Client, graph: Graph) -> None:
    a, b = graph.thread()["id"], graph.thread()["id"]
    for thread in (a, b):
        graph.note(thread), graph.note(thread)
    cursor = client.get(f"/threads/{a}/events", params={"limit": 1}).json()["next_cursor"]
    assert_problem(client.get(f"/threads/{b}/events", params={"cursor": cursor}), 400)
    assert_problem(client.get("/threads", params={"cursor": cursor}), 400)


def test_a_cursor_from_another_tenant_is_a_400_and_shows_nothing(client: httpx.Client, graph: Graph,
                                                                 database_url: str, base_url: str) -> None:
    """A page is read before the cursor's scope (the key's tenant) is known: it must still not show."""
    worker, thread = graph.worker()["id"], graph.thread(title="mine")["id"]
    graph.thread(title="mine")
    graph.note(thread, "mine")
    for _ in range(2):
        graph.report(worker, thread, summary="mine")
    other = {"Authorization": f"Bearer {create_key(database_url, uid('tenant'), 'read')}"}
    for path in (f"/threads/{thread}/events", "/threads", f"/workers/{worker}/reports"):
        cursor = client.get(path, params={"limit": 1}).json()["next_cursor"]
        assert cursor
        response = httpx.get(f"{base_url}{path}", params={"cursor": cursor}, headers=other)
        assert_problem(response, 400, "cursor")
        assert "mine" not in response.text


def test_an_unknown_key_is_401_before_a_forged_cursor_is_400(base_url: str, graph: Graph) -> None:
    thread = graph.thread()["id"]
    response = httpx.get(f"{base_url}/threads/{thread}/events", params={"cursor": "WzJd.AAAAAAAAAAAAAAAAAAAAAA"},
                         headers={"Authorization": "Bearer rk_0000000000000000." + "A" * 43})
    assert_problem(response, 401)


@pytest.mark.parametrize("limit", [0, -1, 501, "ten"])
def test_out_of_range_limit_is_a_400_problem(client: httpx.Client, graph: Graph, limit) -> None:
    thread = graph.thread()["id"]
    assert_problem(client.get(f"/threads/{thread}/events", params={"limit": limit}), 400)
    assert_problem(client.get("/threads", params={"limit": limit}), 400)


def test_thread_index_pages_newest_first_with_status_and_owner_filters(client: httpx.Client, graph: Graph) -> None:
    worker = graph.worker()["id"]
    status = uid("st")[:30].replace("st_", "st-")
    made = [graph.thread(status=status)["id"] for _ in range(5)]
    for thread in made[:2]:
        client.post(f"/threads/{thread}/owners", json={"worker_id": worker})
    listed, _ = walk_filtered(client, {"status": status})
    assert [t["id"] for t in listed] == list(reversed(made))
    owned, _ = walk_filtered(client, {"owner": worker})
    assert [t["id"] for t in owned] == list(reversed(made[:2]))


def walk_filtered(client: httpx.Client, filters: dict) -> tuple[list[dict], str | None]:
    items, cursor = [], None
    while True:
        body = client.get("/threads", params={"limit": 2, **filters, **({"cursor": cursor} if cursor else {})}).json()
        items += body["data"]
        cursor = body["next_cursor"]
        if not body["has_more"]:
            return items, cursor


def test_worker_reports_page_newest_first(client: httpx.Client, graph: Graph) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    made = [graph.report(worker, thread)["id"] for _ in range(5)]
    items, _ = walk(client, f"/workers/{worker}/reports", 2)
    assert [r["id"] for r in items] == list(reversed(made))
    for r in items:
        assert client.get(r["href"]).status_code == 200


# ---- a page's byte budget (cursor.PAGE_BYTES): lists of large items end early, and still show each once ----

MB = 1_000_000


def pages_of(client: httpx.Client, path: str, **params: Any) -> list[tuple[int, list[dict]]]:
    """Every page of a list at limit=500, following next_cursor while has_more: (its bytes, its items)."""
    pages, cursor = [], None
    while True:
        response = client.get(path, params={"limit": 500, **params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append((len(response.content), body["data"]))
        if not body["has_more"]:
            return pages
        assert body["next_cursor"] and response.headers["link"].endswith('rel="next"')
        cursor = body["next_cursor"]


def assert_within_budget(pages: list[tuple[int, list[dict]]]) -> None:
    """Each page's items take at most PAGE_BYTES of JSON, unless it is one item alone (the response adds only the
    envelope: has_more, next_cursor, brackets and commas)."""
    for size, items in pages:
        assert len(items) == 1 or sum(json_size(i) for i in items) <= PAGE_BYTES, [json_size(i) for i in items]
        assert len(items) == 1 or size <= PAGE_BYTES + 1024


def test_large_checkpoints_page_within_the_byte_budget_each_once(client: httpx.Client) -> None:
    """Newest first: 5 MB (alone: its JSON, base64, passes the budget), three 1.5 MB (two a page), 5 MB, a small
    one: the first two rows of a read are read whatever their size, so a large one alone still says has_more.
    Without the budget, limit=500 was one response of every checkpoint (fifty 6 MB ones: 400 MB)."""
    thread = uid("lg")
    sizes = [5, 1.5, 1.5, 1.5, 5, 0.001]
    for n, mb in enumerate(sizes):
        body = {"thread_id": thread, "checkpoint_id": f"c{len(sizes) - n:02d}", "type": "msgpack",
                "checkpoint": base64.b64encode(os.urandom(int(mb * MB))).decode()}
        assert client.post("/checkpoints", json=body).status_code == 201
    pages = pages_of(client, "/checkpoints", thread_id=thread)
    assert [[c["checkpoint_id"] for c in items] for _, items in pages] == [
        ["c06"], ["c05", "c04"], ["c03"], ["c02"], ["c01"]]
    assert_within_budget(pages)


def test_a_long_conversation_pages_within_the_byte_budget_each_message_once(client: httpx.Client,
                                                                           graph: Graph) -> None:
    """8,000 control characters a message are inlined (8 KiB or less) but take 48,000 bytes of JSON (\\u0001):
    200 of them are 9.6 MB, so limit=500 gives three pages."""
    thread = graph.thread()["id"]
    said = "\x01" * 8000
    for batch in range(2):
        messages = [{"role": "user", "content": said, "metadata": {"n": str(batch * 100 + i)}} for i in range(100)]
        assert client.post(f"/threads/{thread}/messages", json={"messages": messages}).status_code == 201
    for order in ("asc", "desc"):
        pages = pages_of(client, f"/threads/{thread}/messages", order=order)
        assert len(pages) == 3, [len(items) for _, items in pages]
        seqs = [m["seq"] for _, items in pages for m in items]
        assert seqs == (list(range(1, 201)) if order == "asc" else list(range(200, 0, -1)))
        assert all(m["content"] == said for _, items in pages for m in items)
        assert_within_budget(pages)


def test_memories_page_within_the_byte_budget_each_once(client: httpx.Client) -> None:
    """A list entry inlines a value of up to 2 KiB: 2,048 control characters are 12,290 bytes of JSON, so 400 of
    them (4.9 MB) take two pages."""
    namespace = f"budget/{uid('ns')[3:]}"
    value = "\x01" * 2048
    for n in range(400):
        made = client.post("/memories", json={"namespace": namespace.split("/"), "key": f"k{n:03d}",
                                              "value": value, "embed": False})
        assert made.status_code == 201, made.text
    pages = pages_of(client, "/memories", namespace=namespace)
    assert len(pages) == 2, [len(items) for _, items in pages]
    assert [m["key"] for _, items in pages for m in items] == [f"k{n:03d}" for n in range(400)]
    assert all(m["value"] == value for _, items in pages for m in items)
    assert_within_budget(pages)
