"""Webhooks: hooks (operator CLI as the owner; admin endpoints within a tenant), deliveries, GitHub thread states."""

from __future__ import annotations

from datetime import datetime

from recall_server.db.queries._common import Conn
from recall_server.models import HookView
from recall_server.rows import Outcome

_HOOK_COLUMNS = "id, tenant_id, source, label, '/hooks/' || source || '/' || id, created_at, revoked_at"


async def insert_hook(conn: Conn, tenant: str, hook_id: str, source: str, ipad: bytes, opad: bytes,
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


async def revoke_hook(conn: Conn, tenant: str | None, hook_id: str) -> HookView | None:
    """Revoke (idempotently); None when no such hook (in that tenant, when one is given). The time comes from
    a subquery: Citus refuses a volatile function in the SET of an UPDATE (docs/scaling.md)."""
    row = await conn.fetchrow(
        f"""
        UPDATE hooks SET revoked_at = coalesce(revoked_at, n.at) FROM (SELECT clock_timestamp() AS at) n
        WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) RETURNING {_HOOK_COLUMNS}
        """,
        hook_id, tenant,
    )
    return None if row is None else HookView(*row)


async def claim_delivery(conn: Conn, tenant: str, hook_id: str, delivery: str, sha: bytes) -> bool:
    """Record a hook's delivery GUID, with its bytes' SHA-256, for this transaction; False when it is already
    recorded. A concurrent duplicate waits here on the key until the first commits (then False) or rolls
    back (then True)."""
    return await conn.fetchval(
        """
        INSERT INTO hook_deliveries (tenant_id, hook_id, delivery, body_sha256) VALUES ($1, $2, $3, $4)
        ON CONFLICT DO NOTHING RETURNING true
        """,
        tenant, hook_id, delivery, sha,
    ) is not None


async def finish_delivery(conn: Conn, tenant: str, hook_id: str, delivery: str, outcome: Outcome) -> None:
    await conn.execute(
        "UPDATE hook_deliveries SET status = $4, body = $5, location = $6"
        " WHERE tenant_id = $1 AND hook_id = $2 AND delivery = $3",
        tenant, hook_id, delivery, outcome.status, outcome.body, outcome.location,
    )


async def delivery_outcome(conn: Conn, tenant: str, hook_id: str, delivery: str) -> tuple[Outcome, bytes | None]:
    """The first answer to this hook's delivery GUID (which the caller found recorded), and its bytes' SHA-256
    (None when recorded before it was kept)."""
    row = await conn.fetchrow(
        "SELECT status, body, location, body_sha256 FROM hook_deliveries"
        " WHERE tenant_id = $1 AND hook_id = $2 AND delivery = $3",
        tenant, hook_id, delivery,
    )
    return Outcome(status=row[0], body=row[1], location=row[2], object_id=""), row[3]


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
