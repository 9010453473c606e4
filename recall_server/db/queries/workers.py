"""Workers: the view (from its head or from the tables), creating one, rebuilding its head."""

from __future__ import annotations

from datetime import datetime

import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import (
    HEAD_SIZE,
    Conn,
    gone_by,
    head_owner,
    head_owners_json,
    labels_of,
    links_json,
    shown,
)
from recall_server.db.tenancy import keyed
from recall_server.models import Link
from recall_server.rows import Labels, WorkerRow

# A worker's totals: kept on its row, or for a key with grants counted under its policies (what it may see).
_THREADS_TOTAL = ("CASE WHEN (SELECT recall_reads()) IS NULL THEN w.threads_total ELSE ("
                  "SELECT count(*) FROM thread_owners o JOIN threads t ON t.tenant_id = auth.tenant AND t.id = o.thread_id"
                  " WHERE o.tenant_id = auth.tenant AND o.worker_id = w.id) END")
_REPORTS_TOTAL = ("CASE WHEN (SELECT recall_reads()) IS NULL THEN w.reports_total ELSE ("
                  "SELECT count(*) FROM reports r WHERE r.tenant_id = auth.tenant AND r.worker_id = w.id) END")

# The default view reads the worker's head (workers.head_threads, head_reports), like a thread's.
_WORKER_HEAD = keyed(f"""
    SELECT w.id, w.name, w.summary, w.created_at, w.app_id, w.agent_id, w.run_id, w.expires_at, w.namespace,
      recall_is_gone(w.deleted_at, w.expires_at) AS gone, {_THREADS_TOTAL} AS threads_total,
      {shown("w.head_threads", "threads")}::text AS threads, {_REPORTS_TOTAL} AS reports_total,
      {shown("w.head_reports", "reports")}::text AS reports, now() AS now
    FROM workers w WHERE w.tenant_id = auth.tenant AND w.id = $3
""")

_WORKER_LOG = keyed(f"""
    SELECT w.id, w.name, w.summary, w.created_at, w.app_id, w.agent_id, w.run_id, w.expires_at, w.namespace,
      recall_is_gone(w.deleted_at, w.expires_at) AS gone,
      {_THREADS_TOTAL} AS threads_total,
      (SELECT coalesce(json_agg(recall_link(x.id, x.summary, recall_is_gone(x.deleted_at, x.expires_at))), '[]') FROM (
         SELECT t.id, t.summary, t.deleted_at, t.expires_at FROM thread_owners o
           JOIN threads t ON t.tenant_id = auth.tenant AND t.id = o.thread_id
          WHERE o.tenant_id = auth.tenant AND o.worker_id = w.id
          ORDER BY o.assigned_at DESC, t.id DESC LIMIT $4) x) AS threads,
      {_REPORTS_TOTAL} AS reports_total,
      (SELECT coalesce(json_agg(CASE WHEN recall_is_gone(x.deleted_at, x.expires_at)
                                     THEN json_build_object('id', x.id, 'deleted', true)
                                     ELSE json_build_object('id', x.id, 'summary', x.summary, 'refs', x.refs) END),
                       '[]')
         FROM (
         SELECT r.id, r.summary, r.deleted_at, r.expires_at,
                ARRAY(SELECT rr.trigger_id FROM report_refs rr WHERE rr.tenant_id = auth.tenant
                       AND rr.report_id = r.id ORDER BY rr.position) AS refs
           FROM reports r
          WHERE r.tenant_id = auth.tenant AND r.worker_id = w.id
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
    if gone_by(r.deleted, r.expires_at, now):
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
        threads = [head_owner(t, now) for t in head_owners_json.decode(row["threads"])[:recent]]
        reports = [_head_report(r, now) for r in _head_reports.decode(row["reports"])[:recent]]
    else:
        threads, reports = links_json.decode(row["threads"]), links_json.decode(row["reports"])
    return tenant, WorkerRow(
        id=row["id"], name=row["name"], summary=row["summary"], created_at=row["created_at"],
        threads_total=row["threads_total"], threads=threads,
        reports_total=row["reports_total"], reports=reports, namespace=row["namespace"], **labels_of(row),
    )


async def insert_worker(conn: Conn, tenant: str, worker_id: str, name: str, summary: str, labels: Labels,
                        req_hash: bytes, expires_at: datetime | None) -> bool:
    return await conn.fetchval(
        """
        INSERT INTO workers (tenant_id, id, name, summary, app_id, agent_id, run_id, request_hash, expires_at, namespace)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT DO NOTHING RETURNING true
        """,
        tenant, worker_id, name, summary, labels.app_id, labels.agent_id, labels.run_id, req_hash, expires_at,
        labels.namespace,
    ) is not None


async def rebuild_worker_head(conn: Conn, tenant: str, worker_id: str) -> None:
    """Render the worker's head (newest threads, reports) again (see recall_rebuild_worker_head)."""
    await conn.execute("SELECT recall_rebuild_worker_head($1, $2)", tenant, worker_id)
