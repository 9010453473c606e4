"""The PR #412 story, end to end over HTTP, as an agent would recall it."""

from __future__ import annotations

import re

import httpx

from recall_server import demo


def split_preview(preview: str) -> tuple[str, int, str]:
    """(head, bytes skipped, tail) of a head-and-tail text preview."""
    head, skipped, tail = re.fullmatch(r"(?s)(.*)\n…\[([\d,]+) bytes skipped\]…\n(.*)", preview).groups()
    return head, int(skipped.replace(",", "")), tail


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


def test_why_did_ci_fail_on_pr_412_in_three_hops_and_under_4_kb(
    base_url: str, api_key: str, client: httpx.Client
) -> None:
    """From thr_pr_412 alone: the thread, its owner, then a grep of the cited payload; every byte counted."""
    demo.load(base_url, api_key)
    read = 0

    thread = client.get("/threads/thr_pr_412")  # hop 1
    read += len(thread.content)
    owner = thread.json()["owner_workers"][0]["id"]

    worker = client.get(f"/workers/{owner}")  # hop 2
    read += len(worker.content)
    cited = next(r["refs"][0] for r in worker.json()["reports"] if r.get("refs"))

    found = client.get(f"/triggers/{cited}/payload/grep", params={"pattern": "payment timeout"})  # hop 3
    read += len(found.content)
    assert found.status_code == 200, found.text
    [match] = found.json()["matches"]
    assert match["lines"][0]["text"] == (
        "FAILED payments/test_client.py::test_retry_charge - PaymentGatewayError: payment timeout after 30s")
    assert match["line"] == 201
    assert read < 4096, f"read {read} bytes in three hops"
    print(f"PR #412 recall: 3 hops, {read} response bytes "
          f"({len(thread.content)} + {len(worker.content)} + {len(found.content)})")


def test_search_finds_the_story_from_a_phrase_and_backlinks_lead_back_to_it(
    base_url: str, api_key: str, client: httpx.Client
) -> None:
    demo.load(base_url, api_key)
    hits = client.get("/search", params={"q": '"payment timeout"'}).json()["data"]
    assert {"trg_8f21", "rpt_412a"} <= {h["id"] for h in hits}
    backlinks = client.get("/ids/trg_8f21/backlinks").json()["data"]
    assert {(b["relation"], b["id"]) for b in backlinks} >= {("cites", "rpt_412a"), ("event", "thr_pr_412")}
    thread_links = client.get("/ids/thr_pr_412/backlinks").json()["data"]
    assert {("thread", "trg_8f21"), ("thread", "rpt_412a"), ("thread", "trg_8f1c")} <= {
        (b["relation"], b["id"]) for b in thread_links}


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
    head, skipped, tail = split_preview(spilled["preview"])
    assert demo.ci_log().startswith(head) and demo.ci_log().endswith(tail) and head and tail
    assert len(head.encode()) + skipped + len(tail.encode()) == spilled["bytes"]
    assert tail.endswith("=== 3 failed, 115 passed in 412.31s ===\n"), "a log's end is in its preview"
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
    assert lines[-1].startswith("found: FAILED") and "payment timeout after 30s" in lines[-1]
    hops = [line for line in lines if line.startswith("GET ")]
    assert len(hops) == 3 and hops[-1].startswith("GET /triggers/trg_8f21/payload/grep")
    read = sum(int(line.rsplit("(", 1)[1].split()[0]) for line in hops)
    assert read < 4096, lines  # the views and the one matching line, not the 40 KB log


def test_demo_with_a_read_key_says_it_needs_a_write_key(base_url: str, database_url: str) -> None:
    import os
    import subprocess
    import sys

    from helpers import create_key

    read_key = create_key(database_url, "default", "read")
    done = subprocess.run([sys.executable, "-m", "recall_server", "demo", "--url", base_url, "--key", read_key],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "DATABASE_URL": database_url})
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "demo writes the PR #412 story, so it needs a write key; this one has read scope" in done.stderr
    assert "--scope write" in done.stderr


def test_the_cli_tells_its_version() -> None:
    import subprocess
    import sys

    from recall_server import __version__

    done = subprocess.run([sys.executable, "-m", "recall_server", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"recall-server, version {__version__}"
