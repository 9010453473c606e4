"""Observability: every request has an ID, one JSON access-log line without secrets, and Prometheus
metrics (aggregated over worker processes) for requests, latency, the pool and database errors."""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
import pytest
from faults import PostgresProxy
from helpers import Graph, ServerProcess, assert_problem, sample, scrape, uid

from recall_server.process import ServerProcess as PlainServerProcess

GENERATED_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")  # what the server accepts is what it must make

def json_lines(log: Path) -> list[dict]:
    """Every line of the server's log, each of which must be one JSON object."""
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            pytest.fail(f"log line is not JSON: {line!r}")
    return parsed


def wait_for_pool(url: str, idle: int) -> None:
    """Pool gauges are published once a second per process: poll until they show `idle` idle
    connections, none in use and nobody waiting."""
    deadline = time.monotonic() + 10
    while True:
        samples = scrape(url)
        pool = {state: sample(samples, "recall_db_pool_connections", state=state)
                for state in ("idle", "in_use", "waiting")}
        if pool == {"idle": idle, "in_use": 0, "waiting": 0}:
            return
        assert time.monotonic() < deadline, pool
        time.sleep(0.2)  # polling, with a deadline


def worker_pids(server: PlainServerProcess) -> set[int]:
    """The HTTP server's worker processes: the serve process's children."""
    return {child.pid for child in psutil.Process(server.proc.pid).children()}


def worker_of(request_id: str) -> str:
    """Generated IDs are a random per-process prefix (16 hex) and a counter: the prefix names the process."""
    return request_id[:16]


# ---- request IDs ------------------------------------------------------------------------------


