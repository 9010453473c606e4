"""The recall trace: which IDs a run read, in order, per tenant, without a round trip on the read, and what a
crash may lose (recall_server/service/trace.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from faults import PostgresProxy
from helpers import Graph, ServerProcess, assert_problem, cli, create_key, uid
from helpers import settled_rows as settled
from litestar.testing import AsyncTestClient

from recall_server import config
from recall_server.app import create_app
from recall_server.auth import parse
from recall_server.cursor import CursorCodec
from recall_server.db.pool import Database, as_app_role
from recall_server.service.trace import DROPPED, WRITE_FAILURES, Trace

FLUSH = 1.0  # the servers' trace flush interval: pages show reads 2 s old


def key_id(key: str) -> str:
    return key[3:19]


def traced(client: httpx.Client, path: str, run: str) -> httpx.Response:
    return client.get(path, headers={"X-Recall-Run": run})


@pytest.fixture(scope="module")
def trace_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two worker processes, each with its own trace buffer, flushing every second."""
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("trace") / "server.log", RECALL_WORKERS="2",
                         RECALL_SWEEP_INTERVAL="0", RECALL_TRACE_FLUSH_INTERVAL=str(FLUSH)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def keys(trace_server: ServerProcess, database_url: str) -> dict[str, str]:
    return {"ours": create_key(database_url, "default", "write"),
            "theirs": create_key(database_url, "trace-other", "write")}


@pytest.fixture()
def ours(trace_server: ServerProcess, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=trace_server.url, timeout=30, headers={"Authorization": f"Bearer {keys['ours']}"}) as c:
        yield c


@pytest.fixture()
def theirs(trace_server: ServerProcess, keys: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=trace_server.url, timeout=30,
                      headers={"Authorization": f"Bearer {keys['theirs']}"}) as c:
        yield c


def one_connection_per_worker(url: str, key: str) -> list[httpx.Client]:
    """Two keep-alive clients whose connections two different worker processes accepted (told apart by
    the per-process prefix of the request IDs they answer with).

    The workers accept from one shared socket (no SO_REUSEPORT, so a second server cannot bind the port),
    and the kernel may hand a whole burst to one of them: bursts are tried until both have accepted one.
    """
    by_process: dict[str, httpx.Client] = {}
    deadline = time.monotonic() + 30
    while len(by_process) < 2 and time.monotonic() < deadline:
        clients = [httpx.Client(base_url=url, timeout=30, headers={"Authorization": f"Bearer {key}"})
                   for _ in range(12)]
        with ThreadPoolExecutor(len(clients)) as pool:  # connect all at once, so both workers accept some
            answers = list(pool.map(lambda c: c.get("/threads", params={"limit": 1}), clients))
        for r, c in zip(answers, clients):
            by_process.setdefault(r.headers["x-request-id"][:16], c)
        for c in clients:
            if c not in by_process.values():
                c.close()
    assert len(by_process) == 2, "both worker processes accepted a connection"
    return list(by_process.values())


@pytest.mark.slow
def test_a_runs_reads_come_back_in_the_order_made_across_two_workers(ours: httpx.Client, keys: dict[str, str]) -> None:
    graph = Graph(ours)
    worker = graph.worker()
    thread = graph.thread()
    trigger = graph.trigger(thread_id=thread["id"])
    gone = graph.thread()
    assert ours.delete(f"/threads/{gone['id']}").status_code == 204
    missing = uid("thr")
    paths = [f"/threads/{thread['id']}", f"/workers/{worker['id']}", f"/triggers/{trigger['id']}/payload",
             f"/threads/{missing}", f"/threads/{gone['id']}", "/threads", f"/ids/{trigger['id']}",
             f"/threads/{thread['id']}/events"]
    expected_routes = ["/threads/{thread_id}", "/workers/{worker_id}", "/triggers/{trigger_id}/payload",
                       "/threads/{thread_id}", "/threads/{thread_id}", "/threads", "/ids/{object_id}",
                       "/threads/{thread_id}/events"]
    expected_objects = [thread["id"], worker["id"], trigger["id"], missing, gone["id"], None, trigger["id"],
                        thread["id"]]
    run = f"run.{uid('t')}:a"
    made = []
    workers = one_connection_per_worker(str(ours.base_url), keys["ours"])
    try:
        for i in range(24):  # alternate processes: each buffers every other read and flushes on its own clock
            n = i % len(paths)
            r = traced(workers[i % 2], paths[n], run)
            made.append((r.headers["x-request-id"], r.status_code, len(r.content), expected_routes[n],
                         expected_objects[n]))
    finally:
        for c in workers:
            c.close()
    assert {status for _, status, *_ in made} == {200, 404, 410}

    reads = settled(ours, f"/runs/{run}/reads", len(made), limit=5)  # five pages and a bit: paged exactly once
    assert [(r["request_id"], r["status"], r["bytes"], r["route"], r["object_id"]) for r in reads] == made
    assert {r["run"] for r in reads} == {run}
    assert {r["key_id"] for r in reads} == {key_id(keys["ours"])}
    assert [r["at"] for r in reads] == sorted(r["at"] for r in reads)
    assert len({r["request_id"][:16] for r in reads}) == 2, "reads from both worker processes"


