"""Triggers: the view, filing one (with its event on its thread), filing many at once, neighbours."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import (HEAD_PREPEND, Conn, arrays, labels_of, least, links_json, positions,
                                              thread_expiry)
from recall_server.db.queries.events import append_event_steps
from recall_server.db.tenancy import keyed, keyed_write
from recall_server.rows import Labels, TriggerRow

_TRIGGER = keyed("""
    SELECT tr.id, tr.source, tr.thread_id, tr.summary, tr.content_type,
      octet_length(tr.payload) AS size,
      CASE WHEN octet_length(tr.payload) <= $4 THEN tr.payload
           ELSE substring(tr.payload FROM 1 FOR $5) END AS head,
      CASE WHEN octet_length(tr.payload) <= $4 THEN ''::bytea
           ELSE substring(tr.payload FROM octet_length(tr.payload) - $5 + 1) END AS tail,
      tr.occurred_at, tr.created_at, tr.app_id, tr.agent_id, tr.run_id, tr.expires_at, tr.namespace,
      recall_is_gone(tr.deleted_at, tr.expires_at) AS gone,
      (SELECT coalesce(json_agg(recall_link(n.id, n.summary, recall_is_gone(n.deleted_at, n.expires_at))
                                ORDER BY nb.position), '[]')
         FROM trigger_neighbours nb JOIN triggers n ON n.tenant_id = auth.tenant AND n.id = nb.neighbour_id
        WHERE nb.tenant_id = auth.tenant AND nb.trigger_id = tr.id) AS neighbours
    FROM triggers tr WHERE tr.tenant_id = auth.tenant AND tr.id = $3
""")


async def fetch_trigger(conn: Conn, cred: Credential, trigger_id: str, inline_max: int,
                        preview: int) -> tuple[str, TriggerRow | None]:
    tenant, row = await tenancy.fetch(conn, cred, _TRIGGER, trigger_id, inline_max, preview)
    if row is None:
        return tenant, None
    return tenant, TriggerRow(
        id=row["id"], source=row["source"], thread_id=row["thread_id"], summary=row["summary"],
        content_type=row["content_type"], size=row["size"], head=row["head"], tail=row["tail"],
        occurred_at=row["occurred_at"], created_at=row["created_at"],
        neighbours=links_json.decode(row["neighbours"]), namespace=row["namespace"], **labels_of(row),
    )


async def trigger_by_external_id(conn: Conn, tenant: str, source: str, external_id: str) -> str | None:
    return await conn.fetchval(
        "SELECT id FROM triggers WHERE tenant_id = $1 AND source = $2 AND external_id = $3",
        tenant, source, external_id,
    )


async def payload_sha(conn: Conn, tenant: str, trigger_id: str) -> bytes | None:
    return await conn.fetchval("SELECT payload_sha256 FROM triggers WHERE tenant_id = $1 AND id = $2",
                               tenant, trigger_id)


insert_neighbours = positions("trigger_neighbours", "trigger_id", "neighbour_id")


_TRIGGER_COLUMNS = """tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256, request_hash,
                      occurred_at, app_id, agent_id, run_id, external_id, expires_at"""


# The trigger, and on its thread the trigger_filed event (gone when the trigger is: its expiry, capped
# by the thread's), or nothing at all when the ID or the (source, external_id) delivery is taken.
_FILE_TRIGGER = f"""
    WITH v AS (SELECT clock_timestamp() AS at),
    trg AS (
      INSERT INTO triggers ({_TRIGGER_COLUMNS}, namespace)
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, clock_timestamp()), $11, $12, $13, $14,
              least($15, (SELECT expires_at FROM threads WHERE tenant_id = $1 AND id = $4)), $16)
      ON CONFLICT DO NOTHING RETURNING expires_at),
    th AS (
      UPDATE threads t SET last_seq = t.last_seq + 1, updated_at = v.at,
             head_events = {HEAD_PREPEND.format(type="'trigger_filed'", summary="$5::text", ref="$2::text",
                                                 gone_at="trg.expires_at")}
        FROM trg, v WHERE t.tenant_id = $1 AND t.id = $4
      RETURNING t.last_seq),
    ev AS (
      INSERT INTO thread_events (tenant_id, thread_id, seq, type, at, summary, ref, ref_gone_at)
      SELECT $1, $4, th.last_seq, 'trigger_filed', v.at, $5, $2, trg.expires_at FROM th, v, trg)
    SELECT true FROM trg
