"""Reads by ID settle on PostgreSQL's cached generic plan instead of being re-planned on every call.

PostgreSQL plans a prepared statement's first five executions with the actual parameters, then
keeps a generic plan only if it looks no more expensive. A `LIMIT $n` in the thread view once tipped
that choice: the view was re-planned on every request, which doubled its database CPU. Nothing
else would notice (the answers are the same), so this checks the plan cache itself. (Pages may
be re-planned for small limits; planning those short statements measured as cheap as reusing.)

The lists, on a store of one big tenant: whatever the filters, and wherever the cursor, a page's
generic plan reads about a page of rows, not the rows before it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any

import asyncpg
import httpx
import pytest
from helpers import Graph, create_key, run_script, run_sql, with_database
from test_inline_views import add_events

from recall_server import auth
from recall_server.auth import Credential, KeyCache
from recall_server.config import Settings
from recall_server.cursor import PAGE_BYTES, CursorCodec
from recall_server.db import queries, tenancy
from recall_server.db.migrate import migrate
from recall_server.db.pool import Database, as_app_role
from recall_server.rows import Labels
from recall_server.service import Service


@pytest.mark.slow
def test_reads_by_id_use_a_generic_plan(database_url: str, api_key: str, graph: Graph, sql) -> None:
    worker, thread = graph.worker(), graph.thread()
    add_events(sql, thread["id"], 100_000)  # the planner's choice depends on table statistics
    sql("ANALYZE")
    trigger = graph.trigger(thread_id=thread["id"])
    report = graph.report(worker["id"], thread["id"], refs=[trigger["id"]])
    # Each statement twice: behind the key check, and behind a check the process remembers (tenancy.BOUND)
    creds = [auth.parse(f"Bearer {api_key}"), auth.parse(f"Bearer {api_key}", KeyCache(clock=lambda: 0.0))]

    async def run() -> list[tuple[int, int, str]]:
        db = await Database.open(as_app_role(database_url), min_size=1, max_size=1, timeout=10,
                                 queue_limit=4, queue_wait=1)
        try:
            async with db.connection() as conn:
                views = Service(db, CursorCodec(await queries.cursor_secret(conn)), Settings()).views
            for cred in [creds[0]] * 8 + [creds[1]] * 9:  # the first of the remembered ones checks the key
                await views.get_thread(cred, thread["id"], 4096)
                await views.get_worker(cred, worker["id"], 4096)
                await views.get_trigger(cred, trigger["id"], 4096)
                await views.get_report(cred, report["id"], 4096)
                await views.get_payload(cred, trigger["id"])
                await views.get_body(cred, report["id"])
                await views.resolve(cred, thread["id"])
                await views.list_events(cred, thread["id"], None, 5)
            async with db.connection() as conn:  # the pool's one connection: its prepared statements
                return [tuple(r) for r in await conn.fetch(
                    "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements")]
        finally:
            await db.close()

    statements = asyncio.run(run())
    hot = [s for s in statements if s[0] + s[1] >= 8]
    assert len(hot) >= 14 and sum(tenancy.BOUND in s[2] for s in hot) >= 7, statements
    replanned = [s[2] for s in hot if s[0] == 0]
    assert not replanned, "re-planned on every execution:\n" + "\n\n".join(replanned)


class Recording:
    """A connection to one node that keeps every statement sent through it, with its arguments."""

    sharded = False

    def __init__(self, conn: Any) -> None:
        self.conn, self.sent = conn, []

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        self.sent.append((sql, args))
        return await self.conn.fetchrow(sql, *args)


def plan_nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


@pytest.fixture(scope="module")
def big_store(database_url: str) -> Iterator[tuple[str, Credential]]:
    """A store of its own holding one big tenant, as on the bench store: the planner takes a walk of the
    whole tenant along an index in the list's order when most rows are the tenant's, which the shared test
    database (many small tenants) does not show. 5,000 threads (10 owned by wkr_few, 10 of run run-few, 10
    closed), 3,000 current memories (10 of agent agent-few), 12,000 reports by four workers (each citing one of
    trg_cited1-4), 3,000 reads of one traced run."""
    name = f"recall_plans_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    store = with_database(database_url, name)
    try:
        asyncio.run(migrate(store))
        cred = auth.parse(f"Bearer {create_key(store, 'big', 'read')}")
        run_script(store, """
            INSERT INTO threads (tenant_id, id, title, summary, status, run_id, request_hash, created_at, namespace)
            SELECT 'big', 'thr_bulk' || g, 't', 's', CASE WHEN g % 500 = 7 THEN 'closed' ELSE 'open' END,
                   CASE WHEN g % 500 = 3 THEN 'run-few' END, '\\x', now() - g * interval '1 second',
                   CASE g % 500 WHEN 11 THEN 'teams/few' WHEN 13 THEN 'teams/few/sub' WHEN 17 THEN 'teams/few-other'
                                ELSE '' END
              FROM generate_series(1, 5000) g;
            INSERT INTO workers (tenant_id, id, name, summary, request_hash)
            SELECT 'big', w, 'w', 's', '\\x' FROM unnest(ARRAY['wkr_few', 'wkr_a', 'wkr_b', 'wkr_c']) w;
            INSERT INTO thread_owners (tenant_id, thread_id, worker_id)
            SELECT 'big', 'thr_bulk' || g, 'wkr_few' FROM generate_series(500, 5000, 500) g;
            INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256,
                                 request_hash, created_at)
            SELECT 'big', 'rpt_bulk' || g, (ARRAY['wkr_few', 'wkr_a', 'wkr_b', 'wkr_c'])[g % 4 + 1],
                   'thr_bulk' || (g % 5000 + 1), 'r', 'text/plain', '\\x', sha256('\\x'), '\\x',
                   now() - g * interval '1 second' FROM generate_series(1, 12000) g;
            INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value,
                                  value_sha256, confirmed, agent_id, request_hash, chain, version, current)
            SELECT 'big', 'mem_bulk' || g, 'users/u' || (g % 30), 'k' || g, sha256(('u' || g)::bytea), 'fact', 'm',
                   'text/plain', '\\x', sha256('\\x'), 'agent', CASE WHEN g % 300 = 5 THEN 'agent-few' END, '\\x',
                   'mem_bulk' || g, 1, true
              FROM generate_series(1, 3000) g;
            INSERT INTO triggers (tenant_id, id, source, summary, content_type, payload, payload_sha256, request_hash,
                                  occurred_at)
            SELECT 'big', 'trg_cited' || n, 'ci', 'red', 'text/plain', '\\x', sha256('\\x'), '\\x', now()
              FROM generate_series(1, 4) n;
            INSERT INTO report_refs (tenant_id, report_id, position, trigger_id)
            SELECT 'big', 'rpt_bulk' || g, 1, 'trg_cited' || (g % 4 + 1) FROM generate_series(1, 12000) g;
            INSERT INTO trace_reads (tenant_id, tick, run_id, at, pos, object_id, route, status, bytes, key_id)
            SELECT 'big', g, 'run-traced', now() - interval '1 hour' + g * interval '1 ms',
                   now() - interval '1 hour' + g * interval '1 ms', 'thr_bulk1', '/threads/{thread_id}', 200, 100, 'k'
              FROM generate_series(1, 3000) g;
            ANALYZE;
        """)
        yield store, cred
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


Read = Callable[[Any], Awaitable[Any]]  # a list read on a connection


def _literal(value: object) -> str:
    """An argument as SQL for EXECUTE, which takes no parameters of its own."""
    if value is None:
        return "NULL"
    if isinstance(value, bytes):
        return f"'\\x{value.hex()}'::bytea"
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'::timestamptz"
    if isinstance(value, int | float):
        return str(value)
    assert isinstance(value, str), value
    return "'" + value.replace("'", "''") + "'"


def generic_plan(store: str, read: Read) -> tuple[Any, list[dict]]:
    """What `read` returned, and the nodes of the plan PostgreSQL settles on for the one statement it sent:
    a generic plan, as the server's cached statements use after five runs, run with EXPLAIN ANALYZE. (An
    EXPLAIN of the statement itself would plan it for its arguments, which folds `$n IS NULL` away.)"""
    async def run() -> tuple[Any, list[dict]]:
        conn = await asyncpg.connect(as_app_role(store))
        try:
            recording = Recording(conn)
            result = await read(recording)
            (statement, args), = recording.sent
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            await conn.execute(f"PREPARE listed AS {statement}")
            values = ", ".join(map(_literal, args))
            plan = json.loads(await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE listed({values})"))
            return result, list(plan_nodes(plan[0]["Plan"]))
        finally:
            await conn.close()

    return asyncio.run(run())


def rows_read(nodes: list[dict]) -> dict[str, int]:
    """Rows the plan read from each table: those it kept and those a filter threw away, over every loop."""
    read: dict[str, int] = {}
    for node in nodes:
        if "Relation Name" in node:
            rows = (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)) * node["Actual Loops"]
            read[node["Relation Name"]] = read.get(node["Relation Name"], 0) + round(rows)
    return read


def test_a_workers_threads_are_read_from_what_it_owns_not_from_every_thread(big_store) -> None:
    """GET /threads?owner= (a worker view's `threads` link) reads the worker's thread_owners rows and each
    of those threads by primary key. As a filter on the walk along threads_by_created, it read every
    thread of the tenant to find a few (8 ms on the bench store's 11,500 for 20 owned)."""
    store, cred = big_store
    (_, page), nodes = generic_plan(store, lambda conn: queries.list_threads(conn, cred, None, "wkr_few", Labels(),
                                                                             None, None, 51))
    assert [entry.id for entry, _ in page] == [f"thr_bulk{g}" for g in range(500, 5001, 500)]  # newest first
    reads = {node.get("Index Name", node["Node Type"]) for node in nodes if node.get("Relation Name") == "threads"}
    assert reads == {"threads_pkey"}, f"threads read through {reads}, not only by primary key"


# Each list a page at a time: a filter an index serves, or a cursor deep in a long list, reads about a
# page of rows, not every row before it. Written as `($n IS NULL OR column = $n)`, neither a filter nor a
# cursor is an index condition in a generic plan: the first page of a rare label read the whole tenant,
# and so did every page deep in a long list. Each case: the table, the page of 6 as IDs (a run's reads
# as ticks), and a plain query for the same page.
def _threads(cred: Credential, status: str | None = None, labels: Labels = Labels(),
             after: tuple[datetime, str] | None = None, namespace: str | None = None) -> Read:
    async def read(conn: Any) -> list[Any]:
        _, page = await queries.list_threads(conn, cred, status, None, labels, namespace, after, 6)
        return [entry.id for entry, _ in page]
    return read


def _memories(cred: Credential, namespace: str | None = None, labels: Labels = Labels(),
              after: tuple[str, str] | None = None) -> Read:
    async def read(conn: Any) -> list[Any]:
        _, page = await queries.list_memories(conn, cred, namespace, None, None, labels, None, after, 6, 0, False)
        return [m.id for m in page]
    return read


def _reports(cred: Credential, after: tuple[datetime, str]) -> Read:
    async def read(conn: Any) -> list[Any]:
        _, _, page = await queries.list_reports(conn, cred, "wkr_few", Labels(), after, 6)
        return [entry.id for entry, _ in page]
    return read


def _run_reads(cred: Credential, after: tuple[datetime, int]) -> Read:
    async def read(conn: Any) -> list[Any]:
        _, page = await queries.run_reads(conn, cred, "run-traced", 1, after, 6)
        return [tick for _, (_, tick) in page]
    return read


def _backlinks(cred: Credential, after: tuple[str, str]) -> Read:
    async def read(conn: Any) -> list[Any]:
        _, _, page = await queries.backlinks(conn, cred, "trigger", "trg_cited1", after, 6)
        return [link.id for link in page]
    return read


def _time(store: str, sql: str) -> datetime:
    return run_sql(store, sql)[0][0]


THREADS = "SELECT id FROM threads WHERE tenant_id = 'big' AND {} ORDER BY created_at DESC, id DESC LIMIT 6"
MEMORIES = "SELECT id FROM memories WHERE tenant_id = 'big' AND current AND {} ORDER BY namespace, key LIMIT 6"
LISTS: dict[str, Callable[[str, Credential], tuple[str, Read, str]]] = {
    "threads of a run": lambda store, cred: (
        "threads", _threads(cred, labels=Labels(run_id="run-few")), THREADS.format("run_id = 'run-few'")),
    "threads in a namespace and under it": lambda store, cred: (
        "threads", _threads(cred, namespace="teams/few"),
        THREADS.format("(namespace = 'teams/few' OR namespace LIKE 'teams/few/%')")),
    "closed threads": lambda store, cred: (
        "threads", _threads(cred, status="closed"), THREADS.format("status = 'closed'")),
    "threads past a cursor deep in the list": lambda store, cred: (
        "threads", _threads(cred, after=(_time(store, "SELECT created_at FROM threads WHERE id = 'thr_bulk4000'"),
                                         "thr_bulk4000")),
        THREADS.format("(created_at, id) < (SELECT created_at, id FROM threads WHERE id = 'thr_bulk4000')")),
    "a worker's reports past a cursor deep in the list": lambda store, cred: (
        "reports", _reports(cred, (_time(store, "SELECT created_at FROM reports WHERE id = 'rpt_bulk8000'"),
                                   "rpt_bulk8000")),
        "SELECT id FROM reports WHERE worker_id = 'wkr_few'"
        " AND (created_at, id) < (SELECT created_at, id FROM reports WHERE id = 'rpt_bulk8000')"
        " ORDER BY created_at DESC, id DESC LIMIT 6"),
    "memories of an agent": lambda store, cred: (
        "memories", _memories(cred, labels=Labels(agent_id="agent-few")), MEMORIES.format("agent_id = 'agent-few'")),
    "memories under a namespace": lambda store, cred: (
        "memories", _memories(cred, namespace="users/u7"), MEMORIES.format("namespace = 'users/u7'")),
    "memories past a cursor deep in the list": lambda store, cred: (
        "memories", _memories(cred, after=("users/u8", "k2000")),
        MEMORIES.format("(namespace, key) > ('users/u8', 'k2000')")),
    "a trigger's citing reports past a cursor deep in the list": lambda store, cred: (
        "report_refs", _backlinks(cred, ("cites", "rpt_bulk2500")),
        "SELECT report_id FROM report_refs WHERE trigger_id = 'trg_cited1' AND report_id > 'rpt_bulk2500'"
        " ORDER BY report_id COLLATE \"C\" LIMIT 6"),
    "a run's reads past a cursor deep in the list": lambda store, cred: (
        "trace_reads", _run_reads(cred, (_time(store, "SELECT pos FROM trace_reads WHERE tick = 2500"), 2500)),
        "SELECT tick FROM trace_reads WHERE tick > 2500 ORDER BY pos, tick LIMIT 6"),
}


# Backlinks take the DISTINCT of each relation with an incremental sort, which reads 32 rows at least, and
# join the linking reports with a merge join, which passes over the reports citing other triggers (3 of
# 4 here): 33 report_refs and 133 reports for the page; before the bound on x.id, 3,804 reports.
# A namespace and those under it is a range of threads_by_namespace whose threads are then sorted by time:
# the range's 30 here (teams/few, teams/few/sub, and teams/few-other, which the range holds and its filter
# drops), not the tenant's 5,000.
READ_AHEAD = {"a trigger's citing reports past a cursor deep in the list": 150,
              "threads in a namespace and under it": 32}


@pytest.mark.parametrize("case", LISTS)
def test_a_page_reads_about_a_page_of_rows(big_store: tuple[str, Credential], case: str) -> None:
    store, cred = big_store
    table, read, same_page = LISTS[case](store, cred)
    page, nodes = generic_plan(store, read)
    assert page == [r[0] for r in run_sql(store, same_page)] and len(page) == 6
    counts = rows_read(nodes)
    assert counts[table] and max(counts.values()) <= READ_AHEAD.get(case, 12), f"rows read for a page of 6: {counts}"


class _OneNode:
    """An asyncpg connection as the queries take it (on one node, not a Citus coordinator)."""

    sharded = False

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.fetch, self.fetchrow, self.fetchval = conn.fetch, conn.fetchrow, conn.fetchval


def test_a_page_of_large_checkpoints_reads_the_values_of_its_rows_only(database_url: str, api_key: str,
                                                                        client: httpx.Client) -> None:
    """Twelve 1 MB checkpoints at limit=500: the read stops at the page byte budget (the rows whose bytes before
    them are within it: five, of which the pager shows three, their base64 being larger) and reads only those
    rows' values from TOAST, not all twelve's (a read of limit + 1 rows read 12 MB to show 4 MB)."""
    thread = f"plans-{uuid.uuid4().hex[:12]}"
    for n in range(12):
        body = {"thread_id": thread, "checkpoint_id": f"c{n:02d}", "type": "msgpack",
                "checkpoint": base64.b64encode(os.urandom(1_000_000)).decode()}
        assert client.post("/checkpoints", json=body).status_code == 201
    cred = auth.parse(f"Bearer {api_key}")

    async def toast_blocks(conn: asyncpg.Connection) -> int:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        return await conn.fetchval("SELECT coalesce(toast_blks_hit, 0) + coalesce(toast_blks_read, 0)"
                                   " FROM pg_statio_all_tables WHERE relname = 'checkpoints'")

    async def run() -> tuple[list[Any], int, int]:
        conn = await asyncpg.connect(database_url)  # the owner, who may read the statistics
        app = await asyncpg.connect(as_app_role(database_url))
        try:
            before = await toast_blocks(conn)
            _, rows = await queries.list_checkpoints(_OneNode(app), cred, thread, None, None, None, None, 501,
                                                     PAGE_BYTES)
            await app.execute("SELECT 1")  # the read's transaction ends: its statistics are flushed
            await app.execute("SELECT pg_stat_force_next_flush()")
            await app.execute("SELECT 1")
            return rows, before, await toast_blocks(conn)
        finally:
            await conn.close()
            await app.close()

    rows, before, after = asyncio.run(run())
    assert [r["checkpoint_id"] for r in rows] == ["c11", "c10", "c09", "c08", "c07"]
    one_value = 1_000_000 // 8192  # blocks of a 1 MB value's TOAST chunks, at least
    assert after - before < 7 * one_value * 1.1, f"TOAST blocks read: {after - before} (five values: {5 * one_value})"
