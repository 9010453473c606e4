"""The four recall contracts, portable: run unchanged against any deployment.

    RECALL_BASE_URL=https://recall.example.internal RECALL_API_KEY=rk_... \
        .venv/bin/python -m pytest contract_tests/test_recall_contracts.py

Every object is created under a fresh unique ID; nothing is deleted or truncated, so a shared
deployment stays usable.
"""

from __future__ import annotations

import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

KINDS = {"thr": "/threads/{}", "wkr": "/workers/{}", "trg": "/triggers/{}", "rpt": "/reports/{}",
         "mem": "/memories/{}"}
ID = re.compile(r"^(trg|thr|wkr|rpt|mem)_[A-Za-z0-9_-]{1,64}$")


def new_id(prefix: str) -> str:
    return f"{prefix}_ct{uuid.uuid4().hex}"


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    return response.json()


def assert_miss(response: httpx.Response, value: str) -> None:
    assert response.status_code == 404, f"a miss must be a 404 problem, got {response.status_code}: {value}"
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert {"type", "title", "status", "detail", "instance"} <= body.keys()
    assert value in response.text


@pytest.fixture()
def story(client: httpx.Client) -> dict[str, str]:
    """A small graph: worker owns thread; two linked triggers on it; a report citing one; a memory learned
    from a trigger and the report (spilled value), superseded by a second version."""
    worker = created(client.post("/workers", json={"id": new_id("wkr"), "name": "contract", "summary": "w"}))["id"]
    thread = created(client.post("/threads", json={"id": new_id("thr"), "title": "contract", "summary": "t"}))["id"]
    assert client.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code == 201
    first = created(client.post("/triggers", json={"id": new_id("trg"), "source": "contract", "summary": "first",
                                                   "thread_id": thread, "payload": {"n": 1}}))["id"]
    second = created(client.post("/triggers", json={
        "id": new_id("trg"), "source": "contract", "summary": "second", "thread_id": thread,
        "neighbours": [first], "content_type": "text/plain", "payload": "x" * 20_000}))["id"]
    report = created(client.post(f"/workers/{worker}/reports", json={
        "id": new_id("rpt"), "thread_id": thread, "summary": "r", "body": "done", "refs": [second]}))["id"]
    space = ["contract", uuid.uuid4().hex]
    memory = created(client.post("/memories", json={
        "id": new_id("mem"), "namespace": space, "key": "k", "summary": "m", "content_type": "text/plain",
        "value": "y" * 20_000, "sources": [first, report]}))["id"]
    current = created(client.post("/memories", json={"namespace": space, "key": "k", "value": {"v": 2},
                                                     "sources": [memory]}))["id"]
    return {"worker": worker, "thread": thread, "first": first, "second": second, "report": report,
            "memory": memory, "current_memory": current}


# ---- 1. an ID resolves to the same record, and every ID it links to resolves ------------


def linked_ids(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        for item in value.values():
            found |= linked_ids(item)
    elif isinstance(value, list):
        for item in value:
            found |= linked_ids(item)
    elif isinstance(value, str) and ID.match(value):
        found.add(value)
    return found


def test_created_ids_resolve_to_the_same_record_and_their_links_resolve(client: httpx.Client, story) -> None:
    for value in story.values():
        path = KINDS[value[:3]].format(value)
        first, second = client.get(path), client.get(path)
        assert first.status_code == second.status_code == 200
        assert first.json() == second.json()
        assert first.json()["id"] == value
        for link in linked_ids(first.json()):
            assert client.get(KINDS[link[:3]].format(link)).status_code == 200, (value, link)
        resolved = client.get(f"/ids/{value}").json()
        assert resolved["id"] == value and resolved["href"] == path


# ---- 2. misses are loud ---------------------------------------------------------------


@pytest.mark.parametrize("prefix", sorted(KINDS))
def test_unknown_ids_of_every_kind_are_404_problems_naming_the_id(client: httpx.Client, prefix: str) -> None:
    value = new_id(prefix)
    assert_miss(client.get(KINDS[prefix].format(value)), value)
    assert_miss(client.get(f"/ids/{value}"), value)


@pytest.mark.parametrize("value", ["not-an-id", "thr_", "xyz_123", "thr_has.dot"])
def test_malformed_ids_are_404_problems_naming_the_id(client: httpx.Client, value: str) -> None:
    for template in KINDS.values():
        assert_miss(client.get(template.format(value)), value)


def test_wrong_kind_ids_are_404_problems_naming_the_id(client: httpx.Client, story) -> None:
    assert_miss(client.get(f"/threads/{story['first']}"), story["first"])
    assert_miss(client.get(f"/workers/{story['thread']}"), story["thread"])
    assert_miss(client.get(f"/triggers/{story['report']}"), story["report"])
    assert_miss(client.get(f"/reports/{story['worker']}"), story["worker"])
    assert_miss(client.get(f"/memories/{story['report']}"), story["report"])
    assert_miss(client.get(f"/threads/{story['memory']}"), story["memory"])


# ---- 3. cursors are lossless under concurrent appends -----------------------------------


def test_paging_events_while_another_client_appends_sees_each_once_in_order(
    client: httpx.Client, base_url: str, story
) -> None:
    thread = story["thread"]
    appended = 60
    headers = dict(client.headers)

    def writer() -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=30) as c:
            for i in range(appended):
                assert c.post(f"/threads/{thread}/events", json={"summary": f"note {i}"}).status_code == 201

    seqs: list[int] = []
    cursor = None
    with ThreadPoolExecutor(1) as pool:
        writing = pool.submit(writer)
        while True:
            finished = writing.done()  # read before the page, so the last page sees every append
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = client.get(f"/threads/{thread}/events", params=params)
            assert page.status_code == 200, f"an event page was refused ({page.status_code}): {page.text[:300]}"
            body = page.json()
            seqs += [e["seq"] for e in body["data"]]
            cursor = body["next_cursor"]
            if finished and not body["has_more"]:
                break
        writing.result()
    total = client.get(f"/threads/{thread}").json()["events_total"]
    missing = sorted(set(range(1, total + 1)) - set(seqs))
    assert seqs == list(range(1, total + 1)), f"events skipped or repeated: missing seqs {missing[:10]}"
    assert total >= appended + 4


