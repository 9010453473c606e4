"""The request audit: recording request batches, purging retained rows, a page of requests, one request."""

from __future__ import annotations

from datetime import datetime

import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import OLDEST_READ, Conn
from recall_server.db.tenancy import keyed
from recall_server.models import AuditedRequest

# Pages settle as the trace's do ($4 seconds). A key with grants sees only its own requests ($5, the key's ID,
# verified by the same statement's key check). `background` is what became of the work each request started,
# read now: the embedding of each object it names (queued, retrying, failed with the error's class, indexed).
_COLUMNS = """
    a.request_id, a.at, a.key_id, a.subject, a.run_id AS run, a.method, a.route, a.status, a.object_ids,
    a.namespace, a.params, a.returned, a.pos, a.tick,
    (SELECT coalesce(json_agg(json_build_object(
                'id', o.id,
                'embedding', CASE WHEN e.found THEN 'indexed' WHEN w.not_before = 'infinity' THEN 'failed'
                                  WHEN w.attempts > 0 THEN 'retrying' ELSE 'queued' END,
                'error', split_part(w.last_error, ':', 1)) ORDER BY o.i), '[]')
       FROM unnest(a.object_ids) WITH ORDINALITY AS o(id, i)
       LEFT JOIN embedding_queue w ON w.tenant_id = auth.tenant AND w.object_id = o.id
       LEFT JOIN LATERAL (SELECT true AS found FROM embeddings x
                           WHERE x.tenant_id = auth.tenant AND x.object_id = o.id LIMIT 1) e ON true
      WHERE w.object_id IS NOT NULL OR e.found) AS background
"""
def _visible(key: str) -> str:
    return f"a.tenant_id = auth.tenant AND ((SELECT recall_reads()) IS NULL OR a.key_id = {key})"


_PAGE = keyed(f"""
    SELECT (SELECT coalesce(json_agg(x ORDER BY x.pos, x.tick), '[]') FROM (
      SELECT {_COLUMNS}
        FROM request_audit a
       WHERE {_visible('$5')}
         AND a.pos < now() - make_interval(secs => $4)
         AND (a.pos, a.tick) > ($6, $7)
         AND ($8::timestamptz IS NULL OR a.at >= $8) AND ($9::timestamptz IS NULL OR a.at < $9)
         AND ($10::text IS NULL OR a.route = $10)
         AND ($11::integer IS NULL OR a.status BETWEEN $11 * 100 AND $11 * 100 + 99)
         AND ($12::text IS NULL OR a.key_id = $12) AND ($13::text IS NULL OR a.subject = $13)
         AND ($14::text IS NULL OR a.run_id = $14)
         AND ($15::text IS NULL OR a.object_ids @> ARRAY[$15::text] OR a.returned @> ARRAY[$15::text])
         AND ($16::text IS NULL OR a.method = $16)
       ORDER BY a.pos, a.tick LIMIT $3) x) AS requests
""")
_ONE = keyed(f"""
    SELECT (SELECT coalesce(json_agg(x ORDER BY x.pos, x.tick), '[]') FROM (
      SELECT {_COLUMNS} FROM request_audit a WHERE {_visible('$4')} AND a.request_id = $3
       ORDER BY a.pos, a.tick LIMIT 20) x) AS requests
""")


class RequestFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What a page of requests keeps: each field None keeps every request."""

    since: datetime | None = None
    until: datetime | None = None
    route: str | None = None
    status_class: int | None = None  # 2 for 2xx, ...
    key_id: str | None = None
    subject: str | None = None
    run: str | None = None
    object_id: str | None = None  # named in its path or answer, or returned by it
    method: str | None = None


class _Positioned(AuditedRequest):
    pos: datetime | None = None
    tick: int = 0


_decode = msgspec.json.Decoder(list[_Positioned])
RequestPosition = tuple[datetime, int]
_FIELDS = [f for f in AuditedRequest.__struct_fields__]


def _requests(text: str) -> list[tuple[AuditedRequest, RequestPosition]]:
    return [(AuditedRequest(**{f: getattr(r, f) for f in _FIELDS}), (r.pos, r.tick))  # type: ignore[arg-type]
            for r in _decode.decode(text)]


async def record_requests(conn: Conn, batch: str, accept_seconds: float) -> int:
    """Write one audit batch (a JSON array of rows, recall_record_requests says their fields), each row into its
    key's tenant; returns how many rows' keys verified."""
    return await conn.fetchval("SELECT recall_record_requests($1, make_interval(secs => $2))", batch, accept_seconds)


async def purge_audit(conn: Conn, default_keep: float, batch: int) -> int:
    """Delete up to `batch` audit rows older than their tenant's retention (`default_keep` seconds where it has
    none), in every tenant; returns how many."""
    return await conn.fetchval("SELECT recall_purge_audit(make_interval(secs => $1), $2)", default_keep, batch)


async def list_requests(conn: Conn, cred: Credential, settle: float, after: RequestPosition | None,
                        limit: int, match: RequestFilter) -> tuple[str, list[tuple[AuditedRequest, RequestPosition]]]:
    """The key's tenant, and its settled requests in order after a position that pass `match` (a key with
    grants: its own)."""
    tenant, row = await tenancy.fetch(conn, cred, _PAGE, limit, settle, cred.key_id, *(after or OLDEST_READ),
                                      match.since, match.until, match.route, match.status_class, match.key_id,
                                      match.subject, match.run, match.object_id, match.method)
    assert row is not None  # an aggregate: always one row
    return tenant, _requests(row["requests"])


async def requests_by_id(conn: Conn, cred: Credential, request_id: str) -> list[AuditedRequest]:
    """The audited requests with this request ID in the key's tenant (a key with grants: its own), settled or
    not; one, unless a client sent the same X-Request-ID twice."""
    _, row = await tenancy.fetch(conn, cred, _ONE, request_id, cred.key_id)
    assert row is not None
    return [r for r, _ in _requests(row["requests"])]
