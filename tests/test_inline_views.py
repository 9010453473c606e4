"""Inline views fit their budget however large the object, and every href they emit resolves."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from helpers import Graph, assert_problem

from recall_server import demo, ids, spill


def hrefs(value: Any) -> list[str]:
    """Every server-emitted path in a response (`href` members, `links` values) and every linked ID's path."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "href" and isinstance(item, str):
                found.append(item)
            elif key in ("id", "ref", "thread_id", "worker_id") and isinstance(item, str) and ids.kind_of(item):
                found.append(ids.href(item))
            elif key == "refs" and isinstance(item, list) and all(isinstance(i, str) for i in item):
                found += [ids.href(i) for i in item]
            elif key == "links" and isinstance(item, dict):
                found += list(item.values())
            else:
                found += hrefs(item)
    elif isinstance(value, list):
        for item in value:
            found += hrefs(item)
    return found


def add_events(sql, thread_id: str, n: int) -> None:
    """Bulk-append n notes the way append_event does (seq from last_seq), in one statement, then render
    the thread's head from the log as the server's other writers do (recall_rebuild_head)."""
    sql(
        """
        WITH s AS (UPDATE threads SET last_seq = last_seq + $3 WHERE tenant_id = 'default' AND id = $1
                   RETURNING last_seq - $3 AS base)
        INSERT INTO thread_events (tenant_id, thread_id, seq, type, summary, ref)
        SELECT 'default', $1, s.base + g, 'note', $2 || g, NULL FROM s, generate_series(1, $3) g
        """,
        thread_id, "bulk note number ", n,
    )
    sql("SELECT recall_rebuild_head('default', $1)", thread_id)


@pytest.mark.slow
def test_a_thread_with_100k_events_still_returns_a_view_within_budget(client: httpx.Client, graph: Graph,
                                                                      sql) -> None:
    small, big = graph.thread(title="same"), graph.thread(title="same")
    add_events(sql, small["id"], spill.RECENT)
    add_events(sql, big["id"], 100_000)
    small_view = client.get(f"/threads/{small['id']}")
    big_view = client.get(f"/threads/{big['id']}")
    assert len(big_view.content) <= spill.DEFAULT_BUDGET
    body = big_view.json()
    assert body["events_total"] == 100_000
    seqs = [e["seq"] for e in body["events"]]
    assert seqs == list(range(100_001 - len(seqs), 100_001)), "the newest events, in order"
    assert body["links"]["events"] == f"/threads/{big['id']}/events"
    assert len(seqs) == spill.RECENT == len(small_view.json()["events"])
    # the same view but for the digits of seq, events_total and the note numbers (4 + 5 + 4 per event)
    grown = len(big_view.content) - len(small_view.content)
    assert 0 < grown <= 13 * spill.RECENT + 5, "size does not grow with the log"
    for budget in (spill.MIN_BUDGET, 10_000, 65_536):
        assert len(client.get(f"/threads/{big['id']}", params={"budget": budget}).content) <= budget


def test_every_view_respects_any_allowed_budget(base_url: str, api_key: str, client: httpx.Client) -> None:
    demo.load(base_url, api_key)
    for path in ("/threads/thr_pr_412", "/workers/wkr_77a0", "/triggers/trg_8f21", "/reports/rpt_412a"):
        for budget in (spill.MIN_BUDGET, 5000, 50_000, spill.MAX_BUDGET):
            response = client.get(path, params={"budget": budget})
            assert response.status_code == 200
            assert len(response.content) <= budget, (path, budget)


def test_a_bigger_budget_inlines_the_payload(base_url: str, api_key: str, client: httpx.Client) -> None:
    demo.load(base_url, api_key)
    view = client.get("/triggers/trg_8f21", params={"budget": 100_000}).json()
    assert view["payload"] == demo.ci_log()
    assert "spilled" not in view


@pytest.mark.parametrize("budget", [0, spill.MIN_BUDGET - 1, spill.MAX_BUDGET + 1, "big"])
def test_a_budget_out_of_range_is_a_400_problem(client: httpx.Client, graph: Graph, budget) -> None:
    thread = graph.thread()["id"]
    assert_problem(client.get(f"/threads/{thread}", params={"budget": budget}), 400)


def test_every_emitted_href_and_linked_id_resolves(
    base_url: str, api_key: str, client: httpx.Client, graph: Graph
) -> None:
    demo.load(base_url, api_key)
    extra = graph.thread()
    for i in range(3):
        graph.note(extra["id"], f"n{i}")
    start = ["/threads/thr_pr_412", f"/threads/{extra['id']}", "/threads?limit=2",
             "/threads/thr_pr_412/events?limit=2", "/workers/wkr_77a0/reports", "/ids/rpt_412a"]
    seen: set[str] = set()
    queue = list(start)
    while queue:
        path = queue.pop()
        if path in seen:
            continue
        seen.add(path)
        response = client.get(path)
        assert response.status_code == 200, (path, response.text[:300])
        if response.headers["content-type"].startswith("application/json"):
            queue += [h for h in hrefs(response.json()) if h not in seen]
    assert len(seen) > 15, seen


def test_links_beyond_their_summaries_keep_their_ids(client: httpx.Client, graph: Graph) -> None:
    neighbours = [graph.trigger(summary="x" * 200)["id"] for _ in range(16)]
    view = client.get(f"/triggers/{graph.trigger(neighbours=neighbours)['id']}").json()
    assert [n["id"] for n in view["neighbours"]] == neighbours


def test_a_workers_view_counts_every_thread_it_owned_and_report_it_filed(client: httpx.Client, graph: Graph) -> None:
    worker = graph.worker()["id"]
    threads = [graph.thread()["id"] for _ in range(3)]
    for thread in threads:
        for _ in range(2):  # assigning an owner twice makes one ownership
            assert client.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code in (200, 201)
    reports = [graph.report(worker, threads[0])["id"] for _ in range(spill.RECENT + 2)]
    again = {"id": reports[0], "thread_id": threads[0], "summary": "a report", "body": "text"}
    assert client.post(f"/workers/{worker}/reports", json=again).status_code == 200  # a retry files nothing new
    assert client.delete(f"/reports/{reports[1]}").status_code == 204  # deleted, still filed: the ID is retired
    view = client.get(f"/workers/{worker}").json()
    assert (view["threads_total"], view["reports_total"]) == (3, spill.RECENT + 2)
    assert len(view["reports"]) == spill.RECENT, "the newest ten; the rest are one page away"