def test_an_old_cursor_still_works_after_more_appends(client: httpx.Client, story) -> None:
    thread = story["thread"]
    page = client.get(f"/threads/{thread}/events", params={"limit": 1}).json()
    assert [e["seq"] for e in page["data"]] == [1]
    for i in range(3):
        client.post(f"/threads/{thread}/events", json={"summary": f"later {i}"})
    rest = client.get(f"/threads/{thread}/events", params={"limit": 500, "cursor": page["next_cursor"]}).json()
    assert [e["seq"] for e in rest["data"]] == list(range(2, len(rest["data"]) + 2))
    assert rest["data"][-1]["summary"] == "later 2"


# ---- 4. every href resolves -------------------------------------------------------------


def hrefs(value: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "href" and isinstance(item, str):
                found.add(item)
            elif key == "links" and isinstance(item, dict):
                found |= set(item.values())
            else:
                found |= hrefs(item)
    elif isinstance(value, list):
        for item in value:
            found |= hrefs(item)
    return found


def test_every_href_in_every_response_resolves(client: httpx.Client, story) -> None:
    queue = [KINDS[v[:3]].format(v) for v in story.values()]
    queue += [f"/threads/{story['thread']}/events?limit=2", f"/workers/{story['worker']}/reports",
              f"/ids/{story['report']}", "/threads?limit=3", "/memories?limit=3",
              f"/memories/{story['memory']}/versions?limit=1", "/memories/namespaces?limit=3"]
    seen: set[str] = set()
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        response = client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        if response.headers["content-type"].startswith("application/json"):
            queue += sorted(hrefs(response.json()) - seen)
    assert f"/triggers/{story['second']}/payload" in seen, "the spilled payload's href was followed"
    assert f"/memories/{story['memory']}/value" in seen, "the spilled value's href was followed"


# ---- 5. forged cursors are 400 ----------------------------------------------------------


def test_forged_or_truncated_cursors_are_400_problems(client: httpx.Client, story) -> None:
    path = f"/threads/{story['thread']}/events"
    cursor = client.get(path, params={"limit": 1}).json()["next_cursor"]
    for bad in (cursor[:-2], cursor[: len(cursor) // 2], "x" + cursor, cursor.replace(".", ".A"), "forged.cursor"):
        response = client.get(path, params={"cursor": bad})
        assert response.status_code == 400, (bad, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")


def test_forged_memory_version_cursors_and_cursors_of_another_list_are_400(client: httpx.Client, story) -> None:
    path = f"/memories/{story['memory']}/versions"
    cursor = client.get(path, params={"limit": 1}).json()["next_cursor"]
    assert cursor, "two versions, one per page: there is a next page"
    for bad in (cursor[:-2], "x" + cursor, "forged.cursor"):
        assert client.get(path, params={"cursor": bad}).status_code == 400, bad
    # the same position signed for another memory's versions is not this list's cursor
    other = f"/memories/{story['current_memory']}/versions"
    assert client.get(other, params={"cursor": cursor}).status_code == 400