@pytest.mark.slow
def test_another_tenant_sees_nothing_of_a_run_or_of_our_ids(ours: httpx.Client, theirs: httpx.Client) -> None:
    thread = Graph(ours).thread()
    run = uid("run")
    assert traced(ours, f"/threads/{thread['id']}", run).status_code == 200
    assert traced(theirs, f"/threads/{thread['id']}", run).status_code == 404  # the same run label, their tenant
    # Once both have settled, each tenant sees its own read of the run and nothing of the other's.
    assert [r["status"] for r in settled(ours, f"/runs/{run}/reads", 1)] == [200]
    assert [r["status"] for r in settled(theirs, f"/runs/{run}/reads", 1)] == [404]
    # A run another tenant used but we never did is an empty page, exactly like a run that never existed.
    theirs_only = uid("run")
    assert traced(theirs, "/threads", theirs_only).status_code == 200
    assert len(settled(theirs, f"/runs/{theirs_only}/reads", 1)) == 1
    page, never = ours.get(f"/runs/{theirs_only}/reads"), ours.get(f"/runs/{uid('never')}/reads")
    assert page.status_code == never.status_code == 200
    assert page.json()["data"] == never.json()["data"] == [] and page.json()["has_more"] is False
    # Our ID through their key: a 404, as for an ID that never existed.
    assert_problem(theirs.get(f"/ids/{thread['id']}/reads"), 404, thread["id"])


@pytest.mark.slow
def test_an_objects_reads_name_their_runs_and_outlive_its_deletion(ours: httpx.Client) -> None:
    trigger = Graph(ours).trigger()
    runs = [uid("run"), uid("run")]
    for run in runs:
        assert traced(ours, f"/triggers/{trigger['id']}", run).status_code == 200
        assert traced(ours, f"/triggers/{trigger['id']}/payload", run).status_code == 200
    assert traced(ours, "/threads", runs[0]).status_code == 200  # an index read names no object
    reads = settled(ours, f"/ids/{trigger['id']}/reads", 4)
    assert [(r["run"], r["route"]) for r in reads] == [
        (runs[0], "/triggers/{trigger_id}"), (runs[0], "/triggers/{trigger_id}/payload"),
        (runs[1], "/triggers/{trigger_id}"), (runs[1], "/triggers/{trigger_id}/payload")]
    # Deleted: its reads are the audit of who saw it before it went, so they are still listed (200).
    assert ours.delete(f"/triggers/{trigger['id']}").status_code == 204
    assert traced(ours, f"/triggers/{trigger['id']}", runs[1]).status_code == 410
    after = settled(ours, f"/ids/{trigger['id']}/reads", 5)
    assert [r["status"] for r in after] == [200, 200, 200, 200, 410]
    # Like GET /ids/{id}: an ID that never existed, or is not an ID, is a 404 problem.
    assert_problem(ours.get(f"/ids/{uid('trg')}/reads"), 404)
    assert_problem(ours.get("/ids/nope/reads"), 404, "not a recall ID")


@pytest.mark.slow
def test_a_malformed_run_header_is_a_400_problem_and_records_nothing(ours: httpx.Client) -> None:
    thread = Graph(ours).thread()
    for bad in ["has space", "x" * 129, "", "é"]:
        r = ours.get(f"/threads/{thread['id']}", headers={"X-Recall-Run": bad.encode()})
        assert_problem(r, 400, "X-Recall-Run")
    # An absence has nothing to poll for: two flushes of each worker's buffer, then nothing may be there.
    # A slow runner can only make this miss a read recorded by mistake, never fail a correct server.
    time.sleep(2.5 * FLUSH)
    assert_problem(ours.get("/runs/has%20space/reads"), 400)
    assert settled(ours, f"/ids/{thread['id']}/reads", 0, timeout=0) == []


@pytest.mark.slow
def test_a_path_id_no_database_text_can_hold_is_recorded_storable_and_holds_up_no_other_read(
        ours: httpx.Client) -> None:
    """PostgreSQL text holds no NUL: a read of /threads/thr_a%00b once failed its whole batch, which was kept and
    retried for ever, so that worker recorded no read again (in any tenant) until its buffer overflowed."""
    run, thread = uid("run"), Graph(ours).thread()
    odd = ["/threads/thr_a%00b", "/threads/thr_%ff%fe", "/threads/thr_%ed%a0%80", "/triggers/trg_%c3%28"]
    for path in odd:
        assert traced(ours, path, run).status_code == 404, path
    assert traced(ours, f"/threads/{thread['id']}", run).status_code == 200
    reads = settled(ours, f"/runs/{run}/reads", len(odd) + 1)
    assert [r["status"] for r in reads] == [404] * len(odd) + [200]
    assert reads[0]["object_id"] == "thr_a\ufffdb" and reads[-1]["object_id"] == thread["id"]


