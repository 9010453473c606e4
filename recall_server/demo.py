"""The PR #412 story: load it into a running server over HTTP and recall it hop by hop."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


def ci_log() -> str:
    """A ~41 KB CI log with one payment timeout buried in the middle."""
    lines = [f"PASSED payments/test_ledger.py::test_case_{i:04d} [{i % 100:3d}%]" for i in range(420)]
    lines[200] = "FAILED payments/test_client.py::test_retry_charge - PaymentGatewayError: payment timeout after 30s"
    lines += [f"PASSED checkout/test_cart.py::test_item_{i:04d}" for i in range(400)]
    lines.append("=== 3 failed, 115 passed in 412.31s ===")
    return "\n".join(lines) + "\n"


STORY: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/workers", {"id": "wkr_77a0", "name": "payments-fixer",
                          "summary": "sub-agent that fixes payment retries"}),
    ("POST", "/threads", {"id": "thr_pr_412", "title": "payments retry PR",
                          "summary": "PR #412: add retry logic to the payments client", "status": "open"}),
    ("POST", "/threads/thr_pr_412/owners", {"worker_id": "wkr_77a0"}),
    ("POST", "/triggers", {"id": "trg_8f1c", "source": "github.pull_request_review_comment",
                           "thread_id": "thr_pr_412", "summary": "review comment asking for retry logic",
                           "payload": {"user": "reviewer", "body": "Please add retry logic around charge()."}}),
    ("POST", "/triggers", {"id": "trg_8f21", "source": "github.check_run", "thread_id": "thr_pr_412",
                           "summary": "CI failed on PR #412: 3 of 118 tests red in payments/",
                           "neighbours": ["trg_8f1c"], "content_type": "text/plain", "payload": None}),
    ("POST", "/workers/wkr_77a0/reports", {"id": "rpt_412a", "thread_id": "thr_pr_412",
                                           "summary": "CI red on payments: the charge call times out; fixed with backoff",
                                           "body": "Investigated trg_8f21: payment timeout in test_retry_charge.",
                                           "refs": ["trg_8f21"]}),
    ("PATCH", "/threads/thr_pr_412", {"status": "merged"}),
]


def call(base: str, key: str, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def load(base: str, key: str) -> None:
    """Create the story's objects (idempotent: a second load finds them all identical)."""
    for method, path, body in STORY:
        if body.get("payload", 0) is None and body.get("content_type") == "text/plain":
            body = {**body, "payload": ci_log()}
        status, text = call(base, key, method, path, body)
        if status >= 300:
            raise RuntimeError(f"{method} {path} -> {status}: {text[:300]!r}")


def recall(base: str, key: str, echo: Callable[[str], None]) -> str:
    """From the thread ID alone, three GETs reach the CI log line: thread, owner worker, and a grep of
    the cited payload (its matching line and byte range, not the 40 KB log)."""

    def get(path: str) -> Any:
        status, text = call(base, key, "GET", path)
        echo(f"GET {path} -> {status} ({len(text)} bytes)")
        return json.loads(text)

    thread = get("/threads/thr_pr_412")
    worker = get(f"/workers/{thread['owner_workers'][0]['id']}")
    cited = next(r["refs"][0] for r in worker["reports"] if r.get("refs"))
    found = get(f"/triggers/{cited}/payload/grep?pattern=payment+timeout")
    match = found["matches"][0]
    return next(line["text"] for line in match["lines"] if line["number"] == match["line"])


def run(base: str, key: str, echo: Callable[[str], None]) -> None:
    load(base, key)
    echo("loaded the PR #412 story; recalling from thr_pr_412:")
    echo(f"found: {recall(base, key, echo)}")
