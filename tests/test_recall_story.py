"""The PR #412 story, end to end over HTTP, as an agent would recall it."""

from __future__ import annotations

import httpx

from recall_server import demo


def test_three_hops_from_the_thread_id_reach_the_payment_timeout(
    base_url: str, api_key: str, client: httpx.Client
) -> None:
    demo.load(base_url, api_key)
    inline_bytes = 0

    thread = client.get("/threads/thr_pr_412")  # hop 1: the thread's inline view
    assert thread.status_code == 200
    inline_bytes += len(thread.content)
    assert thread.json()["status"] == "merged"
    owner = thread.json()["owner_workers"][0]
    assert owner["id"] == "wkr_77a0" and owner["summary"]

    worker = client.get(f"/workers/{owner['id']}")  # hop 2: the owner, with the reports it filed
    assert worker.status_code == 200
    inline_bytes += len(worker.content)
    report = worker.json()["reports"][0]
    assert report["refs"] == ["trg_8f21"]

    payload = client.get(f"/triggers/{report['refs'][0]}/payload")  # hop 3: the spilled CI log
    assert payload.status_code == 200
    assert payload.headers["content-type"].startswith("text/plain")
    assert len(payload.content) > 40_000
    assert "payment timeout" in payload.text

    assert inline_bytes < 4096, "the hops before the payload read only a few KB of inline views"


def test_the_big_log_is_spilled_behind_a_pointer_with_a_preview(
    base_url: str, api_key: str, client: httpx.Client
) -> None:
    demo.load(base_url, api_key)
    view = client.get("/triggers/trg_8f21").json()
    spilled = view["spilled"]["payload"]
    assert "payload" not in view
    assert spilled["href"] == "/triggers/trg_8f21/payload"
    assert spilled["bytes"] == len(demo.ci_log().encode())
    assert spilled["content_type"] == "text/plain"
    assert demo.ci_log().startswith(spilled["preview"]) and spilled["preview"]
    assert "truncated" in spilled["hint"]
    assert view["neighbours"] == [{"id": "trg_8f1c", "summary": "review comment asking for retry logic"}]


def test_loading_the_story_twice_changes_nothing(base_url: str, api_key: str, client: httpx.Client) -> None:
    demo.load(base_url, api_key)
    before = client.get("/threads/thr_pr_412").json()
    demo.load(base_url, api_key)
    assert client.get("/threads/thr_pr_412").json() == before


def test_demo_prints_the_recalled_line(base_url: str, api_key: str) -> None:
    lines: list[str] = []
    demo.run(base_url, api_key, lines.append)
    assert "payment timeout" in lines[-1]
