"""recall_server.grep and the grep routes: a bounded, linear-time lens into spilled content."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from helpers import Graph, assert_problem, uid

from recall_server import grep
from recall_server.errors import BadRequest

LOG = b"".join(f"line {i}\n".encode() for i in range(1, 101)) + b"FAILED payment timeout after 30s\nend\n"


def run(data: bytes, pattern: str, regex: bool = False, context: int = 0, max_matches: int = 20) -> grep.Found:
    return grep.grep(data, grep.matcher(pattern, regex), context, max_matches)


# ---- the pure scan -----------------------------------------------------------------------------


def test_a_literal_match_has_its_line_number_byte_offset_length_and_a_range_around_it() -> None:
    found = run(LOG, "payment timeout", context=1)
    [match] = found.matches
    assert match.line == 101
    assert LOG[match.offset:match.offset + match.length] == b"payment timeout"
    assert [(line.number, line.text) for line in match.lines] == [
        (100, "line 100"), (101, "FAILED payment timeout after 30s"), (102, "end")]
    first, last = map(int, match.range.removeprefix("bytes=").split("-"))
    assert LOG[first:last + 1] == b"line 100\nFAILED payment timeout after 30s\nend"
    assert found.scanned == len(LOG) and not found.truncated


def test_literal_is_the_default_and_regex_metacharacters_are_plain_there() -> None:
    assert run(b"a.c\nabc\n", "a.c").matches[0].line == 1 and len(run(b"a.c\nabc\n", "a.c").matches) == 1
    assert [m.line for m in run(b"a.c\nabc\n", "a.c", regex=True).matches] == [1, 2]


def test_a_regex_anchors_at_line_ends_and_a_line_matches_once() -> None:
    found = run(b"xx yy\nzz\nxx\n", r"^x+", regex=True)
    assert [(m.line, m.length) for m in found.matches] == [(1, 2), (3, 2)]


def test_max_bounds_the_matches_and_says_there_were_more() -> None:
    found = run(LOG, "line", max_matches=5)
    assert [m.line for m in found.matches] == [1, 2, 3, 4, 5] and found.truncated


def test_context_stops_at_the_edges_of_the_content() -> None:
    [match] = run(b"first\nsecond\n", "first", context=10).matches
    assert [line.number for line in match.lines] == [1, 2, 3]  # the empty line after the last newline


def test_long_lines_are_cut_around_the_match() -> None:
    data = b"x" * 10_000 + b" needle " + b"y" * 10_000
    [match] = run(data, "needle").matches
    [line] = match.lines
    assert line.truncated and len(line.text) == grep.LINE_CHARS and "needle" in line.text


def test_the_response_is_bounded_whatever_the_content() -> None:
    data = (b"z" * 5_000 + b"\n") * 500
    found = run(data, "z", context=grep.MAX_CONTEXT, max_matches=grep.MAX_MATCHES)
    shown = sum(len(line.text) for m in found.matches for line in m.lines)
    assert shown <= grep.RESPONSE_CHARS and found.truncated


def test_only_the_head_is_scanned() -> None:
    data = b"a\n" * (grep.SCAN_BYTES // 2) + b"needle\n"
    found = run(data, "needle")
    assert found.matches == [] and found.scanned == grep.SCAN_BYTES and found.truncated


@pytest.mark.parametrize("pattern", ["(a+)+$", "(x+x+)+y", "(a|aa)+b", "(.*a){20}", "(.*a){100}", "(a*)*b",
                                     r"(\w+\s?)+$"])
def test_a_pattern_built_to_backtrack_runs_in_linear_time(pattern: str) -> None:
    data = b"a" * 1_000_000 + b"!" if "x" not in pattern else b"x" * 1_000_000
    started = time.monotonic()
    try:
        run(data, pattern, regex=True)
    except BadRequest:
        pass  # refused at compile time is fine too
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", "[z-a]", "(?<name>x)\\"])
def test_an_invalid_regex_is_a_bad_request(pattern: str) -> None:
    with pytest.raises(BadRequest):
        grep.matcher(pattern, regex=True)


def test_an_empty_or_overlong_pattern_is_a_bad_request() -> None:
    for pattern in ("", "x" * (grep.MAX_PATTERN + 1)):
        with pytest.raises(BadRequest):
            grep.matcher(pattern, regex=False)


# ---- over HTTP -------------------------------------------------------------------------------


def test_grep_of_a_payload_and_of_a_body(client: httpx.Client, graph: Graph) -> None:
    trigger = graph.trigger(content_type="text/plain", payload=LOG.decode())
    r = client.get(f"/triggers/{trigger['id']}/payload/grep", params={"pattern": "payment timeout", "context": 1})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == trigger["id"] and body["bytes"] == len(LOG) and body["href"] == f"/triggers/{trigger['id']}/payload"
    [match] = body["matches"]
    ranged = client.get(body["href"], headers={"Range": match["range"]})
    assert ranged.status_code == 206 and b"payment timeout" in ranged.content
    thread = graph.thread()
    worker = graph.worker()
    report = graph.report(worker["id"], thread["id"], body={"note": "charge() timed out", "n": 3},
                          content_type="application/json")
    r = client.get(f"/reports/{report['id']}/body/grep", params={"pattern": r"time[ds]? ?out", "regex": "true"})
    assert r.status_code == 200, r.text
    assert r.json()["matches"][0]["lines"][0]["text"] == '{"note":"charge() timed out","n":3}'


def test_grep_misses_like_the_content_routes(client: httpx.Client, graph: Graph) -> None:
    assert_problem(client.get(f"/triggers/{uid('trg')}/payload/grep", params={"pattern": "x"}), 404)
    assert_problem(client.get("/triggers/thr_wrong/payload/grep", params={"pattern": "x"}), 404, "thread")
    assert_problem(client.get(f"/reports/{uid('rpt')}/body/grep", params={"pattern": "x"}), 404)
    gone = graph.trigger(content_type="text/plain", payload="x")
    client.delete(f"/triggers/{gone['id']}")
    assert_problem(client.get(f"/triggers/{gone['id']}/payload/grep", params={"pattern": "x"}), 410)


def test_grep_refuses_bad_parameters_and_non_text_content(client: httpx.Client, graph: Graph) -> None:
    trigger = graph.trigger(content_type="text/plain", payload="abc")
    path = f"/triggers/{trigger['id']}/payload/grep"
    assert_problem(client.get(path), 400)
    assert_problem(client.get(path, params={"pattern": ""}), 400)
    assert_problem(client.get(path, params={"pattern": "(", "regex": "true"}), 400, "pattern")
    assert_problem(client.get(path, params={"pattern": "a", "context": 11}), 400)
    assert_problem(client.get(path, params={"pattern": "a", "max": 0}), 400)
    assert_problem(client.get(path, params={"pattern": "a", "max": 101}), 400)
    binary = graph.trigger(content_type="application/octet-stream", payload="abc")
    assert_problem(client.get(f"/triggers/{binary['id']}/payload/grep", params={"pattern": "a"}), 415,
                   "application/octet-stream")


def test_a_catastrophic_regex_on_a_1_mb_payload_answers_within_a_second_while_others_are_served(
    client: httpx.Client, graph: Graph, base_url: str
) -> None:
    trigger = graph.trigger(content_type="text/plain", payload="a" * 1_000_000 + "!")
    path = f"/triggers/{trigger['id']}/payload/grep"
    assert client.get(path, params={"pattern": "a"}).status_code == 200  # the content is cached: time the scan
    health: list[float] = []
    done, ready = threading.Event(), threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=base_url) as c:
            while not done.is_set():
                started = time.monotonic()
                assert c.get("/healthz").status_code == 200
                health.append(time.monotonic() - started)
                ready.set()

    prober = threading.Thread(target=probe)
    prober.start()
    assert ready.wait(10)
    probed_before = len(health)
    try:
        for _ in range(3):
            for pattern in ("(a+)+$", "(x+x+)+y", "(a|aa)+!", "(.*a){20}"):
                started = time.monotonic()
                r = client.get(path, params={"pattern": pattern, "regex": "true"})
                assert r.status_code in (200, 400), r.text
                assert time.monotonic() - started < 1.0, pattern
        time.sleep(0.1)  # at least one probe that overlapped the last scan has answered
    finally:
        done.set()
        prober.join()
    during = health[probed_before:]
    assert during and max(during) < 0.5, "the event loop kept serving while the scans ran"