"""


async def insert_trigger(conn: Conn, tenant: str, trigger_id: str, source: str, thread_id: str | None,
                         summary: str, content_type: str, payload: bytes, sha: bytes, labels: Labels,
                         req_hash: bytes, occurred_at: datetime | None, external_id: str | None,
                         expires_at: datetime | None) -> bool:
    """File a trigger (on a thread whose row lock the caller holds: with its event) in one statement;
    False, having written nothing, when the ID or the (source, external_id) delivery already exists."""
    args = (tenant, trigger_id, source, thread_id, summary, content_type, payload, sha, req_hash, occurred_at,
            labels.app_id, labels.agent_id, labels.run_id, external_id, expires_at, labels.namespace)
    if conn.sharded:
        return await _file_trigger_steps(conn, *args)
    return await conn.fetchval(_FILE_TRIGGER, *args) is not None


async def _file_trigger_steps(conn: Conn, tenant: str, trigger_id: str, source: str, thread_id: str | None,
                              summary: str, content_type: str, payload: bytes, sha: bytes, req_hash: bytes,
                              occurred_at: Any, app_id: Any, agent_id: Any, run_id: Any, external_id: Any,
                              expires_at: Any, namespace: str) -> bool:
    """_FILE_TRIGGER on a Citus coordinator (no subquery in an INSERT's VALUES, no data-modifying CTE in front of
    an INSERT): the trigger (its expiry capped by its thread's), then on its thread the trigger_filed event."""
    expires_at = least(expires_at, await thread_expiry(conn, tenant, thread_id))
    made = await conn.fetchrow(
        "INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,"
        " request_hash, occurred_at, app_id, agent_id, run_id, external_id, expires_at, namespace) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, clock_timestamp()), $11, $12, $13, $14, $15, $16)"
        " ON CONFLICT DO NOTHING RETURNING expires_at",
        tenant, trigger_id, source, thread_id, summary, content_type, payload, sha, req_hash, occurred_at,
        app_id, agent_id, run_id, external_id, expires_at, namespace)
    if made is None:
        return False
    if thread_id is not None:
        await append_event_steps(conn, tenant, thread_id, "trigger_filed", summary, trigger_id, made["expires_at"])
    return True


# Writes in one statement (tenancy.keyed_write).
# The hot writes, each one round trip: key check, scope gate, the write and what the response needs.
# They write nothing (and return None) when the request is not the plain case (a missing or gone
# thread, a dead ref) or raise a unique violation, which undoes the whole statement, when an ID is
# taken; the service then runs the same request through its transaction, which answers it exactly.

# Plain thread-less triggers of one key, filed together (coalesce.py): one statement, one commit. Plain means
# in the tenant's root namespace too (a trigger with a namespace is filed on its own: insert_trigger).
_INGEST_MANY = keyed_write(f"""
    done AS (
      INSERT INTO triggers ({_TRIGGER_COLUMNS})
      SELECT gate.tenant, x.id, x.source, NULL, x.summary, x.content_type, x.payload, x.sha, x.hash,
             coalesce(x.occurred_at, clock_timestamp()), x.app_id, x.agent_id, x.run_id, x.external_id, x.expires_at
        FROM gate, unnest($3::text[], $4::text[], $5::text[], $6::text[], $7::bytea[], $8::bytea[], $9::bytea[],
                          $10::timestamptz[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[])
             AS x(id, source, summary, content_type, payload, sha, hash, occurred_at, app_id, agent_id, run_id,
                  external_id, expires_at)
      RETURNING id, occurred_at, created_at, expires_at)
""", "write", sharded=False)  # Citus plans neither INSERT ... SELECT FROM unnest nor a function call in a CTE


class NewTrigger(msgspec.Struct, array_like=True):
    """A plain trigger to file with others (ingest_many): the columns of _INGEST_MANY's unnest, in order."""
    id: str
    source: str
    summary: str
    content_type: str
    payload: bytes
    sha: bytes
    hash: bytes
    occurred_at: datetime | None
    app_id: str | None
    agent_id: str | None
    run_id: str | None
    external_id: str | None
    expires_at: datetime | None


# Plain triggers of one key filed on threads, together (coalesce.py; recall_file_on_threads): one statement.
_FILE_ON_THREADS = keyed_write("""
    done AS (SELECT f.trigger_n AS n, f.trigger_occurred_at AS occurred_at, f.trigger_created_at AS created_at,
                    f.trigger_expires_at AS expires_at
               FROM gate, recall_file_on_threads(gate.tenant, $3::text[], $4::text[], $5::text[], $6::text[],
                                                 $7::text[], $8::bytea[], $9::bytea[], $10::bytea[],
                                                 $11::timestamptz[], $12::text[], $13::text[], $14::text[],
                                                 $15::text[], $16::timestamptz[]) f)
""", "write", sharded=False)  # Citus plans neither INSERT ... SELECT FROM unnest nor a function call in a CTE


async def file_on_threads(conn: Conn, cred: Credential, filings: list[tuple[str, NewTrigger]]
                          ) -> list[tuple[datetime, datetime, datetime | None] | None]:
    """File (thread ID, trigger) pairs in one statement, each with its trigger_filed event: each one's
    (occurred_at, created_at, expires_at), None for one whose thread is missing or gone; all None when an ID
    or a delivery is taken or the statement lost a deadlock (it is undone; each is then filed on its own)."""
    try:
        _, rows = await tenancy.write_many(conn, cred, "write", _FILE_ON_THREADS, [t for t, _ in filings],
                                           *arrays(t for _, t in filings))
    except (asyncpg.UniqueViolationError, asyncpg.DeadlockDetectedError):
        return [None] * len(filings)
    written = {row["n"]: (row["occurred_at"], row["created_at"], row["expires_at"]) for row in rows}
    return [written.get(i) for i in range(1, len(filings) + 1)]


async def ingest_many(conn: Conn, cred: Credential, triggers: list[NewTrigger]
                      ) -> list[tuple[datetime, datetime, datetime | None] | None]:
    """File thread-less triggers in one statement: each one's (occurred_at, created_at, expires_at); all None
    when an ID or a delivery is taken (the statement is undone; each is then filed on its own)."""
    try:
        _, rows = await tenancy.write_many(conn, cred, "write", _INGEST_MANY, *arrays(triggers))
    except asyncpg.UniqueViolationError:  # the statement is undone: nothing was written
        return [None] * len(triggers)
    written = {row["id"]: (row["occurred_at"], row["created_at"], row["expires_at"]) for row in rows}
    return [written.get(t.id) for t in triggers]  # on Citus none: each is then filed on its own


# Plain notes of one key, appended together (coalesce.py; recall_append_notes): one statement, one commit.