def test_every_response_carries_exactly_one_request_id(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    for response in (httpx.get(client.base_url.join("/healthz")), client.get(f"/threads/{thread}"),
                     client.post("/threads", json={"title": "t"}), client.get(f"/threads/{uid('thr')}"),
                     client.options("/threads")):
        ids = response.headers.get_list("x-request-id")
        assert len(ids) == 1 and GENERATED_ID.match(ids[0]), (response.status_code, ids)


@pytest.mark.parametrize("incoming", ["req-42", "0af7651916cd43dd8448eb211c80319c", "a.b:c_d-E", "x" * 128])
def test_a_sane_incoming_request_id_is_echoed_unchanged(client: httpx.Client, incoming: str) -> None:
    response = client.get(f"/threads/{uid('thr')}", headers={"X-Request-ID": incoming})
    assert response.headers.get_list("x-request-id") == [incoming]
    assert assert_problem(response, 404)["request_id"] == incoming


@pytest.mark.parametrize("incoming", ["has spaces in it", "x" * 129, "x" * 200, "<script>", "a/b", "ä-umlaut", ""])
def test_an_insane_incoming_request_id_is_replaced_by_a_generated_one(client: httpx.Client, incoming: str) -> None:
    response = client.get("/healthz", headers={"X-Request-ID": incoming.encode("utf-8")})
    [rid] = response.headers.get_list("x-request-id")
    assert rid != incoming and GENERATED_ID.match(rid), rid


def test_requests_without_an_id_get_distinct_generated_ones(client: httpx.Client) -> None:
    ids = [client.get("/healthz").headers["x-request-id"] for _ in range(20)]
    assert len(set(ids)) == 20, ids


def test_problem_bodies_carry_the_request_id_of_their_response(base_url: str, client: httpx.Client) -> None:
    unknown_thread = client.get(f"/threads/{uid('thr')}")
    no_key = httpx.get(f"{base_url}/threads/{uid('thr')}")
    no_route = client.get("/no/such/route")
    wrong_method = client.put("/threads")
    for response, status in ((unknown_thread, 404), (no_key, 401), (no_route, 404), (wrong_method, 405)):
        body = assert_problem(response, status)
        assert body["request_id"] == response.headers["x-request-id"], body
    traced = client.get("/no/such/route", headers={"X-Request-ID": "trace-me-1"})
    assert assert_problem(traced, 404)["request_id"] == "trace-me-1"


# ---- access log -------------------------------------------------------------------------------


ACCESS_FIELDS = {"ts", "level", "logger", "message", "request_id", "method", "path", "route", "status", "duration_ms"}


@pytest.mark.slow
def test_one_json_access_line_per_request_without_keys_or_bodies(
    database_url: str, api_key: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    server = ServerProcess(database_url, log, RECALL_LOG_LEVEL="info", RECALL_SWEEP_INTERVAL="0").start()
    secret_body = f"SECRET-BODY-{uuid.uuid4().hex}"
    thread = uid("thr")
    sent: dict[str, tuple[str, str, str, int]] = {}  # request id -> (method, path, route, status)
    try:
        with httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
            requests = [
                ("POST", "/threads", {"id": thread, "title": "t", "summary": secret_body}, "/threads", 201),
                ("GET", f"/threads/{thread}", None, "/threads/{thread_id}", 200),
                ("POST", f"/threads/{thread}/events", {"summary": secret_body}, "/threads/{thread_id}/events", 201),
                ("GET", f"/threads/{uid('thr')}", None, "/threads/{thread_id}", 404),
                ("GET", "/no/such/route", None, "unmatched", 404),
            ]
            for method, path, body, route, status in requests:
                rid = f"access-{uuid.uuid4().hex}"
                assert c.request(method, path, json=body, headers={"X-Request-ID": rid}).status_code == status
                sent[rid] = (method, path, route, status)
        no_key = httpx.get(f"{server.url}/threads/{thread}", headers={"X-Request-ID": "access-no-key"})
        assert no_key.status_code == 401
        sent["access-no-key"] = ("GET", f"/threads/{thread}", "/threads/{thread_id}", 401)
    finally:
        server.stop()  # every line is written before we read

    access = [line for line in json_lines(log) if line.get("logger") == "recall_server.access"]
    assert Counter(line["request_id"] for line in access if line["request_id"] in sent) == Counter(list(sent))
    for line in access:
        assert line.keys() == ACCESS_FIELDS, line  # nothing else: no headers, bodies or keys
        assert line["level"] == "info" and line["message"] == "request"
        assert isinstance(line["duration_ms"], (int, float)) and line["duration_ms"] >= 0
        if line["request_id"] in sent:
            assert (line["method"], line["path"], line["route"], line["status"]) == sent[line["request_id"]]
        else:
            assert line["route"] == "/readyz", line  # only start()'s readiness probes were not ours
    text = log.read_text()
    assert api_key not in text and api_key.partition(".")[2] not in text, "the API key leaked into the log"
    assert secret_body not in text, "a request body leaked into the log"


@pytest.mark.slow
@pytest.mark.parametrize("level", ["info", "debug"])
def test_search_terms_patterns_and_memory_keys_never_reach_the_log(
    database_url: str, api_key: str, tmp_path: Path, level: str
) -> None:
    """Through /mcp (whose tools call the app in-process over httpx) and through the client: no query
    string reaches the log, at any level (httpx logs every request's full URL at INFO)."""
    import asyncio

    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    from recall_server.client import RecallClient

    log = tmp_path / "server.log"
    server = ServerProcess(database_url, log, RECALL_LOG_LEVEL=level, RECALL_SWEEP_INTERVAL="0").start()
    secret = f"hunter{uuid.uuid4().hex[:12]}"
    namespace = ["logs", uid("thr")[4:]]
    try:
        with RecallClient(server.url, api_key) as recall:
            trigger = recall.create_trigger(source="test", summary="s", payload="nothing here").id
            recall.search(secret)
            recall.grep_payload(trigger, secret)
            recall.list_memories(namespace=namespace, value_contains={"word": secret})
            with pytest.raises(Exception):
                recall.current_memory(namespace, secret)

        async def tools() -> None:
            async with httpx.AsyncClient(headers={"Authorization": f"Bearer {api_key}"}, timeout=30) as http, \
                    streamable_http_client(f"{server.url}/mcp", http_client=http) as (read, write, _), \
                    ClientSession(read, write) as s:
                await s.initialize()
                for name, args in (("recall_search", {"query": f"{secret} password"}),
                                   ("recall_read", {"id": trigger, "pattern": secret}),
                                   ("recall_recall", {"namespace": namespace, "key": secret}),
                                   ("recall_remember", {"namespace": namespace, "key": f"k{secret}", "value": 1}),
                                   ("recall_recall", {"namespace": namespace, "key": f"k{secret}"})):
                    assert (await s.call_tool(name, args)).content, name

        asyncio.run(tools())
    finally:
        server.stop()  # every line is written before we read
    text = log.read_text()
    assert len(json_lines(log)) > 10
    assert secret not in text, [line for line in text.splitlines() if secret in line][:3]


@pytest.mark.slow
def test_a_librarys_warning_from_a_background_thread_is_a_json_log_line(
    database_url: str, api_key: str, tmp_path: Path
) -> None:
    """Libraries warn (urllib3 when PySocks is missing, as the embedder's import of requests showed): the
    warning is one JSON line at level warning, not text on stderr. The embedder loads in a thread of the
    indexer on the first trigger; a sitecustomize makes that import warn."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, warnings\n"
        "class Warn:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'wordllama':\n"
        "            warnings.warn('a library warned on import', UserWarning)\n"
        "sys.meta_path.insert(0, Warn())\n")
    log = tmp_path / "server.log"
    server = ServerProcess(database_url, log, PYTHONPATH=str(tmp_path), RECALL_SWEEP_INTERVAL="0").start()
    try:
        httpx.post(f"{server.url}/triggers", json={"source": "test", "summary": "s", "payload": "p"},
                   headers={"Authorization": f"Bearer {api_key}"}).raise_for_status()
        deadline = time.monotonic() + 30
        while "a library warned on import" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.1)  # polling, with a deadline
    finally:
        server.stop()
    warned = [line for line in json_lines(log) if "a library warned on import" in line["message"]]
    assert [(line["level"], line["logger"]) for line in warned] == [("warning", "py.warnings")], warned


# ---- metrics ----------------------------------------------------------------------------------


@pytest.fixture()
def two_workers(database_url: str, tmp_path: Path) -> Iterator[PlainServerProcess]:
    server = PlainServerProcess(tmp_path / "server.log", "--workers", "2", DATABASE_URL=database_url,
                                RECALL_POOL_MIN="2", RECALL_POOL_MAX="2", RECALL_SWEEP_INTERVAL="0").start()
    yield server
    server.stop()


def test_metrics_add_up_request_counts_latency_and_pool_gauges_over_worker_processes(
    two_workers: PlainServerProcess, api_key: str
) -> None:
    url = two_workers.url
    route = {"method": "GET", "route": "/threads/{thread_id}"}
    before = scrape(url)

    def miss(_: int) -> str:
        response = httpx.get(f"{url}/threads/{uid('thr')}", headers={"Authorization": f"Bearer {api_key}"},
                             timeout=30)
        assert response.status_code == 404, response.text
        return response.headers["x-request-id"]

    workers: set[str] = set()
    sent = 0
    with ThreadPoolExecutor(8) as pool:
        while len(workers) < 2 and sent < 400:  # until both workers have served some
            workers.update(worker_of(rid) for rid in pool.map(miss, range(20)))
            sent += 20
    assert len(workers) == 2, "both worker processes served requests"

    after = scrape(url)
    counted = sample(after, "recall_http_requests_total", **route, status="404") - sample(
        before, "recall_http_requests_total", **route, status="404")
    assert counted == sent, "every request counted once, whichever worker served it"
    observed = sample(after, "recall_http_request_duration_seconds_count", **route) - sample(
        before, "recall_http_request_duration_seconds_count", **route)
    assert observed == sent
    assert sample(after, "recall_http_request_duration_seconds_bucket", **route, le="+Inf") == sample(
        after, "recall_http_request_duration_seconds_count", **route)
    assert sample(after, "recall_http_request_duration_seconds_sum", **route) > 0
    assert sample(after, "recall_http_requests_total", method="GET", route="/metrics", status="200") >= 1

    wait_for_pool(url, idle=4)  # 2 workers x 2 connections, all idle once the load is over


@pytest.mark.slow
def test_workers_replaced_on_reload_leave_the_pool_gauges_but_keep_their_request_counts(
    two_workers: PlainServerProcess, api_key: str
) -> None:
    url, route = two_workers.url, {"method": "GET", "route": "/threads/{thread_id}", "status": "404"}
    wait_for_pool(url, idle=4)
    old = worker_pids(two_workers)
    assert len(old) == 2, old
    for _ in range(10):
        response = httpx.get(f"{url}/threads/{uid('thr')}", headers={"Authorization": f"Bearer {api_key}"})
        assert response.status_code == 404
    two_workers.proc.send_signal(signal.SIGHUP)  # granian replaces each worker, then retires the old one
    deadline = time.monotonic() + 60
    while len(new := worker_pids(two_workers)) != 2 or new & old:
        assert time.monotonic() < deadline, (old, new)
        time.sleep(0.2)  # polling, with a deadline
    assert sample(scrape(url), "recall_http_requests_total", **route) == 10, "counts outlive their worker"
    wait_for_pool(url, idle=4)  # the retired workers' connections are closed: they must not count


def test_metrics_content_type_names_each_parameter_once(base_url: str) -> None:
    content_type = httpx.get(base_url + "/metrics", timeout=30).headers["content-type"]
    media_type, *params = (part.strip() for part in content_type.split(";"))
    names = [param.partition("=")[0].lower() for param in params]
    assert media_type == "text/plain" and "version" in names
    assert len(names) == len(set(names)), f"a parameter repeats (RFC 6838 4.3): {content_type}"


@pytest.mark.fault
def test_a_database_outage_is_counted_by_reason(database_url: str, api_key: str, tmp_path: Path) -> None:
    proxy = PostgresProxy(database_url)
    # no sweep and no indexer: their polls during the outage would be counted too, beside the requests'
    server = ServerProcess(proxy.url, tmp_path / "server.log", RECALL_DB_TIMEOUT="2",
                           RECALL_SWEEP_INTERVAL="0", RECALL_EMBEDDER="none").start()
    try:
        before = sample(scrape(server.url), "recall_db_errors_total", reason="unreachable")
        proxy.cut()
        with httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
            for _ in range(3):
                assert_problem(c.get(f"/threads/{uid('thr')}"), 503)
        after = scrape(server.url)
        assert sample(after, "recall_db_errors_total", reason="unreachable") - before == 3
        assert sample(after, "recall_http_requests_total", method="GET", route="/threads/{thread_id}",
                      status="503") == 3
    finally:
        server.stop()
        proxy.close()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_wipes_a_given_metrics_directory_and_removes_the_one_it_made(database_url: str, tmp_path: Path,
                                                                           workers: str) -> None:
    given = tmp_path / "metrics"
    given.mkdir()
    (given / "counter_999999.db").write_bytes(b"an earlier run's counts")
    server = ServerProcess(database_url, tmp_path / "given.log", PROMETHEUS_MULTIPROC_DIR=str(given),
                           RECALL_WORKERS=workers).start()
    try:
        assert not (given / "counter_999999.db").exists()
        assert httpx.get(server.url + "/metrics", timeout=30).status_code == 200
    finally:
        server.stop()
    assert given.is_dir(), "a directory the operator chose stays"

    temp = tmp_path / "tmp"  # its own TMPDIR: other servers on this machine make recall-metrics-* too
    temp.mkdir()
    before = set(temp.glob("recall-metrics-*"))
    server = ServerProcess(database_url, tmp_path / "own.log", RECALL_WORKERS=workers, TMPDIR=str(temp)).start()
    try:
        made = set(temp.glob("recall-metrics-*")) - before
        assert len(made) == 1, made
    finally:
        server.stop()
    assert not any(d.exists() for d in made), "serve removes the directory it made when it stops"
