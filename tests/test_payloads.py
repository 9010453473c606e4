"""Payloads and report bodies: exact bytes back, content types, ETag, conditional GET and ranges."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, create_key, uid


def test_a_json_payload_is_inlined_as_json_and_served_as_json(client: httpx.Client, graph: Graph) -> None:
    payload = {"action": "completed", "conclusion": "failure", "n": [1, 2.5, None, True]}
    trigger = graph.trigger(payload=payload)
    assert trigger["payload"] == payload and trigger["content_type"] == "application/json"
    served = client.get(f"/triggers/{trigger['id']}/payload")
    assert served.headers["content-type"] == "application/json"
    assert served.json() == payload


def test_a_text_payload_is_stored_and_served_back_as_that_text(client: httpx.Client, graph: Graph) -> None:
    text = "line one\nline two — ünïcode ✓\n"
    trigger = graph.trigger(payload=text, content_type="text/x-log")
    served = client.get(f"/triggers/{trigger['id']}/payload")
    assert served.content == text.encode()
    assert served.headers["content-type"].startswith("text/x-log")
    assert trigger["payload"] == text


def test_a_string_without_content_type_defaults_to_text_plain(graph: Graph) -> None:
    assert graph.trigger(payload="hello")["content_type"] == "text/plain"


def test_payload_has_strong_etag_immutable_cache_and_304(client: httpx.Client, graph: Graph) -> None:
    path = f"/triggers/{graph.trigger(payload='abc' * 100)['id']}/payload"
    first = client.get(path)
    etag = first.headers["etag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    assert "immutable" in first.headers["cache-control"]
    again = client.get(path, headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b""
    assert client.get(path, headers={"If-None-Match": '"other"'}).status_code == 200


def test_payload_byte_ranges(client: httpx.Client, graph: Graph) -> None:
    text = "0123456789" * 10
    path = f"/triggers/{graph.trigger(payload=text)['id']}/payload"
    part = client.get(path, headers={"Range": "bytes=10-19"})
    assert part.status_code == 206 and part.text == text[10:20]
    assert part.headers["content-range"] == "bytes 10-19/100"
    assert client.get(path, headers={"Range": "bytes=-5"}).text == text[-5:]
    assert client.get(path, headers={"Range": "bytes=95-"}).text == text[95:]
    unsatisfiable = client.get(path, headers={"Range": "bytes=100-"})
    assert_problem(unsatisfiable, 416)
    assert unsatisfiable.headers["content-range"] == "bytes */100"


def test_report_body_is_served_like_a_payload(client: httpx.Client, graph: Graph) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    report = graph.report(worker, thread, body="# findings\n" + "detail " * 2000, content_type="text/markdown")
    assert "body" not in report and report["spilled"]["body"]["href"] == f"/reports/{report['id']}/body"
    served = client.get(report["spilled"]["body"]["href"])
    assert served.status_code == 200 and served.text.startswith("# findings")
    assert served.headers["content-type"].startswith("text/markdown")
    assert client.get(report["spilled"]["body"]["href"], headers={"Range": "bytes=0-9"}).text == "# findings"


# ---- the per-process content cache: a hit saves the bytes, never the database's say ------------------


@pytest.fixture(scope="module")
def two_workers(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("cache") / "server.log", RECALL_WORKERS="2").start()
    yield proc
    proc.stop()


def served_by_both_workers(c: httpx.Client, path: str) -> bytes:
    """GET path on new connections until both worker processes have served (and cached) it; the bytes.

    A generated request ID starts with its process's random prefix: that tells the workers apart.
    """
    bodies, workers = set(), set()
    for _ in range(200):
        response = c.get(path, headers={"Connection": "close"})  # a kept-alive connection stays on one worker
        assert response.status_code == 200
        bodies.add(response.content)
        workers.add(response.headers["x-request-id"][:16])
        if len(workers) == 2:
            break
    assert len(workers) == 2, "one worker served every request"
    assert len(bodies) == 1
    return bodies.pop()


def test_a_cached_payload_is_410_in_every_process_once_deleted(two_workers: ServerProcess, api_key: str) -> None:
    with httpx.Client(base_url=two_workers.url, headers={"Authorization": f"Bearer {api_key}"}) as c:
        graph = Graph(c)
        trigger = graph.trigger(payload="x" * 5000)
        report = graph.report(graph.worker()["id"], graph.thread()["id"], body="y" * 5000)
        for obj, path in ((f"/triggers/{trigger['id']}", "/payload"), (f"/reports/{report['id']}", "/body")):
            served_by_both_workers(c, obj + path)
            assert c.delete(obj).status_code == 204
            for _ in range(20):
                assert_problem(c.get(obj + path, headers={"Connection": "close"}), 410)


def test_the_same_id_in_two_tenants_serves_each_its_own_bytes(two_workers: ServerProcess, api_key: str,
                                                               database_url: str) -> None:
    other_key = create_key(database_url, uid("cache"), "write")
    trigger_id = uid("trg")
    clients = [httpx.Client(base_url=two_workers.url, headers={"Authorization": f"Bearer {key}"})
               for key in (api_key, other_key)]
    try:
        for c, text in zip(clients, ("mine", "theirs")):
            assert c.post("/triggers", json={"id": trigger_id, "source": "s", "summary": "same id",
                                             "payload": text * 100}).status_code == 201
        for _ in range(3):  # interleaved, so each process has cached the other tenant's bytes first
            for c, text in zip(clients, ("mine", "theirs")):
                assert served_by_both_workers(c, f"/triggers/{trigger_id}/payload") == (text * 100).encode()
    finally:
        for c in clients:
            c.close()


@pytest.mark.parametrize("content_type", ["text/html", "image/svg+xml", "application/json", "text/plain"])
def test_payloads_and_bodies_are_inert_in_a_browser(client: httpx.Client, graph: Graph, content_type: str) -> None:
    """Stored HTML or SVG must never run on the API's origin: nosniff, a sandbox CSP, and a download."""
    script = "<script>alert(document.cookie)</script>"
    trigger = graph.trigger(payload=script, content_type=content_type)["id"]
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    report = graph.report(worker, thread, body=script, content_type=content_type)["id"]
    for path in (f"/triggers/{trigger}/payload", f"/reports/{report}/body"):
        for extra in ({}, {"Range": "bytes=0-3"}):
            r = client.get(path, headers=extra)
            assert r.status_code in (200, 206)
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["content-security-policy"] == "default-src 'none'; sandbox"
            assert r.headers["content-disposition"] == "attachment"
