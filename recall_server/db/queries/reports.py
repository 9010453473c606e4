"""Reports: the view, a worker's list, filing one with its refs."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import (NEWEST, Conn, given, label_filters, labels_of, least, links_json,
                                              positions, thread_expiry)
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.models import ReportIndexEntry
from recall_server.rows import Labels, ReportRow

_REPORT = keyed("""
    SELECT r.id, r.worker_id, r.thread_id, r.summary, r.content_type, octet_length(r.body) AS size,
      CASE WHEN octet_length(r.body) <= $4 THEN r.body ELSE substring(r.body FROM 1 FOR $5) END AS head,
      CASE WHEN octet_length(r.body) <= $4 THEN ''::bytea
           ELSE substring(r.body FROM octet_length(r.body) - $5 + 1) END AS tail,
      r.created_at, r.app_id, r.agent_id, r.run_id, r.expires_at, r.namespace, recall_is_gone(r.deleted_at, r.expires_at) AS gone,
      (SELECT coalesce(json_agg(recall_link(t.id, t.summary, recall_is_gone(t.deleted_at, t.expires_at))
                                ORDER BY rr.position), '[]')
         FROM report_refs rr JOIN triggers t ON t.tenant_id = auth.tenant AND t.id = rr.trigger_id
        WHERE rr.tenant_id = auth.tenant AND rr.report_id = r.id) AS refs
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
        created_at=row["created_at"], refs=links_json.decode(row["refs"]), namespace=row["namespace"],
        **labels_of(row),
    )


_REPORTS = """
    SELECT recall_is_gone(w.deleted_at, w.expires_at) AS gone,
           (SELECT coalesce(json_agg(x ORDER BY x.created_at DESC, x.id DESC), '[]') FROM (
              SELECT r.id, r.thread_id, r.summary, r.created_at FROM reports r
               WHERE r.tenant_id = auth.tenant AND r.worker_id = w.id AND NOT recall_is_gone(r.deleted_at, r.expires_at)
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
    return keyed(_REPORTS.format(labels=label_filters("r", 7, labels)))


async def list_reports(
    conn: Conn, cred: Credential, worker_id: str, labels: Labels, after: tuple[datetime, str] | None, limit: int,
) -> tuple[str, State, list[tuple[ReportIndexEntry, datetime]]]:
    """The key's tenant, the worker's state, and its live reports newest first (keyset on (created_at, id))."""
    tenant, row = await tenancy.fetch(
        conn, cred, _reports(given(labels)), worker_id, *(after or NEWEST), limit,
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


_INSERT_REPORT = """
        WITH new AS (
          INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body,
                               body_sha256, request_hash, app_id, agent_id, run_id, expires_at, namespace)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,
                  least($13, (SELECT expires_at FROM threads WHERE tenant_id = $1 AND id = $4)), $14)
          ON CONFLICT DO NOTHING RETURNING worker_id)
        UPDATE workers w SET reports_total = reports_total + 1 FROM new
         WHERE w.tenant_id = $1 AND w.id = new.worker_id RETURNING true
        """


async def insert_report(conn: Conn, tenant: str, report_id: str, worker_id: str, thread_id: str, summary: str,
                        content_type: str, body: bytes, sha: bytes, labels: Labels, req_hash: bytes,
                        expires_at: datetime | None) -> bool:
    """Insert (counted on the worker row); False when the ID exists."""
    args = (tenant, report_id, worker_id, thread_id, summary, content_type, body, sha, req_hash,
            labels.app_id, labels.agent_id, labels.run_id, expires_at, labels.namespace)
    if conn.sharded:
        return await _insert_report_steps(conn, *args)
    return await conn.fetchval(_INSERT_REPORT, *args) is not None


async def _insert_report_steps(conn: Conn, tenant: str, report_id: str, worker_id: str, thread_id: str,
                               *rest: Any) -> bool:
    """_INSERT_REPORT on a Citus coordinator (no subquery in an INSERT's VALUES, no data-modifying CTE in front of
    an UPDATE across tables): the report (its expiry capped by its thread's), then its count on its worker."""
    *columns, expires_at, namespace = rest
    expires_at = least(expires_at, await thread_expiry(conn, tenant, thread_id))
    made = await conn.fetchval(
        "INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256,"
        " request_hash, app_id, agent_id, run_id, expires_at, namespace)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT DO NOTHING RETURNING true",
        tenant, report_id, worker_id, thread_id, *columns, expires_at, namespace)
    if made is None:
        return False
    return await conn.fetchrow("UPDATE workers SET reports_total = reports_total + 1"
                               " WHERE tenant_id = $1 AND id = $2 RETURNING true", tenant, worker_id) is not None


insert_refs = positions("report_refs", "report_id", "trigger_id")
