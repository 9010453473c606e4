"""Thread events: a page of the log, appending one, appending many notes at once, one by seq."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import HEAD_PREPEND, Conn, arrays, events_json, filed_summary
from recall_server.db.tenancy import keyed, keyed_write
from recall_server.ids import State
from recall_server.models import Event

_event = msgspec.json.Decoder(Event)


# The log as it was appended: a message a retraction took out is there, marked `retracted`.
# A seq range (seq is gap-free, so it holds exactly those events), bounded by the thread's last_seq
# rather than `ORDER BY seq LIMIT n`: with the LIMIT, PostgreSQL re-planned small pages on every
# execution (tests/test_plans.py).
_SUMMARY = filed_summary("e.type", "e.summary", "e.ref")
# As of $6 (NULL: now): the events appended by then; a message is retracted by a retraction appended by then.
_RETRACTED = """recall_message_retracted(e.tenant_id, e.thread_id, e.seq) AND ($6::timestamptz IS NULL OR EXISTS (
    SELECT 1 FROM message_retractions r JOIN thread_events b ON b.tenant_id = auth.tenant AND b.thread_id = r.thread_id
                                                        AND b.seq = r.by_seq
     WHERE r.tenant_id = auth.tenant AND r.thread_id = e.thread_id AND r.from_seq <= e.seq AND r.to_seq >= e.seq
       AND b.at <= $6))"""
_EVENTS = keyed(f"""
    SELECT recall_is_gone(t.deleted_at, t.expires_at) AS gone,
           (SELECT coalesce(json_agg(CASE WHEN e.type = 'message' AND {_RETRACTED}
                   THEN (recall_event(e.seq, e.type, e.at, e.summary, e.ref, e.ref_gone_at)::jsonb || '{{"retracted": true}}')::json
                   ELSE recall_event(e.seq, e.type, e.at, {_SUMMARY}, e.ref, e.ref_gone_at) END ORDER BY e.seq), '[]')
              FROM thread_events e
             WHERE e.tenant_id = auth.tenant AND e.thread_id = t.id
               AND e.seq > $4 AND e.seq <= least(t.last_seq, $4 + $5) AND ($6::timestamptz IS NULL OR e.at <= $6)) AS events
    FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")


async def list_events(
    conn: Conn, cred: Credential, thread_id: str, after_seq: int, limit: int, as_of: datetime | None = None,
) -> tuple[str, State, list[Event]]:
    """The key's tenant, the thread's state, and the `limit` events after a seq, in order (`as_of`: of those
    appended by then)."""
    tenant, row = await tenancy.fetch(conn, cred, _EVENTS, thread_id, after_seq, limit, as_of)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), events_json.decode(row["events"])


_APPEND = f"""
    WITH v AS (SELECT clock_timestamp() AS at, CASE WHEN $5::text IS NOT NULL THEN recall_expiry($1, $5) END AS gone_at),
    s AS (
      UPDATE threads t SET last_seq = t.last_seq + 1, updated_at = v.at,
             head_events = {HEAD_PREPEND.format(type="$3", summary="$4", ref="$5", gone_at="v.gone_at")}
        FROM v WHERE t.tenant_id = $1 AND t.id = $2 RETURNING t.last_seq)
    INSERT INTO thread_events (tenant_id, thread_id, seq, type, at, summary, ref, ref_gone_at)
    SELECT $1, $2, s.last_seq, $3, v.at, $4, $5, v.gone_at FROM s, v
    RETURNING seq, type, at, summary, ref
"""


async def append_event(conn: Conn, tenant: str, thread_id: str, type_: str, summary: str,
                       ref: str | None) -> Event | None:
    """Take the thread's next seq under its row lock and append; None if the thread is missing.

    The UPDATE holds the row lock until commit, so appends to one thread commit in seq order; it
    prepends the event to the thread's head (dropping the oldest beyond recall_head_size()).
    """
    if conn.sharded:
        row = await append_event_steps(conn, tenant, thread_id, type_, summary, ref)
    else:
        row = await conn.fetchrow(_APPEND, tenant, thread_id, type_, summary, ref)
    return None if row is None else Event(seq=row[0], type=row[1], at=row[2], summary=row[3], ref=row[4])


_UNSET: Any = object()


async def append_event_steps(conn: Conn, tenant: str, thread_id: str, type_: str, summary: str, ref: str | None,
                             gone_at: Any = _UNSET) -> Any:
    """_APPEND on a Citus coordinator, which plans no data-modifying CTE in front of an INSERT: the thread's next
    seq under its row lock, its head, the event (`gone_at`: the ref's expiry, when the caller knows it)."""
    row = await conn.fetchrow("SELECT last_seq, clock_timestamp() AS at, head_events::text AS head FROM threads"
                              " WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE", tenant, thread_id)
    if row is None:
        return None
    if gone_at is _UNSET:
        gone_at = None if ref is None else await conn.fetchval("SELECT recall_expiry($1, $2)", tenant, ref)
    seq = row["last_seq"] + 1
    head = await conn.fetchval("SELECT recall_head_with(jsonb_build_array(recall_head_event($1, $2, $3, $4, $5, $6)),"
                               " $7::jsonb)::text", seq, type_, row["at"], summary, ref, gone_at, row["head"])
    await conn.execute("UPDATE threads SET last_seq = $3, updated_at = $4, head_events = $5::jsonb"
                       " WHERE tenant_id = $1 AND id = $2", tenant, thread_id, seq, row["at"], head)
    return await conn.fetchrow(
        "INSERT INTO thread_events (tenant_id, thread_id, seq, type, at, summary, ref, ref_gone_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq, type, at, summary, ref",
        tenant, thread_id, seq, type_, row["at"], summary, ref, gone_at)


_NOTE_MANY = keyed_write("""
    done AS (SELECT f.note_n AS n, f.note_seq AS seq, f.note_at AS at
               FROM gate, recall_append_notes(gate.tenant, $3::text[], $4::text[], $5::text[]) f)
""", "write", sharded=False)  # Citus plans no call of a distributed function in a CTE


class NewNote(msgspec.Struct, array_like=True):
    """A plain note to append with others (note_many): the arrays recall_append_notes takes, in order."""
    thread_id: str
    summary: str
    ref: str | None


async def note_many(conn: Conn, cred: Credential, notes: list[NewNote]) -> list[Event | None]:
    """Append notes in one statement: each one's event, or None for a note it did not write (its thread or
    ref is missing or gone). All None when the statement lost a deadlock with another transaction that
    locks several threads (it is undone; each note is then appended on its own)."""
    try:
        _, rows = await tenancy.write_many(conn, cred, "write", _NOTE_MANY, *arrays(notes))
    except asyncpg.DeadlockDetectedError:
        return [None] * len(notes)
    written = {row["n"]: row for row in rows}
    return [None if (row := written.get(i)) is None else
            Event(seq=row["seq"], type="note", at=row["at"], summary=note.summary, ref=note.ref)
            for i, note in enumerate(notes, 1)]


async def event_at(conn: Conn, tenant: str, thread_id: str, seq: int) -> Event | None:
    row = await conn.fetchval(
        "SELECT recall_event(e.seq, e.type, e.at, e.summary, e.ref, e.ref_gone_at) FROM thread_events e WHERE tenant_id = $1 AND thread_id = $2 AND seq = $3",
        tenant, thread_id, seq,
    )
    return None if row is None else _event.decode(row)
