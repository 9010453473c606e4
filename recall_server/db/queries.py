"""Every SQL statement the server runs: one function each, connection first, $n parameters only.

The caller owns the transaction. Reads that serve a GET are single statements (one round
trip) behind the key check (db/tenancy.py): they name the tenant `auth.tenant`, take their own
parameters from $3, and return the key's tenant with what they found. Linked summaries and
recent events arrive as JSON arrays in the same row. Writes run in a session that tenancy
opened, for the `tenant` it bound.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import asyncpg
import msgspec

from recall_server import ids
from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.tenancy import keyed, keyed_write
from recall_server.ids import State
from recall_server.models import (
    Event,
    HookView,
    KeyView,
    Link,
    Read,
    ReportIndexEntry,
    Resolved,
    ThreadIndexEntry,
)
from recall_server.rows import (
    BacklinkRow,
    Content,
    Labels,
    MemoryRow,
    Outcome,
    ReportRow,
    SearchRow,
    Stored,
    ThreadRow,
    TriggerRow,
    WorkerRow,
)

Conn = asyncpg.Connection

_links = msgspec.json.Decoder(list[Link])
_events = msgspec.json.Decoder(list[Event])
_event = msgspec.json.Decoder(Event)


def _labels(row: asyncpg.Record) -> dict[str, object]:
    return {"app_id": row["app_id"], "agent_id": row["agent_id"], "run_id": row["run_id"],
            "expires_at": row["expires_at"], "gone": row["gone"]}


# ---- reads -----------------------------------------------------------------------------
# Each returns (the key's tenant, what it found or None). Gone (deleted or expired) objects come
# back flagged, never filtered silently: the service answers 410 for them. Links and events to gone
# objects render through recall_link/recall_event.

# The default view reads the thread's head (threads.head_events, head_owners: the newest events and the
# owners, kept on the row by the writes that change them), so it is a primary-key fetch of one row.
# Whether an event's target or an owner is gone depends on the clock, so the head keeps the times and
# the reader compares them with the statement's now(), as recall_event and recall_is_gone would.
_THREAD_HEAD = keyed("""
    SELECT t.id, t.title, t.summary, t.status, t.last_seq, t.created_at, t.updated_at, t.app_id, t.agent_id,
      t.run_id, t.expires_at, recall_is_gone(t.deleted_at, t.expires_at) AS gone,
      t.head_owners::text AS owners, t.head_events::text AS events, now() AS now
    FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")