@pytest.mark.slow
def test_a_refused_key_is_401_and_traces_nothing(trace_server: ServerProcess, ours: httpx.Client,
                                                 database_url: str) -> None:
    thread = Graph(ours).thread()
    run = uid("run")
    revoked = create_key(database_url, "default", "read")
    cli(database_url, "keys", "revoke", key_id(revoked))
    for key in (revoked, "rk_0123456789abcdef." + "A" * 43):
        r = httpx.get(f"{trace_server.url}/threads/{thread['id']}",
                      headers={"Authorization": f"Bearer {key}", "X-Recall-Run": run})
        assert_problem(r, 401)
    assert_problem(httpx.get(f"{trace_server.url}/threads/{thread['id']}", headers={"X-Recall-Run": run}), 401)
    assert traced(ours, f"/threads/{thread['id']}", run).status_code == 200
    assert [r["key_id"] for r in settled(ours, f"/runs/{run}/reads", 1)] == [key_id(ours.headers["authorization"][7:])]
    time.sleep(FLUSH)  # an absence (no refused read flushed later): one more flush, nothing to poll for
    assert len(settled(ours, f"/runs/{run}/reads", 1)) == 1


def test_trace_pages_take_only_their_own_signed_cursors(ours: httpx.Client) -> None:
    run = uid("run")
    other = ours.get(f"/runs/{uid('run')}/reads").json()["next_cursor"]
    assert_problem(ours.get(f"/runs/{run}/reads", params={"cursor": other}), 400, "Invalid cursor")
    assert_problem(ours.get(f"/runs/{run}/reads", params={"cursor": "abc.def"}), 400, "Invalid cursor")


def test_the_trace_metrics_are_exposed(trace_server: ServerProcess) -> None:
    text = httpx.get(f"{trace_server.url}/metrics").text
    for name in ("recall_trace_reads_written_total", "recall_trace_write_failures_total"):
        assert name in text


def test_a_traced_read_runs_exactly_the_statements_of_an_untraced_one(server: ServerProcess, database_url: str) -> None:
    """In process, one pooled connection with a query logger: a read is one statement, traced or not; the
    trace is written later, in one statement for the whole batch (here at shutdown)."""
    key = create_key(database_url, "default", "write")
    settings = config.Settings(database_url=database_url, pool_min=1, pool_max=1, sweep_interval=0,
                               trace_flush_interval=3600)
    app = create_app(settings)
    run = uid("run")
    statements: list[str] = []
    counts = {}

    async def go() -> None:
        async with AsyncTestClient(app) as c:
            c.headers["Authorization"] = f"Bearer {key}"
            thread_id = (await c.post("/threads", json={"id": uid("thr"), "title": "t"})).json()["id"]
            async with app.state.service.db.pool.acquire() as conn:  # the pool's only connection
                conn.add_query_logger(lambda record: statements.append(record.query))
            for traced_ in (False, True):
                statements.clear()
                for _ in range(5):
                    r = await c.get(f"/threads/{thread_id}", headers={"X-Recall-Run": run} if traced_ else {})
                    assert r.status_code == 200
                counts[traced_] = len(statements)
            assert len(app.state.service.trace.pending) == 5
            statements.clear()
        counts["written"] = list(statements)

    asyncio.run(go())
    assert counts[False] == counts[True] == 5, counts
    # asyncpg looks up the array types once per connection, the first time (pg_catalog, with JIT off)
    ours = [q for q in counts["written"] if "pg_catalog" not in q and "'jit'" not in q]
    reads = [q for q in ours if "recall_record_requests" not in q]  # the POST's audit row has its own statement
    assert len(reads) == 1 and "recall_record_reads" in reads[0], counts["written"]


