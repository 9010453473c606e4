"""Reads by ID settle on PostgreSQL's cached generic plan instead of being re-planned on every call.

PostgreSQL plans a prepared statement's first five executions with the actual parameters, then
keeps a generic plan only if it looks no more expensive. A `LIMIT $n` in the thread view once tipped
that choice: the view was re-planned on every request, which doubled its database CPU. Nothing
else would notice (the answers are the same), so this checks the plan cache itself. (Pages may
be re-planned for small limits; planning those short statements measured as cheap as reusing.)
"""

from __future__ import annotations

import asyncio

from helpers import Graph
from test_inline_views import add_events

from recall_server import auth
from recall_server.config import Settings
from recall_server.cursor import CursorCodec
from recall_server.db import queries
from recall_server.db.pool import Database, as_app_role
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
