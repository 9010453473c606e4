"""Threads: the view (from its head or its log), the list, creating, updating, owners, the row lock."""

from __future__ import annotations

import functools
from datetime import datetime

import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import (
    HEAD_SIZE,
    NEWEST,
    Conn,
    equal,
    events_json,
    filed_summary,
    given,
    head_owner,
    head_owners_json,
    label_filters,
    labels_of,
    links_json,
    shown,
    shown_events,
    under,
)
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.models import Event, ThreadIndexEntry
from recall_server.rows import Labels, ThreadRow

# The default view reads the thread's head (threads.head_events, head_owners: the newest events and the
# owners, kept on the row by the writes that change them), so it is a primary-key fetch of one row.
# Whether an event's target or an owner is gone depends on the clock, so the head keeps the times and
# the reader compares them with the statement's now(), as recall_event and recall_is_gone would.
_THREAD_HEAD = keyed(f"""
    SELECT t.id, t.title, t.summary, t.status, t.last_seq, t.created_at, t.updated_at, t.app_id, t.agent_id,
      t.run_id, t.expires_at, t.namespace, recall_is_gone(t.deleted_at, t.expires_at) AS gone,
      {shown("t.head_owners", "workers")}::text AS owners, {shown_events("t.head_events")}::text AS events,
      now() AS now,
      (SELECT json_build_object('count', count(*), 'latest', max(c.checkpoint_id))::text FROM checkpoints c
        WHERE c.tenant_id = auth.tenant AND c.thread_id = t.id AND c.checkpoint_ns = '') AS checkpoints
    FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")

# Bigger budgets show more events than the head holds: rendered from the log, as the head is (messages a
# retraction took out are skipped; recall_head_events). The newest events by
# seq range (seq is gap-free), not `ORDER BY seq DESC LIMIT n`: with the LIMIT, PostgreSQL re-planned
# this statement on every execution (tests/test_plans.py).
_THREAD_LOG = keyed(f"""
    SELECT t.id, t.title, t.summary, t.status, t.last_seq, t.created_at, t.updated_at, t.app_id, t.agent_id,
      t.run_id, t.expires_at, t.namespace, recall_is_gone(t.deleted_at, t.expires_at) AS gone,
      (SELECT coalesce(json_agg(recall_link(w.id, w.summary, recall_is_gone(w.deleted_at, w.expires_at))
                                ORDER BY o.assigned_at, w.id), '[]')
         FROM thread_owners o JOIN workers w ON w.tenant_id = auth.tenant AND w.id = o.worker_id
        WHERE o.tenant_id = auth.tenant AND o.thread_id = t.id) AS owners,
      (SELECT coalesce(json_agg(recall_event(e.seq, e.type, e.at, {filed_summary("e.type", "e.summary", "e.ref")},
                                             e.ref, e.ref_gone_at) ORDER BY e.seq DESC), '[]') FROM thread_events e
        WHERE e.tenant_id = auth.tenant AND e.thread_id = t.id AND e.seq > t.last_seq - $4
          AND NOT (e.type = 'message' AND recall_message_retracted(e.tenant_id, e.thread_id, e.seq))) AS events,
      (SELECT json_build_object('count', count(*), 'latest', max(c.checkpoint_id))::text FROM checkpoints c
        WHERE c.tenant_id = auth.tenant AND c.thread_id = t.id AND c.checkpoint_ns = '') AS checkpoints
    FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")


# A LangGraph thread whose thread_id is this thread's ID (RecallSaver, docs/agents.md): how many checkpoints
# its top-level namespace holds and the newest one's ID (checkpoint IDs sort by time), so a router can hop
# from the thread into the run's state. One index range on the checkpoints' primary key; empty for most threads.


class _Checkpoints(msgspec.Struct):
    count: int
    latest: str | None


_checkpoints = msgspec.json.Decoder(_Checkpoints)

_FILED = ("trigger_filed", "report_filed")


class _HeadEvent(msgspec.Struct):
    seq: int
    type: str
    at: datetime
    summary: str
    ref: str | None
    gone_at: datetime | None


_head_events = msgspec.json.Decoder(list[_HeadEvent])


def _head_event(e: _HeadEvent, now: datetime) -> Event:
    """recall_event, from the head: an event whose target is gone by `now` is marked, its copied summary hidden."""
    if e.gone_at is not None and e.gone_at <= now:
        return Event(seq=e.seq, type=e.type, at=e.at, summary="" if e.type in _FILED else e.summary, ref=e.ref,
                     ref_deleted=True)
    return Event(seq=e.seq, type=e.type, at=e.at, summary=e.summary, ref=e.ref)


async def fetch_thread(conn: Conn, cred: Credential, thread_id: str, events: int,
                       from_log: bool = False) -> tuple[str, ThreadRow | None]:
    """The thread with its owners and newest `events` events: from its head when that holds them
    (unless `from_log`, which renders both from the tables, as the head-versus-log test compares)."""
    use_head = events <= HEAD_SIZE and not from_log
    tenant, row = await tenancy.fetch(conn, cred, *((_THREAD_HEAD, thread_id) if use_head
                                                    else (_THREAD_LOG, thread_id, events)))
    if row is None:
        return tenant, None
    if use_head:
        now = row["now"]
        owners = [head_owner(o, now) for o in head_owners_json.decode(row["owners"])]
        newest = [_head_event(e, now) for e in _head_events.decode(row["events"])[:events]]
    else:
        owners, newest = links_json.decode(row["owners"]), events_json.decode(row["events"])
    checkpoints = _checkpoints.decode(row["checkpoints"])
    return tenant, ThreadRow(
        id=row["id"], title=row["title"], summary=row["summary"], status=row["status"],
        last_seq=row["last_seq"], created_at=row["created_at"], updated_at=row["updated_at"],
        owners=owners, events=newest, checkpoints=checkpoints.count, latest_checkpoint=checkpoints.latest,
        namespace=row["namespace"], **labels_of(row),
    )


_THREADS_PAGE = """
    SELECT coalesce(json_agg(x ORDER BY x.created_at DESC, x.id DESC), '[]') AS threads FROM (
      SELECT t.id, t.title, t.status, t.summary, t.updated_at, t.created_at FROM {threads}
      WHERE t.tenant_id = auth.tenant AND t.deleted_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
        AND {owner} AND {status} AND {labels} AND {namespace}
        AND (t.created_at, t.id) < ($5, $6)
      ORDER BY t.created_at DESC, t.id DESC LIMIT $7) x
"""


@functools.cache
def _threads(owned: bool, status: bool, labels: tuple[bool, bool, bool], namespace: bool) -> str:
    """The statement listing threads with these filters given. The tenant's threads are read newest first
    along threads_by_created (threads_by_status, threads_by_app ... for a status or a label), from the
    cursor on. One worker's threads: its thread_owners rows, each thread by primary key, then sorted. With
    the owner as a filter on the walk along threads_by_created, a worker owning 20 threads of the bench
    store's 11,500 cost a scan of all of them (8 ms; tests/test_plans.py). A namespace is a range of
    threads_by_namespace, its threads sorted (a page of the namespace, not a walk of the tenant). The owner
    must be a worker the key sees: under grants, a worker outside them owns nothing, as one that never existed
    (its threads the key sees would tell it the worker exists; tests/test_grant_leaks.py)."""
    return keyed(_THREADS_PAGE.format(
        threads="thread_owners o JOIN threads t ON t.tenant_id = auth.tenant AND t.id = o.thread_id"
        if owned else "threads t",
        owner="o.tenant_id = auth.tenant AND o.worker_id = $4 AND EXISTS (SELECT 1 FROM workers w"
              " WHERE w.tenant_id = auth.tenant AND w.id = $4)" if owned else "$4::text IS NULL",
        status=equal("t.status", "$3", status), labels=label_filters("t", 8, labels),
        namespace=under("t.namespace", "$11") if namespace else "$11::text IS NULL"))


async def list_threads(
    conn: Conn, cred: Credential, status: str | None, owner: str | None, labels: Labels, namespace: str | None,
    after: tuple[datetime, str] | None, limit: int,
) -> tuple[str, list[tuple[ThreadIndexEntry, datetime]]]:
    """The key's tenant, and its live threads newest first, keyset on (created_at, id); each entry
    with its sort key."""
    tenant, row = await tenancy.fetch(
        conn, cred, _threads(owner is not None, status is not None, given(labels), namespace is not None), status,
        owner, *(after or NEWEST), limit, labels.app_id, labels.agent_id, labels.run_id, namespace,
    )
    assert row is not None  # an aggregate: always one row
    return tenant, [
        (ThreadIndexEntry(id=r.id, title=r.title, status=r.status, summary=r.summary, updated_at=r.updated_at,
                          href=f"/threads/{r.id}"), r.created_at)
        for r in _thread_keys.decode(row["threads"])
    ]


class _ThreadKey(msgspec.Struct):
    id: str
    title: str
    status: str
    summary: str
    updated_at: datetime
    created_at: datetime


_thread_keys = msgspec.json.Decoder(list[_ThreadKey])


async def insert_thread(conn: Conn, tenant: str, thread_id: str, title: str, summary: str,
                        status: str, labels: Labels, req_hash: bytes, expires_at: datetime | None) -> bool:
    return await conn.fetchval(
        """
        INSERT INTO threads (tenant_id, id, title, summary, status, app_id, agent_id, run_id, request_hash, expires_at,
                             namespace)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING RETURNING true
        """,
        tenant, thread_id, title, summary, status, labels.app_id, labels.agent_id, labels.run_id, req_hash,
        expires_at, labels.namespace,
    ) is not None


_UPDATE_THREAD = """
        WITH old AS (
          SELECT title, summary, status, expires_at FROM threads WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE),
        retention AS (SELECT closed_thread_retention AS keep FROM tenants WHERE id = $1),
        upd AS (
          UPDATE threads t SET title = coalesce($3, old.title), summary = coalesce($4, old.summary),
                 status = coalesce($5, old.status), updated_at = clock_timestamp(),
                 expires_at = CASE
                   WHEN coalesce($5, old.status) IN ('closed', 'merged') AND old.status NOT IN ('closed', 'merged')
                        AND (SELECT keep FROM retention) IS NOT NULL
                   THEN least(coalesce(old.expires_at, 'infinity'), clock_timestamp() + (SELECT keep FROM retention))
                   ELSE old.expires_at END
            FROM old
           WHERE t.tenant_id = $1 AND t.id = $2
             AND (old.title, old.summary, old.status)
                 IS DISTINCT FROM (coalesce($3, old.title), coalesce($4, old.summary), coalesce($5, old.status))
          RETURNING t.status)
        SELECT old.status, coalesce((SELECT status FROM upd), old.status) FROM old
        """


async def update_thread(conn: Conn, tenant: str, thread_id: str, title: str | None, summary: str | None,
                        status: str | None) -> tuple[str, str] | None:
    """Apply the given fields under the row lock, touching updated_at only on a real change.

    Closing or merging a thread starts the tenant's closed-thread retention, if it has one.
    Returns (old status, new status), or None when the thread does not exist.
    """
    if conn.sharded:
        return await _update_thread_steps(conn, tenant, thread_id, title, summary, status)
    row = await conn.fetchrow(_UPDATE_THREAD, tenant, thread_id, title, summary, status)
    return None if row is None else (row[0], row[1])


async def _update_thread_steps(conn: Conn, tenant: str, thread_id: str, title: str | None, summary: str | None,
                               status: str | None) -> tuple[str, str] | None:
    """_UPDATE_THREAD on a Citus coordinator, which plans no UPDATE with a non-IMMUTABLE function in a CASE: the
    given fields under the row lock, updated_at only on a real change, a close or merge starting the tenant's
    closed-thread retention."""
    old = await conn.fetchrow("SELECT title, summary, status, expires_at, clock_timestamp() AS at FROM threads"
                              " WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE", tenant, thread_id)
    if old is None:
        return None
    new = (old["title"] if title is None else title, old["summary"] if summary is None else summary,
           old["status"] if status is None else status)
    if new == (old["title"], old["summary"], old["status"]):
        return (old["status"], old["status"])
    expires_at = old["expires_at"]
    if new[2] in ("closed", "merged") and old["status"] not in ("closed", "merged"):
        capped = await conn.fetchrow(
            "SELECT least(coalesce($2::timestamptz, 'infinity'), $3::timestamptz + closed_thread_retention)"
            " FROM tenants WHERE id = $1 AND closed_thread_retention IS NOT NULL", tenant, expires_at, old["at"])
        if capped is not None:
            expires_at = capped[0]
    await conn.execute("UPDATE threads SET title = $3, summary = $4, status = $5, updated_at = $6, expires_at = $7"
                       " WHERE tenant_id = $1 AND id = $2", tenant, thread_id, *new, old["at"], expires_at)
    return (old["status"], new[2])


async def insert_owner(conn: Conn, tenant: str, thread_id: str, worker_id: str) -> bool:
    """Make the worker an owner (counted on the worker row); False when it already is one. The caller
    holds the thread's row lock and calls rebuild_head after."""
    return await conn.fetchval(
        """
        WITH new AS (INSERT INTO thread_owners (tenant_id, thread_id, worker_id) VALUES ($1, $2, $3)
                     ON CONFLICT DO NOTHING RETURNING worker_id)
        UPDATE workers w SET threads_total = threads_total + 1 FROM new
         WHERE w.tenant_id = $1 AND w.id = new.worker_id RETURNING true
        """,
        tenant, thread_id, worker_id,
    ) is not None


async def lock_thread(conn: Conn, tenant: str, thread_id: str) -> State:
    """Take the thread's row lock (it orders appends, filings, closes and deletes); the thread's state."""
    return State.of(await conn.fetchval(
        "SELECT recall_is_gone(deleted_at, expires_at) FROM threads WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE",
        tenant, thread_id,
    ))


async def ensure_thread(conn: Conn, tenant: str, thread_id: str, title: str, summary: str, status: str,
                        req_hash: bytes) -> tuple[bool, State]:
    """Make the thread if it is missing and take its row lock, in one statement: (made, its state).

    A thread this statement made is this transaction's until it commits (a concurrent maker waits on
    it), so it needs no lock. One another transaction committed while this statement waited on it is
    not in the statement's snapshot: it is locked by a second statement."""
    made, gone = await conn.fetchrow(
        """
        WITH made AS (
          INSERT INTO threads (tenant_id, id, title, summary, status, request_hash) VALUES ($1, $2, $3, $4, $5, $6)
          ON CONFLICT DO NOTHING RETURNING true)
        SELECT (SELECT true FROM made),
               (SELECT recall_is_gone(deleted_at, expires_at) FROM threads WHERE tenant_id = $1 AND id = $2
                FOR NO KEY UPDATE)
        """,
        tenant, thread_id, title, summary, status, req_hash,
    )
    if made:
        return True, State.LIVE
    return False, State.of(gone) if gone is not None else await lock_thread(conn, tenant, thread_id)


async def count_owners(conn: Conn, tenant: str, thread_id: str) -> int:
    return await conn.fetchval(
        "SELECT count(*) FROM thread_owners WHERE tenant_id = $1 AND thread_id = $2", tenant, thread_id
    )


async def rebuild_head(conn: Conn, tenant: str, thread_id: str) -> None:
    """Render the thread's head (newest events, owners) again from the tables (see recall_rebuild_head)."""
    await conn.execute("SELECT recall_rebuild_head($1, $2)", tenant, thread_id)


async def rebuild_owner_heads(conn: Conn, tenant: str, thread_id: str) -> None:
    """The heads of the workers that own the thread (its summary shows there)."""
    await conn.execute("SELECT recall_rebuild_owner_heads($1, $2)", tenant, thread_id)


async def cap_expiry(conn: Conn, tenant: str, thread_id: str) -> None:
    """After a thread's expiry changed: what was filed on it, and events pointing there, follow."""
    await conn.execute("SELECT recall_cap_expiry($1, $2)", tenant, thread_id)
