"""The one-statement writes (queries.ingest_at_once, note_at_once): they write in the plain case and
write nothing at all otherwise, so the service's transaction can answer the request exactly."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from helpers import Graph, create_key, uid

from recall_server import auth
from recall_server.db import queries
from recall_server.db.pool import as_app_role
from recall_server.errors import Forbidden
from recall_server.rows import Labels


def run(database_url: str, key: str, call: Any) -> Any:
    async def go() -> Any:
        conn = await asyncpg.connect(as_app_role(database_url))
        try:
            return await call(conn, auth.parse(f"Bearer {key}"))
        finally:
            await conn.close()

    return asyncio.run(go())


def ingest(trigger_id: str, thread_id: str | None):
    return lambda conn, cred: queries.ingest_at_once(
        conn, cred, trigger_id, "test", thread_id, "filed at once", "text/plain", b"p", b"s" * 32, Labels(),
        b"h", None, None, None)


def test_a_plain_ingest_and_note_write_in_one_statement(database_url: str, api_key: str, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    trigger = uid("trg")
    assert run(database_url, api_key, ingest(trigger, thread)) is not None
    assert run(database_url, api_key, ingest(uid("trg"), None)) is not None
    event = run(database_url, api_key, lambda conn, cred: queries.note_at_once(conn, cred, thread, "n", trigger))
    assert event is not None and event.seq == 2
    rows = sql("SELECT seq, type, ref FROM thread_events WHERE thread_id = $1 ORDER BY seq", thread)
    assert [tuple(r) for r in rows] == [(1, "trigger_filed", trigger), (2, "note", trigger)]


def test_a_taken_id_or_a_missing_thread_writes_nothing(database_url: str, api_key: str, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    taken = graph.trigger()["id"]
    assert run(database_url, api_key, ingest(taken, thread)) is None
    assert run(database_url, api_key, ingest(uid("trg"), uid("thr"))) is None
    assert run(database_url, api_key, lambda conn, cred: queries.note_at_once(conn, cred, thread, "n", uid("trg"))) \
        is None, "a dangling ref"
    assert sql("SELECT last_seq, head_events FROM threads WHERE id = $1", thread)[0][0] == 0
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = $1", thread)[0][0] == 0


def test_a_read_key_is_refused_and_writes_nothing(database_url: str, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    reader = create_key(database_url, "default", "read")
    trigger = uid("trg")
    with pytest.raises(Forbidden):
        run(database_url, reader, ingest(trigger, thread))
    with pytest.raises(Forbidden):
        run(database_url, reader, lambda conn, cred: queries.note_at_once(conn, cred, thread, "n", None))
    assert not sql("SELECT 1 FROM triggers WHERE id = $1", trigger)
    assert sql("SELECT last_seq FROM threads WHERE id = $1", thread)[0][0] == 0
