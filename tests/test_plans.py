"""Reads by ID settle on PostgreSQL's cached generic plan instead of being re-planned on every call.

PostgreSQL plans a prepared statement's first five executions with the actual parameters, then
keeps a generic plan only if it looks no more expensive. A `LIMIT $n` in the thread view once tipped
that choice: the view was re-planned on every request, which doubled its database CPU. Nothing
else would notice (the answers are the same), so this checks the plan cache itself. (Pages may
be re-planned for small limits; planning those short statements measured as cheap as reusing.)
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg
from helpers import Graph, create_key, run_script, with_database
from test_inline_views import add_events

from recall_server import auth
from recall_server.config import Settings
from recall_server.cursor import CursorCodec
from recall_server.db import queries
from recall_server.db.migrate import migrate
from recall_server.db.pool import Database, as_app_role
from recall_server.rows import Labels
from recall_server.service import Recall


def test_reads_by_id_use_a_generic_plan(database_url: str, api_key: str, graph: Graph, sql) -> None:
    worker, thread = graph.worker(), graph.thread()
    add_events(sql, thread["id"], 100_000)  # the planner's choice depends on table statistics
    sql("ANALYZE")
    trigger = graph.trigger(thread_id=thread["id"])
    report = graph.report(worker["id"], thread["id"], refs=[trigger["id"]])
    cred = auth.parse(f"Bearer {api_key}")

    async def run() -> list[tuple[int, int, str]]:
        db = await Database.open(as_app_role(database_url), min_size=1, max_size=1, timeout=10, queue_limit=4)
        try:
            async with db.connection() as conn:
                recall = Recall(db, CursorCodec(await queries.cursor_secret(conn)), Settings())
            for _ in range(8):
                await recall.get_thread(cred, thread["id"], 4096)
                await recall.get_worker(cred, worker["id"], 4096)
                await recall.get_trigger(cred, trigger["id"], 4096)
                await recall.get_report(cred, report["id"], 4096)
                await recall.get_payload(cred, trigger["id"])
                await recall.get_body(cred, report["id"])
                await recall.resolve(cred, thread["id"])
                await recall.list_events(cred, thread["id"], None, 5)
            async with db.connection() as conn:  # the pool's one connection: its prepared statements
                return [tuple(r) for r in await conn.fetch(
                    "SELECT generic_plans, custom_plans, statement FROM pg_prepared_statements")]
        finally:
            await db.close()

    statements = asyncio.run(run())
    hot = [s for s in statements if s[0] + s[1] >= 8]
    assert len(hot) >= 7, statements
    replanned = [s[2] for s in hot if s[0] == 0]
    assert not replanned, "re-planned on every execution:\n" + "\n\n".join(replanned)


class Recording:
    """A connection that keeps every statement sent through it, with its arguments."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.sent = conn, []

    async def fetchrow(self, sql: str, *args: Any) -> Any:
        self.sent.append((sql, args))
        return await self.conn.fetchrow(sql, *args)


def plan_nodes(node: dict) -> Iterator[dict]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def test_a_workers_threads_are_read_from_what_it_owns_not_from_every_thread(database_url: str) -> None:
    """GET /threads?owner= (a worker view's `threads` link) reads the worker's thread_owners rows and each
    of those threads by primary key. As a filter on the walk along threads_by_created, it read every
    thread of the tenant to find a few (8 ms on the bench store's 11,500 for 20 owned). The planner
    takes that walk when the tenant holds most threads, as on the bench store: a store of its own here."""
    name = f"recall_plans_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    store = with_database(database_url, name)
    try:
        asyncio.run(migrate(store))
        cred = auth.parse(f"Bearer {create_key(store, 'big', 'read')}")
        run_script(store, """
            INSERT INTO threads (tenant_id, id, title, summary, status, request_hash, created_at)
            SELECT 'big', 'thr_bulk' || g, 't', 's', 'open', '\\x', now() - g * interval '1 second'
              FROM generate_series(1, 5000) g;
            INSERT INTO workers (tenant_id, id, name, summary, request_hash) VALUES ('big', 'wkr_few', 'w', 's', '\\x');
            INSERT INTO thread_owners (tenant_id, thread_id, worker_id)
            SELECT 'big', 'thr_bulk' || g, 'wkr_few' FROM generate_series(500, 5000, 500) g;
            ANALYZE threads;
            ANALYZE thread_owners;
        """)

        async def run() -> tuple[list[str], list[dict]]:
            conn = await asyncpg.connect(as_app_role(store))
            try:
                recording = Recording(conn)
                _, page = await queries.list_threads(recording, cred, None, "wkr_few", Labels(), None, 51)
                (statement, args), = recording.sent
                await conn.execute("SET plan_cache_mode = force_generic_plan")  # what the server settles on
                plan = json.loads(await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, *args))
                return [entry.id for entry, _ in page], list(plan_nodes(plan[0]["Plan"]))
            finally:
                await conn.close()

        listed, nodes = asyncio.run(run())
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')
    assert listed == [f"thr_bulk{g}" for g in range(500, 5001, 500)]  # newest first
    reads = {node.get("Index Name", node["Node Type"]) for node in nodes if node.get("Relation Name") == "threads"}
    assert reads == {"threads_pkey"}, f"threads read through {reads}, not only by primary key"
