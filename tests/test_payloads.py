"""Payloads and report bodies: exact bytes back, content types, ETag, conditional GET and ranges."""

from __future__ import annotations

import httpx
from helpers import Graph, assert_problem


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