# Bigger budgets show more events than the head holds: rendered from the log. The newest events by
# seq range (seq is gap-free), not `ORDER BY seq DESC LIMIT n`: with the LIMIT, PostgreSQL re-planned
# this statement on every execution (tests/test_plans.py).
_THREAD_LOG = keyed("""
    SELECT t.id, t.title, t.summary, t.status, t.last_seq, t.created_at, t.updated_at, t.app_id, t.agent_id,
      t.run_id, t.expires_at, recall_is_gone(t.deleted_at, t.expires_at) AS gone,
      (SELECT coalesce(json_agg(recall_link(w.id, w.summary, recall_is_gone(w.deleted_at, w.expires_at))
                                ORDER BY o.assigned_at, w.id), '[]')
         FROM thread_owners o JOIN workers w ON w.tenant_id = o.tenant_id AND w.id = o.worker_id
        WHERE o.tenant_id = t.tenant_id AND o.thread_id = t.id) AS owners,
      (SELECT coalesce(json_agg(recall_event(e) ORDER BY e.seq DESC), '[]') FROM thread_events e
        WHERE e.tenant_id = t.tenant_id AND e.thread_id = t.id AND e.seq > t.last_seq - $4) AS events
    FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")

HEAD_SIZE = 10  # recall_head_size() in schema.sql; spill.RECENT (tests/test_thread_head.py)
_FILED = ("trigger_filed", "report_filed")


class _HeadEvent(msgspec.Struct):
    seq: int
    type: str
    at: datetime
    summary: str
    ref: str | None
    gone_at: datetime | None


class _HeadOwner(msgspec.Struct):
    id: str
    summary: str
    deleted: bool
    expires_at: datetime | None


_head_events = msgspec.json.Decoder(list[_HeadEvent])
_head_owners = msgspec.json.Decoder(list[_HeadOwner])


def _head_event(e: _HeadEvent, now: datetime) -> Event:
    """recall_event, from the head: an event whose target is gone by `now` is marked, its copied summary hidden."""
    if e.gone_at is not None and e.gone_at <= now:
        return Event(seq=e.seq, type=e.type, at=e.at, summary="" if e.type in _FILED else e.summary, ref=e.ref,
                     ref_deleted=True)
    return Event(seq=e.seq, type=e.type, at=e.at, summary=e.summary, ref=e.ref)


def _head_owner(o: _HeadOwner, now: datetime) -> Link:
    """recall_link of an owner (or a worker's thread), from a head."""
    if o.deleted or (o.expires_at is not None and o.expires_at <= now):
        return Link(id=o.id, deleted=True)
    return Link(id=o.id, summary=o.summary)


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
        owners = [_head_owner(o, now) for o in _head_owners.decode(row["owners"])]
        newest = [_head_event(e, now) for e in _head_events.decode(row["events"])[:events]]
    else:
        owners, newest = _links.decode(row["owners"]), _events.decode(row["events"])
    return tenant, ThreadRow(
        id=row["id"], title=row["title"], summary=row["summary"], status=row["status"],
        last_seq=row["last_seq"], created_at=row["created_at"], updated_at=row["updated_at"],
        owners=owners, events=newest, **_labels(row),
    )


# The default view reads the worker's head (workers.head_threads, head_reports), like a thread's.
_WORKER_HEAD = keyed("""
    SELECT w.id, w.name, w.summary, w.created_at, w.app_id, w.agent_id, w.run_id, w.expires_at,
      recall_is_gone(w.deleted_at, w.expires_at) AS gone, w.threads_total, w.head_threads::text AS threads,
      w.reports_total, w.head_reports::text AS reports, now() AS now
    FROM workers w WHERE w.tenant_id = auth.tenant AND w.id = $3
""")

_WORKER_LOG = keyed("""
    SELECT w.id, w.name, w.summary, w.created_at, w.app_id, w.agent_id, w.run_id, w.expires_at,
      recall_is_gone(w.deleted_at, w.expires_at) AS gone,
      w.threads_total,
      (SELECT coalesce(json_agg(recall_link(x.id, x.summary, recall_is_gone(x.deleted_at, x.expires_at))), '[]') FROM (
         SELECT t.id, t.summary, t.deleted_at, t.expires_at FROM thread_owners o
           JOIN threads t ON t.tenant_id = o.tenant_id AND t.id = o.thread_id
          WHERE o.tenant_id = w.tenant_id AND o.worker_id = w.id
          ORDER BY o.assigned_at DESC, t.id DESC LIMIT $4) x) AS threads,
      w.reports_total,
      (SELECT coalesce(json_agg(CASE WHEN recall_is_gone(x.deleted_at, x.expires_at)
                                     THEN json_build_object('id', x.id, 'deleted', true)
                                     ELSE json_build_object('id', x.id, 'summary', x.summary, 'refs', x.refs) END),
                       '[]')
         FROM (
         SELECT r.id, r.summary, r.deleted_at, r.expires_at,
                ARRAY(SELECT rr.trigger_id FROM report_refs rr WHERE rr.tenant_id = r.tenant_id
                       AND rr.report_id = r.id ORDER BY rr.position) AS refs
           FROM reports r
          WHERE r.tenant_id = w.tenant_id AND r.worker_id = w.id
          ORDER BY r.created_at DESC, r.id DESC LIMIT $4) x) AS reports
    FROM workers w WHERE w.tenant_id = auth.tenant AND w.id = $3
""")




class _HeadReport(msgspec.Struct):
    id: str
    summary: str
    refs: list[str]
    deleted: bool
    expires_at: datetime | None


_head_reports = msgspec.json.Decoder(list[_HeadReport])


def _head_report(r: _HeadReport, now: datetime) -> Link:
    if r.deleted or (r.expires_at is not None and r.expires_at <= now):
        return Link(id=r.id, deleted=True)
    return Link(id=r.id, summary=r.summary, refs=r.refs)


async def fetch_worker(conn: Conn, cred: Credential, worker_id: str, recent: int,
                       from_log: bool = False) -> tuple[str, WorkerRow | None]:
    """The worker with its newest `recent` threads and reports: from its head when that holds them
    (unless `from_log`)."""
    use_head = recent <= HEAD_SIZE and not from_log
    tenant, row = await tenancy.fetch(conn, cred, *((_WORKER_HEAD, worker_id) if use_head
                                                    else (_WORKER_LOG, worker_id, recent)))
    if row is None:
        return tenant, None
    if use_head:
        now = row["now"]
        threads = [_head_owner(t, now) for t in _head_owners.decode(row["threads"])[:recent]]
        reports = [_head_report(r, now) for r in _head_reports.decode(row["reports"])[:recent]]
    else:
        threads, reports = _links.decode(row["threads"]), _links.decode(row["reports"])
    return tenant, WorkerRow(
        id=row["id"], name=row["name"], summary=row["summary"], created_at=row["created_at"],
        threads_total=row["threads_total"], threads=threads,
        reports_total=row["reports_total"], reports=reports, **_labels(row),
    )


_TRIGGER = keyed("""
    SELECT tr.id, tr.source, tr.thread_id, tr.summary, tr.content_type,
      octet_length(tr.payload) AS size,
      CASE WHEN octet_length(tr.payload) <= $4 THEN tr.payload
           ELSE substring(tr.payload FROM 1 FOR $5) END AS head,
      CASE WHEN octet_length(tr.payload) <= $4 THEN ''::bytea
           ELSE substring(tr.payload FROM octet_length(tr.payload) - $5 + 1) END AS tail,
      tr.occurred_at, tr.created_at, tr.app_id, tr.agent_id, tr.run_id, tr.expires_at,
      recall_is_gone(tr.deleted_at, tr.expires_at) AS gone,
      (SELECT coalesce(json_agg(recall_link(n.id, n.summary, recall_is_gone(n.deleted_at, n.expires_at))
                                ORDER BY nb.position), '[]')
         FROM trigger_neighbours nb JOIN triggers n ON n.tenant_id = nb.tenant_id AND n.id = nb.neighbour_id
        WHERE nb.tenant_id = tr.tenant_id AND nb.trigger_id = tr.id) AS neighbours
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
        neighbours=_links.decode(row["neighbours"]), **_labels(row),
    )


_REPORT = keyed("""
    SELECT r.id, r.worker_id, r.thread_id, r.summary, r.content_type, octet_length(r.body) AS size,
      CASE WHEN octet_length(r.body) <= $4 THEN r.body ELSE substring(r.body FROM 1 FOR $5) END AS head,
      CASE WHEN octet_length(r.body) <= $4 THEN ''::bytea
           ELSE substring(r.body FROM octet_length(r.body) - $5 + 1) END AS tail,
      r.created_at, r.app_id, r.agent_id, r.run_id, r.expires_at, recall_is_gone(r.deleted_at, r.expires_at) AS gone,
      (SELECT coalesce(json_agg(recall_link(t.id, t.summary, recall_is_gone(t.deleted_at, t.expires_at))
                                ORDER BY rr.position), '[]')
         FROM report_refs rr JOIN triggers t ON t.tenant_id = rr.tenant_id AND t.id = rr.trigger_id
        WHERE rr.tenant_id = r.tenant_id AND rr.report_id = r.id) AS refs
    FROM reports r WHERE r.tenant_id = auth.tenant AND r.id = $3
""")


async def fetch_report(conn: Conn, cred: Credential, report_id: str, inline_max: int,
                       preview: int) -> tuple[str, ReportRow | None]:
    tenant, row = await tenancy.fetch(conn, cred, _REPORT, report_id, inline_max, preview)
    if row is None:
        return tenant, None
    return tenant, ReportRow(
        id=row["id"], worker_id=row["worker_id"], thread_id=row["thread_id"], summary=row["summary"],
        content_type=row["content_type"], size=row["size"], head=row["head"], tail=row["tail"],
        created_at=row["created_at"], refs=_links.decode(row["refs"]), **_labels(row),
    )


_CONTENT = {  # kind -> the read of its content: the payload of a trigger, the body of a report
    "trigger": keyed("""
        SELECT content_type, CASE WHEN payload_sha256 = $4 THEN NULL ELSE payload END AS data, payload_sha256,
               recall_is_gone(deleted_at, expires_at) AS gone
        FROM triggers WHERE tenant_id = auth.tenant AND id = $3
    """),
    "report": keyed("""
        SELECT content_type, CASE WHEN body_sha256 = $4 THEN NULL ELSE body END AS data, body_sha256,
               recall_is_gone(deleted_at, expires_at) AS gone
        FROM reports WHERE tenant_id = auth.tenant AND id = $3
    """),
    "memory": keyed("""
        SELECT content_type, CASE WHEN value_sha256 = $4 THEN NULL ELSE value END AS data, value_sha256,
               recall_is_gone(deleted_at, expires_at) AS gone
        FROM memories WHERE tenant_id = auth.tenant AND id = $3
    """),
}


async def fetch_content(conn: Conn, cred: Credential, kind: str, object_id: str,
                        known_sha256: bytes | None) -> tuple[str, Content | None]:
    """A trigger's payload or a report's body; `data` is None when its SHA-256 is `known_sha256`."""
    tenant, row = await tenancy.fetch(conn, cred, _CONTENT[kind], object_id, known_sha256)
    return tenant, None if row is None else Content(*row[2:])


# Where a keyset starts when no cursor is given, as values rather than as coalesce($n, ...) in the statement:
# under row-level security PostgreSQL uses only leakproof clauses as index conditions, and coalesce() is
# not one, so the bound became a filter on a walk from the first row (asyncpg sends datetime.max as
# 'infinity' and datetime.min as '-infinity').
_NEWEST = (datetime.max.replace(tzinfo=timezone.utc), "")  # (created_at, id) < this for every row
_OLDEST_READ = (datetime.min.replace(tzinfo=timezone.utc), 0)  # (pos, tick) > this for every read


def _equal(column: str, param: str, given: bool) -> str:
    """`column = param` when the filter is given, else a clause that only types the parameter. In a generic
    plan, `(param IS NULL OR column = param)` can use no index on `column`, and its guessed selectivity
    makes every list look short (a worker's reports were all read to be sorted): the lists build one
    statement for each set of filters given, and PostgreSQL caches a plan for each."""
    return f"{column} = {param}" if given else f"{param}::text IS NULL"


def _given(labels: Labels) -> tuple[bool, bool, bool]:
    return labels.app_id is not None, labels.agent_id is not None, labels.run_id is not None


def _label_filters(alias: str, first: int, given: tuple[bool, bool, bool]) -> str:
    """The filters on the labels given, app_id, agent_id and run_id from parameter $`first` on."""
    return " AND ".join(_equal(f"{alias}.{name}", f"${first + n}", on)
                        for n, (name, on) in enumerate(zip(("app_id", "agent_id", "run_id"), given, strict=True)))


_THREADS_PAGE = """
    SELECT coalesce(json_agg(x ORDER BY x.created_at DESC, x.id DESC), '[]') AS threads FROM (
      SELECT t.id, t.title, t.status, t.summary, t.updated_at, t.created_at FROM {threads}
      WHERE t.tenant_id = auth.tenant AND t.deleted_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())
        AND {owner} AND {status} AND {labels}
        AND (t.created_at, t.id) < ($5, $6)
      ORDER BY t.created_at DESC, t.id DESC LIMIT $7) x
"""


@functools.cache
def _threads(owned: bool, status: bool, labels: tuple[bool, bool, bool]) -> str:
    """The statement listing threads with these filters given. The tenant's threads are read newest first
    along threads_by_created (threads_by_status, threads_by_app ... for a status or a label), from the
    cursor on. One worker's threads: its thread_owners rows, each thread by primary key, then sorted. With
    the owner as a filter on the walk along threads_by_created, a worker owning 20 threads of the bench
    store's 11,500 cost a scan of all of them (8 ms; tests/test_plans.py)."""
    return keyed(_THREADS_PAGE.format(
        threads="thread_owners o JOIN threads t ON t.tenant_id = o.tenant_id AND t.id = o.thread_id"
        if owned else "threads t",
        owner="o.tenant_id = auth.tenant AND o.worker_id = $4" if owned else "$4::text IS NULL",
        status=_equal("t.status", "$3", status), labels=_label_filters("t", 8, labels)))


async def list_threads(
    conn: Conn, cred: Credential, status: str | None, owner: str | None, labels: Labels,
    after: tuple[datetime, str] | None, limit: int,
) -> tuple[str, list[tuple[ThreadIndexEntry, datetime]]]:
    """The key's tenant, and its live threads newest first, keyset on (created_at, id); each entry
    with its sort key."""
    tenant, row = await tenancy.fetch(
        conn, cred, _threads(owner is not None, status is not None, _given(labels)), status, owner,
        *(after or _NEWEST), limit, labels.app_id, labels.agent_id, labels.run_id,
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

# A seq range (seq is gap-free, so it holds exactly those events), bounded by the thread's last_seq
# rather than `ORDER BY seq LIMIT n`: with the LIMIT, PostgreSQL re-planned small pages on every
# execution (tests/test_plans.py).
_EVENTS = keyed("""
    SELECT recall_is_gone(t.deleted_at, t.expires_at) AS gone,
           (SELECT coalesce(json_agg(recall_event(e) ORDER BY e.seq), '[]') FROM thread_events e
             WHERE e.tenant_id = t.tenant_id AND e.thread_id = t.id
               AND e.seq > $4 AND e.seq <= least(t.last_seq, $4 + $5)) AS events
    FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")


async def list_events(
    conn: Conn, cred: Credential, thread_id: str, after_seq: int, limit: int,
) -> tuple[str, State, list[Event]]:
    """The key's tenant, the thread's state, and the `limit` events after a seq, in order."""
    tenant, row = await tenancy.fetch(conn, cred, _EVENTS, thread_id, after_seq, limit)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _events.decode(row["events"])


_REPORTS = """
    SELECT recall_is_gone(w.deleted_at, w.expires_at) AS gone,
           (SELECT coalesce(json_agg(x ORDER BY x.created_at DESC, x.id DESC), '[]') FROM (
              SELECT r.id, r.thread_id, r.summary, r.created_at FROM reports r
               WHERE r.tenant_id = w.tenant_id AND r.worker_id = w.id AND NOT recall_is_gone(r.deleted_at, r.expires_at)
                 AND (r.created_at, r.id) < ($4, $5)
                 AND {labels}
               ORDER BY r.created_at DESC, r.id DESC LIMIT $6) x) AS reports
    FROM workers w WHERE w.tenant_id = auth.tenant AND w.id = $3
"""


@functools.cache
def _reports(labels: tuple[bool, bool, bool]) -> str:
    """The statement listing a worker's reports with these labels given, along reports_by_worker from the
    cursor on. (With `($7 IS NULL OR r.app_id = $7)` in a generic plan, the planner took the worker's
    reports for a short list: it read all of them to sort.)"""
    return keyed(_REPORTS.format(labels=_label_filters("r", 7, labels)))


async def list_reports(
    conn: Conn, cred: Credential, worker_id: str, labels: Labels, after: tuple[datetime, str] | None, limit: int,
) -> tuple[str, State, list[tuple[ReportIndexEntry, datetime]]]:
    """The key's tenant, the worker's state, and its live reports newest first (keyset on (created_at, id))."""
    tenant, row = await tenancy.fetch(
        conn, cred, _reports(_given(labels)), worker_id, *(after or _NEWEST), limit,
        labels.app_id, labels.agent_id, labels.run_id,
    )
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), [
        (ReportIndexEntry(id=r.id, thread_id=r.thread_id, summary=r.summary, created_at=r.created_at,
                          href=f"/reports/{r.id}"), r.created_at)
        for r in _report_keys.decode(row["reports"])
    ]


class _ReportKey(msgspec.Struct):
    id: str
    thread_id: str
    summary: str
    created_at: datetime


_report_keys = msgspec.json.Decoder(list[_ReportKey])

_RESOLVE = {  # kind -> the read of its summary, from its table (the plural), e.g. "trigger" -> triggers
    kind: keyed(f"""
        SELECT summary, recall_is_gone(deleted_at, expires_at) AS gone FROM {table}
        WHERE tenant_id = auth.tenant AND id = $3
    """)
    for kind, table in ids.PLURAL.items()
}


async def resolve(conn: Conn, cred: Credential, kind: str, object_id: str) -> tuple[State, Resolved | None]:
    """The ID's state in the key's tenant, and what it resolves to."""
    _, row = await tenancy.fetch(conn, cred, _RESOLVE[kind], object_id)
    if row is None:
        return State.MISSING, None
    return State.of(row["gone"]), Resolved(id=object_id, type=kind, href=ids.href(object_id), summary=row["summary"])


async def states(conn: Conn, tenant: str, object_ids: list[str]) -> dict[str, State]:
    """The state of each of these IDs (of any kind) in the tenant; an ID that never existed is MISSING."""
    rows = await conn.fetch(
        """
        SELECT id, recall_is_gone(deleted_at, expires_at) FROM (
            SELECT id, deleted_at, expires_at FROM triggers WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM threads WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM workers WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM reports WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM memories WHERE tenant_id = $1 AND id = ANY($2::text[])) x
        """,
        tenant, object_ids,
    )
    found = {r[0]: State.of(r[1]) for r in rows}
    return {i: found.get(i, State.MISSING) for i in object_ids}


async def state(conn: Conn, tenant: str, object_id: str) -> State:
    return (await states(conn, tenant, [object_id]))[object_id]


# ---- tenants and keys (operator CLI as the owner; admin endpoints as recall_app, within a tenant) ----


async def create_tenant(conn: Conn, tenant: str) -> bool:
    return await conn.fetchval(
        "INSERT INTO tenants (id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true", tenant
    ) is not None


async def tenant_exists(conn: Conn, tenant: str) -> bool:
    return await conn.fetchval("SELECT true FROM tenants WHERE id = $1", tenant) is not None


async def insert_key(conn: Conn, key_id: str, tenant: str, scope: str, secret_sha256: bytes, label: str) -> KeyView:
    row = await conn.fetchrow(
        """
        INSERT INTO api_keys (id, tenant_id, scope, secret_sha256, label) VALUES ($1, $2, $3, $4, $5)
        RETURNING id, tenant_id, scope, label, created_at, revoked_at
        """,
        key_id, tenant, scope, secret_sha256, label,
    )
    return KeyView(*row)


async def list_keys(conn: Conn, tenant: str | None) -> list[KeyView]:
    rows = await conn.fetch(
        """
        SELECT id, tenant_id, scope, label, created_at, revoked_at FROM api_keys
        WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY tenant_id, created_at, id
        """,
        tenant,
    )
    return [KeyView(*r) for r in rows]


_OWN_KEY = keyed("""
    SELECT id, tenant_id, scope, label, created_at, revoked_at FROM api_keys WHERE tenant_id = auth.tenant AND id = $3
""")


async def own_key(conn: Conn, cred: Credential) -> KeyView:
    """The key a request carries, in one statement with its own check (401 if it is not valid)."""
    _, row = await tenancy.fetch(conn, cred, _OWN_KEY, cred.key_id)
    assert row is not None  # the key check just found it
    return KeyView(*row[2:])


async def revoke_key(conn: Conn, key_id: str, tenant: str | None) -> KeyView | None:
    """Revoke (idempotently); None when no such key (in that tenant, when one is given)."""
    row = await conn.fetchrow(
        """
        UPDATE api_keys SET revoked_at = coalesce(revoked_at, clock_timestamp())
        WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)
        RETURNING id, tenant_id, scope, label, created_at, revoked_at
        """,
        key_id, tenant,
    )
    return None if row is None else KeyView(*row)


async def cursor_secret(conn: Conn) -> bytes:
    return await conn.fetchval("SELECT value FROM server_secrets WHERE name = 'cursor'")


async def ping(conn: Conn) -> None:
    await conn.fetchval("SELECT 1")


# ---- writes ----------------------------------------------------------------------------

_REQUEST_HASH = {
    kind: f"SELECT request_hash, recall_is_gone(deleted_at, expires_at) FROM {table} WHERE tenant_id = $1 AND id = $2"
    for kind, table in ids.PLURAL.items()
}


async def request_hash(conn: Conn, tenant: str, kind: str, object_id: str) -> tuple[State, bytes | None]:
    """The ID's state, and the hash of the create request that made it: tells a retry from a clash."""
    row = await conn.fetchrow(_REQUEST_HASH[kind], tenant, object_id)
    return (State.MISSING, None) if row is None else (State.of(row[1]), row[0])


async def trigger_by_external_id(conn: Conn, tenant: str, source: str, external_id: str) -> str | None:
    return await conn.fetchval(
        "SELECT id FROM triggers WHERE tenant_id = $1 AND source = $2 AND external_id = $3",
        tenant, source, external_id,
    )


async def insert_thread(conn: Conn, tenant: str, thread_id: str, title: str, summary: str,
                        status: str, labels: Labels, req_hash: bytes, expires_at: datetime | None) -> bool:
    return await conn.fetchval(
        """
        INSERT INTO threads (tenant_id, id, title, summary, status, app_id, agent_id, run_id, request_hash, expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING RETURNING true
        """,
        tenant, thread_id, title, summary, status, labels.app_id, labels.agent_id, labels.run_id, req_hash,
        expires_at,
    ) is not None


async def update_thread(conn: Conn, tenant: str, thread_id: str, title: str | None, summary: str | None,
                        status: str | None) -> tuple[str, str] | None:
    """Apply the given fields under the row lock, touching updated_at only on a real change.

    Closing or merging a thread starts the tenant's closed-thread retention, if it has one.
    Returns (old status, new status), or None when the thread does not exist.
    """
    row = await conn.fetchrow(
        """
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
        """,
        tenant, thread_id, title, summary, status,
    )
    return None if row is None else (row[0], row[1])


async def insert_worker(conn: Conn, tenant: str, worker_id: str, name: str, summary: str, labels: Labels,
                        req_hash: bytes, expires_at: datetime | None) -> bool:
    return await conn.fetchval(
        """
        INSERT INTO workers (tenant_id, id, name, summary, app_id, agent_id, run_id, request_hash, expires_at)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING RETURNING true
        """,
        tenant, worker_id, name, summary, labels.app_id, labels.agent_id, labels.run_id, req_hash, expires_at,
    ) is not None


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


async def insert_neighbours(conn: Conn, tenant: str, trigger_id: str, neighbours: list[str]) -> None:
    await conn.execute(
        """
        INSERT INTO trigger_neighbours (tenant_id, trigger_id, position, neighbour_id)
        SELECT $1, $2, n.position, n.id FROM unnest($3::text[]) WITH ORDINALITY AS n(id, position)
        """,
        tenant, trigger_id, neighbours,
    )


async def insert_report(conn: Conn, tenant: str, report_id: str, worker_id: str, thread_id: str, summary: str,
                        content_type: str, body: bytes, sha: bytes, labels: Labels, req_hash: bytes,
                        expires_at: datetime | None) -> bool:
    """Insert (counted on the worker row); False when the ID exists."""
    return await conn.fetchval(
        """
        WITH new AS (
          INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body,
                               body_sha256, request_hash, app_id, agent_id, run_id, expires_at)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                  least($13, (SELECT expires_at FROM threads WHERE tenant_id = $1 AND id = $4)))
          ON CONFLICT DO NOTHING RETURNING worker_id)
        UPDATE workers w SET reports_total = reports_total + 1 FROM new
         WHERE w.tenant_id = $1 AND w.id = new.worker_id RETURNING true
        """,
        tenant, report_id, worker_id, thread_id, summary, content_type, body, sha, req_hash,
        labels.app_id, labels.agent_id, labels.run_id, expires_at,
    ) is not None


async def insert_refs(conn: Conn, tenant: str, report_id: str, refs: list[str]) -> None:
    await conn.execute(
        """
        INSERT INTO report_refs (tenant_id, report_id, position, trigger_id)
        SELECT $1, $2, r.position, r.id FROM unnest($3::text[]) WITH ORDINALITY AS r(id, position)
        """,
        tenant, report_id, refs,
    )


# A thread's head gains the new event and drops the oldest beyond recall_head_size(): the statements
# that append take it from here, under the row lock their UPDATE holds.
_HEAD_PREPEND = """recall_head_with(jsonb_build_array(recall_head_event(t.last_seq + 1, {type}, v.at, {summary}, {ref},
                                                                 {gone_at})), t.head_events)"""


_TRIGGER_COLUMNS = """tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256, request_hash,
                      occurred_at, app_id, agent_id, run_id, external_id, expires_at"""

_APPEND = f"""
    WITH v AS (SELECT clock_timestamp() AS at, CASE WHEN $5::text IS NOT NULL THEN recall_expiry($1, $5) END AS gone_at),
    s AS (
      UPDATE threads t SET last_seq = t.last_seq + 1, updated_at = v.at,
             head_events = {_HEAD_PREPEND.format(type="$3", summary="$4", ref="$5", gone_at="v.gone_at")}
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
    row = await conn.fetchrow(_APPEND, tenant, thread_id, type_, summary, ref)
    return None if row is None else Event(seq=row[0], type=row[1], at=row[2], summary=row[3], ref=row[4])


# The trigger, and on its thread the trigger_filed event (gone when the trigger is: its expiry, capped
# by the thread's), or nothing at all when the ID or the (source, external_id) delivery is taken.
_FILE_TRIGGER = f"""
    WITH v AS (SELECT clock_timestamp() AS at),
    trg AS (
      INSERT INTO triggers ({_TRIGGER_COLUMNS})
      VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, clock_timestamp()), $11, $12, $13, $14,
              least($15, (SELECT expires_at FROM threads WHERE tenant_id = $1 AND id = $4)))
      ON CONFLICT DO NOTHING RETURNING expires_at),
    th AS (
      UPDATE threads t SET last_seq = t.last_seq + 1, updated_at = v.at,
             head_events = {_HEAD_PREPEND.format(type="'trigger_filed'", summary="$5::text", ref="$2::text",
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
    return await conn.fetchval(
        _FILE_TRIGGER, tenant, trigger_id, source, thread_id, summary, content_type, payload, sha, req_hash,
        occurred_at, labels.app_id, labels.agent_id, labels.run_id, external_id, expires_at,
    ) is not None


# ---- writes in one statement (tenancy.keyed_write) --------------------------------------
# The hot writes, each one round trip: key check, scope gate, the write and what the response needs.
# They write nothing (and return None) when the request is not the plain case (a missing or gone
# thread, a dead ref) or raise a unique violation, which undoes the whole statement, when an ID is
# taken; the service then runs the same request through its transaction, which answers it exactly.

# Plain thread-less triggers of one key, filed together (coalesce.py): one statement, one commit.
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
""", "write")


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


def _arrays(rows: Iterable[msgspec.Struct]) -> list[list[Any]]:
    """Structs of one type as one array per field, in field order: what a batch statement's unnest takes."""
    return [list(column) for column in zip(*(msgspec.structs.astuple(r) for r in rows), strict=True)]


# Plain triggers of one key filed on threads, together (coalesce.py; recall_file_on_threads): one statement.
_FILE_ON_THREADS = keyed_write("""
    done AS (SELECT f.trigger_n AS n, f.trigger_occurred_at AS occurred_at, f.trigger_created_at AS created_at,
                    f.trigger_expires_at AS expires_at
               FROM gate, recall_file_on_threads(gate.tenant, $3::text[], $4::text[], $5::text[], $6::text[],
                                                 $7::text[], $8::bytea[], $9::bytea[], $10::bytea[],
                                                 $11::timestamptz[], $12::text[], $13::text[], $14::text[],
                                                 $15::text[], $16::timestamptz[]) f)
""", "write")


async def file_on_threads(conn: Conn, cred: Credential, filings: list[tuple[str, NewTrigger]]
                          ) -> list[tuple[datetime, datetime, datetime | None] | None]:
    """File (thread ID, trigger) pairs in one statement, each with its trigger_filed event: each one's
    (occurred_at, created_at, expires_at), None for one whose thread is missing or gone; all None when an ID
    or a delivery is taken or the statement lost a deadlock (it is undone; each is then filed on its own)."""
    try:
        _, rows = await tenancy.write_many(conn, cred, "write", _FILE_ON_THREADS, [t for t, _ in filings],
                                           *_arrays(t for _, t in filings))
    except (asyncpg.UniqueViolationError, asyncpg.DeadlockDetectedError):
        return [None] * len(filings)
    written = {row["n"]: (row["occurred_at"], row["created_at"], row["expires_at"]) for row in rows}
    return [written.get(i) for i in range(1, len(filings) + 1)]


async def ingest_many(conn: Conn, cred: Credential, triggers: list[NewTrigger]
                      ) -> list[tuple[datetime, datetime, datetime | None] | None]:
    """File thread-less triggers in one statement: each one's (occurred_at, created_at, expires_at); all None
    when an ID or a delivery is taken (the statement is undone; each is then filed on its own)."""
    try:
        _, rows = await tenancy.write_many(conn, cred, "write", _INGEST_MANY, *_arrays(triggers))
    except asyncpg.UniqueViolationError:  # the statement is undone: nothing was written
        return [None] * len(triggers)
    written = {row["id"]: (row["occurred_at"], row["created_at"], row["expires_at"]) for row in rows}
    return [written[t.id] for t in triggers]


# Plain notes of one key, appended together (coalesce.py; recall_append_notes): one statement, one commit.
_NOTE_MANY = keyed_write("""
    done AS (SELECT f.note_n AS n, f.note_seq AS seq, f.note_at AS at
               FROM gate, recall_append_notes(gate.tenant, $3::text[], $4::text[], $5::text[]) f)
""", "write")


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
        _, rows = await tenancy.write_many(conn, cred, "write", _NOTE_MANY, *_arrays(notes))
    except asyncpg.DeadlockDetectedError:
        return [None] * len(notes)
    written = {row["n"]: row for row in rows}
    return [None if (row := written.get(i)) is None else
            Event(seq=row["seq"], type="note", at=row["at"], summary=note.summary, ref=note.ref)
            for i, note in enumerate(notes, 1)]


# ---- lifecycle -------------------------------------------------------------------------


async def rebuild_head(conn: Conn, tenant: str, thread_id: str) -> None:
    """Render the thread's head (newest events, owners) again from the tables (see recall_rebuild_head)."""
    await conn.execute("SELECT recall_rebuild_head($1, $2)", tenant, thread_id)


async def rebuild_worker_head(conn: Conn, tenant: str, worker_id: str) -> None:
    """Render the worker's head (newest threads, reports) again (see recall_rebuild_worker_head)."""
    await conn.execute("SELECT recall_rebuild_worker_head($1, $2)", tenant, worker_id)


async def rebuild_owner_heads(conn: Conn, tenant: str, thread_id: str) -> None:
    """The heads of the workers that own the thread (its summary shows there)."""
    await conn.execute("SELECT recall_rebuild_owner_heads($1, $2)", tenant, thread_id)


async def cap_expiry(conn: Conn, tenant: str, thread_id: str) -> None:
    """After a thread's expiry changed: what was filed on it, and events pointing there, follow."""
    await conn.execute("SELECT recall_cap_expiry($1, $2)", tenant, thread_id)


async def erase(conn: Conn, tenant: str, object_id: str) -> None:
    """Delete: content wiped, copies scrubbed, the ID kept as a tombstone (see recall_erase)."""
    await conn.execute("SELECT recall_erase($1, $2)", tenant, object_id)


async def sweep(conn: Conn, batch: int) -> int:
    """Purge up to `batch` expired objects, in every tenant; returns how many."""
    return await conn.fetchval("SELECT recall_sweep($1)", batch)


async def idempotency_lock(conn: Conn, tenant: str, key: str) -> bool:
    """Hold the key for this transaction; False when another request holds it (still in flight)."""
    return await conn.fetchval(
        "SELECT pg_try_advisory_xact_lock(hashtextextended($1 || '/' || $2, 7))", tenant, key
    )


async def idempotency_get(conn: Conn, tenant: str, key: str) -> Stored | None:
    row = await conn.fetchrow(
        """
        SELECT request_hash, status, body, location, object_id, event_seq FROM idempotency_keys
        WHERE tenant_id = $1 AND key = $2 AND expires_at > now()
        """,
        tenant, key,
    )
    if row is None:
        return None
    return Stored(row[0], Outcome(status=row[1], body=row[2], location=row[3], object_id=row[4], event_seq=row[5]))


async def idempotency_put(conn: Conn, tenant: str, key: str, stored: Stored, keep_seconds: int) -> None:
    done = stored.outcome
    await conn.execute(
        """
        INSERT INTO idempotency_keys (tenant_id, key, request_hash, status, body, location, object_id, event_seq,
                                      expires_at, shows)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, clock_timestamp() + make_interval(secs => $9), $10)
        ON CONFLICT (tenant_id, key) DO UPDATE SET
            request_hash = excluded.request_hash, status = excluded.status, body = excluded.body,
            location = excluded.location, object_id = excluded.object_id, event_seq = excluded.event_seq,
            created_at = excluded.created_at, expires_at = excluded.expires_at, shows = excluded.shows
        """,
        tenant, key, stored.fingerprint, done.status, done.body, done.location, done.object_id, done.event_seq,
        keep_seconds, ids.shown_in(done.body or b""),
    )


async def event_at(conn: Conn, tenant: str, thread_id: str, seq: int) -> Event | None:
    row = await conn.fetchval(
        "SELECT recall_event(e) FROM thread_events e WHERE tenant_id = $1 AND thread_id = $2 AND seq = $3",
        tenant, thread_id, seq,
    )
    return None if row is None else _event.decode(row)


async def set_retention(conn: Conn, tenant: str, days: float | None) -> bool:
    return await conn.fetchval(
        """
        UPDATE tenants SET closed_thread_retention = CASE WHEN $2::float8 IS NULL THEN NULL
                                                         ELSE make_interval(secs => $2 * 86400) END
        WHERE id = $1 RETURNING true
        """,
        tenant, days,
    ) is not None


async def erasure_findings(conn: Conn, tenant: str, object_id: str) -> list[str]:
    """Every place where content of this ID could still be read; empty when it is fully erased."""
    rows = await conn.fetch(
        """
        SELECT place FROM (
          SELECT 'triggers: the trigger row still has content' AS place FROM triggers
           WHERE tenant_id = $1 AND id = $2 AND (summary <> '' OR octet_length(payload) > 0 OR external_id IS NOT NULL)
          UNION ALL SELECT 'reports: the report row still has content' FROM reports
           WHERE tenant_id = $1 AND id = $2 AND (summary <> '' OR octet_length(body) > 0)
          UNION ALL SELECT 'workers: the worker row still has content' FROM workers
           WHERE tenant_id = $1 AND id = $2 AND (name <> '' OR summary <> '')
          UNION ALL SELECT 'threads: the thread row still has content' FROM threads
           WHERE tenant_id = $1 AND id = $2 AND (title <> '' OR summary <> '')
          UNION ALL SELECT 'thread_events: summary copied into ' || thread_id || ' seq ' || seq FROM thread_events
           WHERE tenant_id = $1 AND ref = $2 AND type IN ('trigger_filed', 'report_filed') AND summary <> ''
          UNION ALL SELECT 'thread_events: the thread''s own event seq ' || seq FROM thread_events
           WHERE tenant_id = $1 AND thread_id = $2
          UNION ALL SELECT 'threads: the head of ' || id || ' still copies a summary of it' FROM threads
           WHERE tenant_id = $1 AND (
             jsonb_path_exists(head_events, '$[*] ? (@.ref == $id && @.summary != "" &&
                                                     (@.type == "trigger_filed" || @.type == "report_filed"))',
                               jsonb_build_object('id', $2))
             OR jsonb_path_exists(head_owners, '$[*] ? (@.id == $id && @.summary != "")', jsonb_build_object('id', $2)))
          UNION ALL SELECT 'threads: the erased thread''s head still shows its log' FROM threads
           WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NOT NULL AND (head_events <> '[]' OR head_owners <> '[]')
          UNION ALL SELECT 'triggers: ' || id || ' filed on the thread still has content' FROM triggers
           WHERE tenant_id = $1 AND thread_id = $2 AND (summary <> '' OR octet_length(payload) > 0)
          UNION ALL SELECT 'reports: ' || id || ' about the thread still has content' FROM reports
           WHERE tenant_id = $1 AND thread_id = $2 AND (summary <> '' OR octet_length(body) > 0)
          UNION ALL SELECT 'idempotency_keys: stored response of key ' || key || ' shows it' FROM idempotency_keys
           WHERE tenant_id = $1 AND body IS NOT NULL AND shows @> ARRAY[$2]
          UNION ALL SELECT 'memories: gone version ' || v.id || ' of the pair still has content' FROM memories v
           WHERE v.tenant_id = $1 AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND recall_is_gone(v.deleted_at, v.expires_at)
             AND (v.namespace <> '' OR v.key <> '' OR v.summary <> '' OR octet_length(v.value) > 0 OR v.tags <> '{}'
                  OR v.app_id IS NOT NULL OR v.agent_id IS NOT NULL OR v.run_id IS NOT NULL)
          UNION ALL SELECT 'memory_sources: gone version ' || s.memory_id || ' still lists its sources'
            FROM memory_sources s JOIN memories v ON v.tenant_id = s.tenant_id AND v.id = s.memory_id
           WHERE s.tenant_id = $1 AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND recall_is_gone(v.deleted_at, v.expires_at)
          UNION ALL SELECT 'idempotency_keys: stored response of key ' || k.key || ' shows gone version ' || v.id
            FROM memories v JOIN idempotency_keys k ON k.tenant_id = v.tenant_id AND k.body IS NOT NULL
                                                    AND k.shows @> ARRAY[v.id]
           WHERE v.tenant_id = $1 AND v.id <> $2
             AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND recall_is_gone(v.deleted_at, v.expires_at)
        ) found ORDER BY place
        """,
        tenant, object_id,
    )
    return [r[0] for r in rows]


# ---- memories ----------------------------------------------------------------------------
# A memory's namespace is stored as its segments joined by '/' (COLLATE "C"), so a namespace
# prefix p is the index range [p || '/', p || '0') plus p itself ('0' follows '/').

_link = msgspec.json.Decoder(Link | None)
_tags = msgspec.json.Decoder(dict[str, str])

_MEMORY_COLUMNS = """
    m.id, m.namespace, m.key, m.kind, m.summary, m.content_type, octet_length(m.value) AS size,
    CASE WHEN octet_length(m.value) <= $4 THEN m.value ELSE substring(m.value FROM 1 FOR $5) END AS head,
    CASE WHEN octet_length(m.value) <= $4 THEN ''::bytea
         ELSE substring(m.value FROM octet_length(m.value) - $5 + 1) END AS tail,
    m.tags::text AS tags, m.confirmed, m.current, m.version, m.created_at, m.app_id, m.agent_id, m.run_id,
    m.expires_at, recall_is_gone(m.deleted_at, m.expires_at) AS gone,
    CASE WHEN m.version > 1 THEN (SELECT c.created_at FROM memories c
                                   WHERE c.tenant_id = m.tenant_id AND c.id = m.chain) END AS chain_created_at,
    CASE WHEN m.supersedes IS NOT NULL THEN recall_link_of(m.tenant_id, m.supersedes) END AS supersedes,
    CASE WHEN m.superseded_by IS NOT NULL THEN recall_link_of(m.tenant_id, m.superseded_by) END AS superseded_by,
    (SELECT coalesce(json_agg(recall_link_of(s.tenant_id, s.source_id) ORDER BY s.position), '[]')
       FROM memory_sources s WHERE s.tenant_id = m.tenant_id AND s.memory_id = m.id) AS sources
"""
_MEMORY = keyed(f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE m.tenant_id = auth.tenant AND m.id = $3")
_MEMORY_CURRENT = keyed(f"""
    SELECT {_MEMORY_COLUMNS} FROM memories m
    WHERE m.tenant_id = auth.tenant AND m.namespace = $3 AND m.key = $6 AND m.current
""")


def _memory_row(row: asyncpg.Record) -> MemoryRow:
    return MemoryRow(
        id=row["id"], namespace=row["namespace"], key=row["key"], kind=row["kind"], summary=row["summary"],
        content_type=row["content_type"], size=row["size"], head=row["head"], tail=row["tail"],
        tags=_tags.decode(row["tags"]),
        confirmed=row["confirmed"], current=row["current"], version=row["version"], created_at=row["created_at"],
        sources=_links.decode(row["sources"]), chain_created_at=row["chain_created_at"],
        supersedes=_link.decode(row["supersedes"]) if row["supersedes"] else None,
        superseded_by=_link.decode(row["superseded_by"]) if row["superseded_by"] else None,
        **_labels(row),
    )


async def fetch_memory(conn: Conn, cred: Credential, memory_id: str, inline_max: int,
                       preview: int) -> tuple[str, MemoryRow | None]:
    tenant, row = await tenancy.fetch(conn, cred, _MEMORY, memory_id, inline_max, preview)
    return tenant, None if row is None else _memory_row(row)


async def fetch_current_memory(conn: Conn, cred: Credential, namespace: str, key: str, inline_max: int,
                               preview: int) -> tuple[str, MemoryRow | None]:
    """The current version of (namespace, key), gone or not; None when the pair has none."""
    tenant, row = await tenancy.fetch(conn, cred, _MEMORY_CURRENT, namespace, inline_max, preview, key)
    return tenant, None if row is None else _memory_row(row)


_PAIR_EXISTED = keyed("SELECT true AS existed FROM memories WHERE tenant_id = auth.tenant AND pair = $3 LIMIT 1")


async def memory_pair_existed(conn: Conn, cred: Credential, pair: bytes) -> bool:
    """Whether the pair ever had a version in the key's tenant (after a miss on its current one)."""
    _, row = await tenancy.fetch(conn, cred, _PAIR_EXISTED, pair)
    return row is not None


class _MemoryKey(msgspec.Struct):
    id: str
    namespace: str
    key: str
    kind: str
    version: int
    summary: str
    content_type: str
    tags: dict[str, str]
    confirmed: str
    created_at: datetime
    chain_created_at: datetime | None  # version 1's, on later versions
    expires_at: datetime | None
    text: str | None  # the value, when it is small enough to show in the list


_memory_keys = msgspec.json.Decoder(list[_MemoryKey])

_MEMORIES = """
    SELECT coalesce(json_agg(x ORDER BY x.namespace, x.key), '[]') AS memories FROM (
      SELECT m.id, m.namespace, m.key, m.kind, m.version, m.summary, m.content_type, m.tags, m.confirmed,
             m.created_at, m.expires_at,
             CASE WHEN m.version > 1 THEN (SELECT c.created_at FROM memories c
                                            WHERE c.tenant_id = m.tenant_id AND c.id = m.chain) END AS chain_created_at,
             CASE WHEN octet_length(m.value) <= $13 THEN convert_from(m.value, 'UTF8') END AS text
        FROM memories m
       WHERE m.tenant_id = auth.tenant AND m.current AND m.deleted_at IS NULL
         AND (m.expires_at IS NULL OR m.expires_at > now())
         AND {namespace}
         AND ($4::text IS NULL OR m.kind = $4)
         AND ($5::jsonb IS NULL OR m.tags @> $5)
         AND {labels}
         AND ($9::jsonb IS NULL OR CASE WHEN m.content_type = 'application/json' OR m.content_type LIKE '%+json'
                                        THEN convert_from(m.value, 'UTF8')::jsonb @> $9 ELSE false END)
         AND (m.namespace, m.key) > ($10, $11)
       ORDER BY m.namespace, m.key LIMIT $12) x
"""
# A namespace and those under it: [$3, $3 || '0') in "C" order holds the namespaces that start with $3, and
# the filter keeps those where it ends a segment ($3, $3/...), not $3-... ('-' sorts before '/').
_UNDER = ("m.namespace >= $3 AND m.namespace < $3 || '0' "
          "AND substr(m.namespace, char_length($3) + 1, 1) IN ('', '/')")


@functools.cache
def _memories(namespace: bool, labels: tuple[bool, bool, bool]) -> str:
    """The statement listing current memories with these filters given: along memories_current (or
    memories_current_by_app ... for a label) from the cursor on, or from the namespace when there is none."""
    return keyed(_MEMORIES.format(namespace=_UNDER if namespace else "$3::text IS NULL",
                                  labels=_label_filters("m", 6, labels)))


async def list_memories(
    conn: Conn, cred: Credential, namespace: str | None, kind: str | None, tags: str | None, labels: Labels,
    value_contains: str | None, after: tuple[str, str] | None, limit: int, inline_max: int,
) -> tuple[str, list[_MemoryKey]]:
    """The key's tenant, and its current live memories in (namespace, key) order after `after`.
    `tags` and `value_contains` are JSON objects the tags / JSON value must contain."""
    start = after or (namespace or "", "")  # every key is longer than ''
    tenant, row = await tenancy.fetch(
        conn, cred, _memories(namespace is not None, _given(labels)), namespace, kind, tags,
        labels.app_id, labels.agent_id, labels.run_id, value_contains, *start, limit, inline_max,
    )
    assert row is not None  # an aggregate: always one row
    return tenant, _memory_keys.decode(row["memories"])


class _VersionKey(msgspec.Struct):
    id: str
    version: int
    summary: str
    current: bool
    gone: bool
    created_at: datetime


_version_keys = msgspec.json.Decoder(list[_VersionKey])

_VERSIONS = keyed("""
    SELECT recall_is_gone(m.deleted_at, m.expires_at) AS gone,
           (SELECT coalesce(json_agg(x ORDER BY x.version DESC), '[]') FROM (
              SELECT v.id, v.version, v.summary, v.current, recall_is_gone(v.deleted_at, v.expires_at) AS gone,
                     v.created_at
                FROM memories v WHERE v.tenant_id = m.tenant_id AND v.chain = m.chain AND v.version < $4
               ORDER BY v.version DESC LIMIT $5) x) AS versions
    FROM memories m WHERE m.tenant_id = auth.tenant AND m.id = $3
""")


async def list_memory_versions(conn: Conn, cred: Credential, memory_id: str, before: int,
                               limit: int) -> tuple[str, State, list[_VersionKey]]:
    """The key's tenant, the memory's state, and the versions of its chain below `before`, newest first."""
    tenant, row = await tenancy.fetch(conn, cred, _VERSIONS, memory_id, before, limit)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _version_keys.decode(row["versions"])


_NAMESPACES = """
    SELECT coalesce(json_agg(p.ns ORDER BY p.ns), '[]') AS namespaces FROM (SELECT d.ns FROM (
      SELECT DISTINCT (CASE WHEN $5::int IS NULL THEN m.namespace
                       ELSE array_to_string((string_to_array(m.namespace, '/'))[1:$5], '/') END) COLLATE "C" AS ns
        FROM memories m
       WHERE m.tenant_id = auth.tenant AND m.current AND m.deleted_at IS NULL
         AND (m.expires_at IS NULL OR m.expires_at > now())
         AND {namespace}
         AND ($4::text IS NULL OR m.namespace = $4 OR right(m.namespace, length($4) + 1) = '/' || $4)
    ) d WHERE ($6::text IS NULL OR d.ns > $6 COLLATE "C")
    ORDER BY d.ns LIMIT $7) p
"""


@functools.cache
def _namespaces(prefix: bool) -> str:
    return keyed(_NAMESPACES.format(namespace=_UNDER if prefix else "$3::text IS NULL"))


async def list_memory_namespaces(conn: Conn, cred: Credential, prefix: str | None, suffix: str | None,
                                 max_depth: int | None, after: str | None, limit: int) -> tuple[str, list[str]]:
    """The distinct namespaces of current live memories (cut to max_depth segments), in order after `after`."""
    tenant, row = await tenancy.fetch(conn, cred, _namespaces(prefix is not None), prefix, suffix, max_depth, after,
                                      limit)
    return tenant, [] if row is None else msgspec.json.decode(row["namespaces"], type=list[str])


async def lock_memory_pair(conn: Conn, tenant: str, namespace: str, key: str) -> None:
    """Serialise writers of one (namespace, key) for this transaction (no space occurs in a tenant or namespace)."""
    await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1 || ' ' || $2 || ' ' || $3, 15))",
                       tenant, namespace, key)


async def insert_memory(
    conn: Conn, tenant: str, memory_id: str, namespace: str, key: str, pair: bytes, kind: str, summary: str,
    content_type: str, value: bytes, sha: bytes, tags: str, confirmed: str, labels: Labels, req_hash: bytes,
    expires_at: datetime | None,
) -> int:
    """Insert the pair's new current version, superseding the current one in the same statement; its version.

    A current version that is gone (expired) is closed, not superseded: the new one starts a new chain.
    Without `expires_at`, scratchpad and state memories take their tenant's default lifetime.
    The caller holds the pair's lock, so the chain stays gap-free.
    """
    return await conn.fetchval(
        """
        WITH old AS (
          UPDATE memories m SET current = false,
                 superseded_by = CASE WHEN recall_is_gone(m.deleted_at, m.expires_at) THEN NULL ELSE $2 END
           WHERE m.tenant_id = $1 AND m.namespace = $3 AND m.key = $4 AND m.current
          RETURNING m.id, m.chain, m.version, recall_is_gone(m.deleted_at, m.expires_at) AS gone),
        prev AS (SELECT * FROM old WHERE NOT gone)
        INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value, value_sha256,
                              tags, confirmed, app_id, agent_id, run_id, request_hash, chain, version, current,
                              supersedes, expires_at)
        SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16,
               coalesce(prev.chain, $2), coalesce(prev.version, 0) + 1, true, prev.id,
               coalesce($17, clock_timestamp() + (SELECT CASE $6 WHEN 'scratchpad' THEN t.memory_scratchpad_ttl
                                                               WHEN 'state' THEN t.memory_state_ttl END
                                                   FROM tenants t WHERE t.id = $1))
          FROM (SELECT 1) one LEFT JOIN prev ON true
        RETURNING version
        """,
        tenant, memory_id, namespace, key, pair, kind, summary, content_type, value, sha, tags, confirmed,
        labels.app_id, labels.agent_id, labels.run_id, req_hash, expires_at,
    )


async def insert_memory_sources(conn: Conn, tenant: str, memory_id: str, sources: list[str]) -> None:
    await conn.execute(
        """
        INSERT INTO memory_sources (tenant_id, memory_id, position, source_id)
        SELECT $1, $2, s.position, s.id FROM unnest($3::text[]) WITH ORDINALITY AS s(id, position)
        """,
        tenant, memory_id, sources,
    )


async def set_memory_ttl(conn: Conn, tenant: str, scratchpad: float | None, state: float | None) -> bool:
    """Set the default lifetimes (seconds; 0 keeps until deleted, None leaves it as it is)."""
    return await conn.fetchval(
        """
        UPDATE tenants SET
          memory_scratchpad_ttl = CASE WHEN $2::float8 IS NULL THEN memory_scratchpad_ttl
                                       WHEN $2 = 0 THEN NULL ELSE make_interval(secs => $2) END,
          memory_state_ttl = CASE WHEN $3::float8 IS NULL THEN memory_state_ttl
                                  WHEN $3 = 0 THEN NULL ELSE make_interval(secs => $3) END
        WHERE id = $1 RETURNING true
        """,
        tenant, scratchpad, state,
    ) is not None


# ---- webhooks: hooks (operator CLI as the owner; admin endpoints as recall_app), deliveries ----

_HOOK_COLUMNS = "id, tenant_id, source, label, '/hooks/' || source || '/' || id, created_at, revoked_at"


async def insert_hook(conn: Conn, hook_id: str, tenant: str, source: str, ipad: bytes, opad: bytes,
                      label: str) -> HookView:
    row = await conn.fetchrow(
        f"""
        INSERT INTO hooks (id, tenant_id, source, hmac_ipad, hmac_opad, label) VALUES ($1, $2, $3, $4, $5, $6)
        RETURNING {_HOOK_COLUMNS}
        """,
        hook_id, tenant, source, ipad, opad, label,
    )
    return HookView(*row)


async def list_hooks(conn: Conn, tenant: str | None) -> list[HookView]:
    rows = await conn.fetch(
        f"SELECT {_HOOK_COLUMNS} FROM hooks WHERE $1::text IS NULL OR tenant_id = $1"
        " ORDER BY tenant_id, created_at, id",
        tenant,
    )
    return [HookView(*r) for r in rows]


async def revoke_hook(conn: Conn, hook_id: str, tenant: str | None) -> HookView | None:
    """Revoke (idempotently); None when no such hook (in that tenant, when one is given)."""
    row = await conn.fetchrow(
        f"""
        UPDATE hooks SET revoked_at = coalesce(revoked_at, clock_timestamp())
        WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) RETURNING {_HOOK_COLUMNS}
        """,
        hook_id, tenant,
    )
    return None if row is None else HookView(*row)


async def claim_delivery(conn: Conn, tenant: str, hook_id: str, delivery: str) -> bool:
    """Record a delivery GUID for this transaction; False when it is already recorded. A concurrent
    duplicate waits here on the key until the first commits (then False) or rolls back (then True)."""
    return await conn.fetchval(
        """
        INSERT INTO hook_deliveries (tenant_id, hook_id, delivery) VALUES ($1, $2, $3)
        ON CONFLICT DO NOTHING RETURNING true
        """,
        tenant, hook_id, delivery,
    ) is not None


async def finish_delivery(conn: Conn, tenant: str, hook_id: str, delivery: str, outcome: Outcome) -> None:
    await conn.execute(
        "UPDATE hook_deliveries SET status = $4, body = $5, location = $6"
        " WHERE tenant_id = $1 AND hook_id = $2 AND delivery = $3",
        tenant, hook_id, delivery, outcome.status, outcome.body, outcome.location,
    )


async def delivery_outcome(conn: Conn, tenant: str, hook_id: str, delivery: str) -> Outcome | None:
    """The first answer to this delivery GUID, or None if it was never recorded."""
    row = await conn.fetchrow(
        "SELECT status, body, location FROM hook_deliveries WHERE tenant_id = $1 AND hook_id = $2 AND delivery = $3",
        tenant, hook_id, delivery,
    )
    return None if row is None else Outcome(status=row[0], body=row[1], location=row[2], object_id="")


async def advance_github_thread(conn: Conn, tenant: str, thread_id: str, updated_at: datetime, status: str) -> bool:
    """Record a GitHub object's state as the thread's newest; False when the thread already has a newer one
    (or one as new with another status: of two changes in the same second, the first to arrive stays)."""
    return await conn.fetchval(
        """
        INSERT INTO github_threads AS g (tenant_id, thread_id, updated_at, status) VALUES ($1, $2, $3, $4)
        ON CONFLICT (tenant_id, thread_id) DO UPDATE SET updated_at = excluded.updated_at, status = excluded.status
        WHERE g.updated_at < excluded.updated_at OR (g.updated_at = excluded.updated_at AND g.status = excluded.status)
        RETURNING true
        """,
        tenant, thread_id, updated_at, status,
    ) is not None


# ---- the recall trace (recall_server/trace.py) -------------------------------------------------
# Reads settle: a page shows only rows whose pos is older than the settle horizon ($4 seconds), so a
# row written later can never land behind a cursor (see trace_reads in schema.sql).


async def record_reads(conn: Conn, batch: str, accept_seconds: float) -> int:
    """Write one trace batch (a JSON array of rows: key_id, key_sha256 in base64, tick, run, at_us, object,
    route, status, bytes, request_id), each row into its key's tenant; returns how many rows' keys verified."""
    return await conn.fetchval("SELECT recall_record_reads($1, make_interval(secs => $2))", batch, accept_seconds)


async def purge_retained(conn: Conn, reads_keep: float, deliveries_keep: float, batch: int) -> int:
    """Delete up to `batch` trace reads older than `reads_keep` seconds and up to `batch` webhook deliveries
    older than `deliveries_keep`, in every tenant; returns the larger of the two counts."""
    return await conn.fetchval(
        "SELECT recall_purge_retained(make_interval(secs => $1), make_interval(secs => $2), $3)",
        reads_keep, deliveries_keep, batch)


_READ_PAGE = """
    SELECT coalesce(json_agg(x ORDER BY x.pos, x.tick), '[]') FROM (
      SELECT r.run_id AS run, r.at, r.object_id, r.route, r.status, r.bytes, r.key_id, r.request_id, r.pos, r.tick
        FROM trace_reads r
       WHERE r.tenant_id = {tenant} AND {match}
         AND r.pos < now() - make_interval(secs => $4)
         AND (r.pos, r.tick) > ($5, $6)
       ORDER BY r.pos, r.tick LIMIT $7) x
"""
_RUN_READS = keyed(f"SELECT ({_READ_PAGE.format(tenant='auth.tenant', match='r.run_id = $3')}) AS reads")
_OBJECT_READS = {  # kind -> the object's state and its reads (of any run), from its table
    kind: keyed(f"""
        SELECT recall_is_gone(o.deleted_at, o.expires_at) AS gone,
               ({_READ_PAGE.format(tenant='o.tenant_id', match='r.object_id = o.id')}) AS reads
        FROM {table} o WHERE o.tenant_id = auth.tenant AND o.id = $3
    """)
    for kind, table in ids.PLURAL.items()
}


class _ReadKey(Read):
    pos: datetime | None = None
    tick: int = 0


_read_keys = msgspec.json.Decoder(list[_ReadKey])
ReadPosition = tuple[datetime, int]


def _reads(text: str) -> list[tuple[Read, ReadPosition]]:
    return [(Read(run=r.run, at=r.at, object_id=r.object_id, route=r.route, status=r.status, bytes=r.bytes,
                  key_id=r.key_id, request_id=r.request_id), (r.pos, r.tick))  # type: ignore[misc]
            for r in _read_keys.decode(text)]


async def run_reads(conn: Conn, cred: Credential, run: str, settle: float, after: ReadPosition | None,
                    limit: int) -> tuple[str, list[tuple[Read, ReadPosition]]]:
    """The key's tenant, and a run's settled reads in order after a position, each with its position."""
    tenant, row = await tenancy.fetch(conn, cred, _RUN_READS, run, settle, *(after or _OLDEST_READ), limit)
    assert row is not None  # an aggregate: always one row
    return tenant, _reads(row["reads"])


async def object_reads(conn: Conn, cred: Credential, kind: str, object_id: str, settle: float,
                       after: ReadPosition | None, limit: int) -> tuple[str, State, list[tuple[Read, ReadPosition]]]:
    """The key's tenant, the object's state, and its settled reads in order after a position."""
    tenant, row = await tenancy.fetch(conn, cred, _OBJECT_READS[kind], object_id, settle, *(after or _OLDEST_READ),
                                      limit)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _reads(row["reads"])

# ---- search and backlinks ---------------------------------------------------------------------
# Search: one statement behind the key check. recall_search_hits (schema.sql: why it runs as the owner)
# finds the page's IDs in the bound tenant with the GIN indexes, filtered like the lists (live only,
# labels, created_at window), ranked by ts_rank (normalization 0: it depends on the row and the query
# only, never on the rest of the corpus) rounded to a numeric, so the keyset (score, created_at, id)
# compares exactly and pages are stable while objects are added. Each hit's summary and snippet are
# then read here, as recall_app under the tenant policy (a hit it cannot see drops out); ts_headline
# reads the row's text again, for the page's rows only.

SEARCH_PREFIX = 65536  # bytes of a payload or body that are indexed (recall_search_text in schema.sql)

_HEADLINE = ("ts_headline('simple', {text}, websearch_to_tsquery('simple', $3), "
             "'MaxWords=16, MinWords=6, MaxFragments=1, StartSel=**, StopSel=**')")

_SEARCH = keyed(f"""
    SELECT coalesce(json_agg(json_build_object(
             'id', h.hit_id, 'type', h.hit_kind, 'summary', s.summary, 'score', h.hit_score,
             'position', h.hit_score::text, 'created_at', h.hit_created_at, 'snippet', s.snippet,
             'thread_id', s.thread_id)
           ORDER BY h.hit_score DESC, h.hit_created_at DESC, h.hit_id DESC), '[]') AS hits
    FROM recall_search_hits($3, $4::text[], $13, $5, $6, $7, $8, $9, $10, $11, $12, $14) h
    JOIN LATERAL (
      SELECT x.summary, {_HEADLINE.format(text="x.title || ' — ' || x.summary")} AS snippet, NULL AS thread_id
        FROM threads x WHERE h.hit_kind = 'thread' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_HEADLINE.format(text="x.name || ' — ' || x.summary")}, NULL FROM workers x
       WHERE h.hit_kind = 'worker' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_HEADLINE.format(
          text=f"x.summary || ' — ' || x.source || ' — ' || recall_search_text(x.content_type, x.payload, {SEARCH_PREFIX})")},
             x.thread_id
        FROM triggers x WHERE h.hit_kind = 'trigger' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_HEADLINE.format(
          text=f"x.summary || ' — ' || recall_search_text(x.content_type, x.body, {SEARCH_PREFIX})")}, x.thread_id
        FROM reports x WHERE h.hit_kind = 'report' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_HEADLINE.format(
          text=f"x.summary || ' — ' || x.key || ' — ' || replace(x.namespace, '/', ' ') || ' — ' "
               f"|| recall_search_text(x.content_type, x.value, {SEARCH_PREFIX})")}, NULL
        FROM memories x WHERE h.hit_kind = 'memory' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
    ) s ON true
""")


_search_rows = msgspec.json.Decoder(list[SearchRow])


async def search(conn: Conn, cred: Credential, text: str, kinds: list[str], status: str | None, labels: Labels,
                 since: datetime | None, until: datetime | None, after: tuple[Decimal, datetime, str] | None,
                 limit: int) -> tuple[str, list[SearchRow]]:
    """The key's tenant, and its live objects matching `text`, best first then newest (keyset on
    (score, created_at, id), the score exact as a decimal string)."""
    tenant, row = await tenancy.fetch(
        conn, cred, _SEARCH, text, kinds, labels.app_id, labels.agent_id, labels.run_id, since, until,
        after[0] if after else None, after[1] if after else None, after[2] if after else None,
        status, limit,
    )
    assert row is not None  # an aggregate: always one row
    return tenant, _search_rows.decode(row["hits"])


# Backlinks: per kind of the linked-to object, the relations that can point at it. Each branch walks an
# index on (tenant_id, <link column>, <linking id>) in ID order from the cursor's position and stops
# after a page (no sort of every link: a trigger cited 10,000 times costs what one cited 50 times does);
# the page is keyset on (relation, id), both immutable, so paging is exactly-once while links are
# added. Linking objects that are gone are left out.


def _after(relation: str, column: str) -> str:
    """Only rows past the cursor ($4 relation, $5 id): none if it is past this relation, else IDs above $5."""
    return (f"coalesce($4::text <= '{relation}', true) "
            f"AND {column} > (CASE WHEN $4::text = '{relation}' THEN $5::text ELSE '' END)")


def _branch(relation: str, kind: str, linking: str, select_from: str, where: str) -> str:
    """One relation's links: the linking objects `x` (joined on x.id = linking, or read directly), past the
    cursor. The bound on x.id as well lets a merge join start both sides at the cursor."""
    bounds = _after(relation, linking)
    if linking != "x.id":
        bounds += f" AND {_after(relation, 'x.id')}"
    return (f"(SELECT DISTINCT '{relation}'::text AS relation, {linking} AS id, '{kind}'::text AS kind, "
            f"x.summary FROM {select_from} WHERE {where} AND {bounds} "
            f"AND NOT recall_is_gone(x.deleted_at, x.expires_at) ORDER BY 2 LIMIT $6)")


_BACKLINK_BRANCHES = {
    "cites": [_branch("cites", "report", "rr.report_id",
                      "report_refs rr JOIN reports x ON x.tenant_id = rr.tenant_id AND x.id = rr.report_id",
                      "rr.tenant_id = o.tenant_id AND rr.trigger_id = o.id")],
    "neighbour": [_branch("neighbour", "trigger", "nb.trigger_id",
                          "trigger_neighbours nb JOIN triggers x ON x.tenant_id = nb.tenant_id AND x.id = nb.trigger_id",
                          "nb.tenant_id = o.tenant_id AND nb.neighbour_id = o.id")],
    "event": [_branch("event", "thread", "e.thread_id",
                      "thread_events e JOIN threads x ON x.tenant_id = e.tenant_id AND x.id = e.thread_id",
                      "e.tenant_id = o.tenant_id AND e.ref = o.id")],
    "owner": [_branch("owner", "thread", "ow.thread_id",
                      "thread_owners ow JOIN threads x ON x.tenant_id = ow.tenant_id AND x.id = ow.thread_id",
                      "ow.tenant_id = o.tenant_id AND ow.worker_id = o.id")],
    "thread": [_branch("thread", "trigger", "x.id", "triggers x", "x.tenant_id = o.tenant_id AND x.thread_id = o.id"),
               _branch("thread", "report", "x.id", "reports x", "x.tenant_id = o.tenant_id AND x.thread_id = o.id")],
    "worker": [_branch("worker", "report", "x.id", "reports x", "x.tenant_id = o.tenant_id AND x.worker_id = o.id")],
    # a memory's sources: only current versions (a superseded one is history, not a link to follow)
    "source": [_branch("source", "memory", "ms.memory_id",
                       "memory_sources ms JOIN memories x ON x.tenant_id = ms.tenant_id AND x.id = ms.memory_id",
                       "ms.tenant_id = o.tenant_id AND ms.source_id = o.id AND x.current")],
}
BACKLINK_RELATIONS = {  # kind of the linked-to object -> the relations that can point at it
    "trigger": ["cites", "neighbour", "event", "source"],
    "thread": ["event", "thread", "source"],
    "worker": ["event", "owner", "worker", "source"],
    "report": ["event", "source"],
    "memory": ["event", "source"],
}
_BACKLINKS = {
    kind: keyed(f"""
        SELECT recall_is_gone(o.deleted_at, o.expires_at) AS gone,
          (SELECT coalesce(json_agg(json_build_object('relation', b.relation, 'id', b.id, 'type', b.kind,
                                                      'summary', b.summary) ORDER BY b.relation, b.id), '[]')
             FROM (SELECT * FROM ({' UNION ALL '.join(b for r in relations for b in _BACKLINK_BRANCHES[r])}) u
                    ORDER BY u.relation, u.id LIMIT $6) b) AS links
        FROM {ids.PLURAL[kind]} o WHERE o.tenant_id = auth.tenant AND o.id = $3
    """)
    for kind, relations in BACKLINK_RELATIONS.items()
}


_backlink_rows = msgspec.json.Decoder(list[BacklinkRow])


async def backlinks(conn: Conn, cred: Credential, kind: str, object_id: str, after: tuple[str, str] | None,
                    limit: int) -> tuple[str, State, list[BacklinkRow]]:
    """The key's tenant, the object's state, and the live objects linking to it in (relation, id) order."""
    tenant, row = await tenancy.fetch(conn, cred, _BACKLINKS[kind], object_id,
                                      after[0] if after else None, after[1] if after else None, limit)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _backlink_rows.decode(row["links"])


async def search_index_findings(conn: Conn, tenant: str, object_id: str) -> list[str]:
    """Places where the search index still holds terms of this ID's content, or of what was filed on it
    (verify-erasure). An erased row's generated vector is empty."""
    rows = await conn.fetch(
        """
        SELECT place FROM (
          SELECT 'triggers: the search index still has terms of ' || id AS place FROM triggers
           WHERE tenant_id = $1 AND (id = $2 OR thread_id = $2) AND search <> ''::tsvector
          UNION ALL SELECT 'reports: the search index still has terms of ' || id FROM reports
           WHERE tenant_id = $1 AND (id = $2 OR thread_id = $2) AND search <> ''::tsvector
          UNION ALL SELECT 'workers: the search index still has terms of ' || id FROM workers
           WHERE tenant_id = $1 AND id = $2 AND search <> ''::tsvector
          UNION ALL SELECT 'threads: the search index still has terms of ' || id FROM threads
           WHERE tenant_id = $1 AND id = $2 AND search <> ''::tsvector
          UNION ALL SELECT 'memories: the search index still has terms of ' || id FROM memories
           WHERE tenant_id = $1 AND search <> ''::tsvector
             AND (id = $2 OR (pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
                              AND recall_is_gone(deleted_at, expires_at)))
        ) found ORDER BY place
        """,
        tenant, object_id,
    )
    return [r[0] for r in rows]