@pytest.mark.slow
def test_a_sigkilled_server_keeps_every_read_made_a_flush_interval_before(server: ServerProcess, database_url: str,
                                                                          tmp_path: Path) -> None:
    key = create_key(database_url, "default", "write")
    env = {"RECALL_SWEEP_INTERVAL": "0", "RECALL_TRACE_FLUSH_INTERVAL": "0.5"}
    server = ServerProcess(database_url, tmp_path / "server.log", **env).start()
    run = uid("run")
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=server.url, headers=headers) as c:
        thread = Graph(c).thread()
        early = [traced(c, f"/threads/{thread['id']}", run).headers["x-request-id"] for _ in range(20)]
        # flushed (and past the settle horizon), however long the runner took to get there
        assert len(settled(c, f"/runs/{run}/reads", len(early))) == len(early)
        late = [traced(c, f"/threads/{thread['id']}", run).headers["x-request-id"] for _ in range(20)]
    server.kill()  # and its worker gone, else (most likely) the draining worker answers the restart's /readyz
    server = ServerProcess(database_url, tmp_path / "server.log", port=server.port, **env).start()
    try:
        with httpx.Client(base_url=server.url, headers=headers) as c:
            kept = [r["request_id"] for r in settled(c, f"/runs/{run}/reads", len(early), timeout=5)]
    finally:
        server.stop()
    assert kept[:len(early)] == early  # all of them, in order
    assert kept[len(early):] == late[:len(kept) - len(early)]  # of the last interval, some or none, never others


def test_a_failed_trace_write_is_counted_kept_for_the_next_flush_and_never_written_twice(
        server: ServerProcess, database_url: str, sql: Any) -> None:
    key = create_key(database_url, "default", "read")
    proxy = PostgresProxy(database_url)
    run = uid("run")

    async def go() -> tuple[int, int, int]:
        db = await Database.open(as_app_role(proxy.url), min_size=1, max_size=2, timeout=2,
                                 queue_limit=4, queue_wait=1)
        try:
            trace = Trace(db, CursorCodec(b"x" * 32), flush_interval=1.0)
            for _ in range(3):
                trace.record(parse(f"Bearer {key}"), run, time.time_ns() // 1000, "thr_x", "/threads/{thread_id}",
                             404, 10, None)
            batch = list(trace.pending)
            failures = WRITE_FAILURES._value.get()
            proxy.cut()
            first = await trace.flush()
            assert WRITE_FAILURES._value.get() == failures + 1 and len(trace.pending) == 3
            proxy.restore()
            second = await trace.flush()
            trace.pending = batch  # as if the write had committed but its answer was lost: written again
            third = await trace.flush()
            return first, second, third
        finally:
            await db.close()
            proxy.close()

    assert asyncio.run(go()) == (0, 3, 3)  # the third write's keys verify, but its rows exist already
    assert sql("SELECT count(*) FROM trace_reads WHERE run_id = $1", run)[0][0] == 3


def test_a_batch_the_database_refuses_as_data_is_dropped_and_counted_not_retried(database_url: str) -> None:
    """No retry can make a data error succeed: such a batch is dropped at once, so it holds up no later read."""
    key = create_key(database_url, "default", "read")

    async def go() -> tuple[int, int, float]:
        db = await Database.open(as_app_role(database_url), min_size=1, max_size=1, timeout=5,
                                 queue_limit=4, queue_wait=1)
        try:
            trace = Trace(db, CursorCodec(b"x" * 32))
            trace.record(parse(f"Bearer {key}"), uid("run"), time.time_ns() // 1000, "thr_x", "/threads/{thread_id}",
                         2**40, 10, None)  # a status no integer column holds: the only way past record's checks
            before = DROPPED.labels("refused")._value.get()
            written = await trace.flush()
            return written, len(trace.pending), DROPPED.labels("refused")._value.get() - before
        finally:
            await db.close()

    assert asyncio.run(go()) == (0, 0, 1)


def test_a_full_buffer_drops_and_counts_what_it_cannot_hold() -> None:
    trace = Trace(db=None, cursors=CursorCodec(b"x" * 32), capacity=2)  # type: ignore[arg-type]
    cred = parse("Bearer rk_0123456789abcdef." + "A" * 43)
    before = DROPPED.labels("buffer_full")._value.get()
    for _ in range(5):
        trace.record(cred, "run", 0, None, "/threads", 200, 1, None)
    assert len(trace.pending) == 2
    assert DROPPED.labels("buffer_full")._value.get() == before + 3


@pytest.mark.slow
def test_the_sweep_purges_trace_reads_older_than_the_ttl(ours: httpx.Client, database_url: str, sql: Any) -> None:
    run = uid("run")
    assert traced(ours, "/threads", run).status_code == 200
    assert len(settled(ours, f"/runs/{run}/reads", 1)) == 1
    sql("INSERT INTO trace_reads (tenant_id, tick, run_id, at, pos, route, status, bytes, key_id) "
        "VALUES ('default', $1, $2, now() - interval '40 days', now() - interval '40 days', '/threads', 200, 1, 'k')",
        -1, run)
    assert len(settled(ours, f"/runs/{run}/reads", 2)) == 2
    subprocess.run([sys.executable, "-m", "recall_server", "sweep"], check=True, capture_output=True,
                   env={**os.environ, "DATABASE_URL": database_url, "RECALL_TRACE_TTL": str(30 * 86400)})
    assert len(settled(ours, f"/runs/{run}/reads", 1, timeout=0)) == 1
