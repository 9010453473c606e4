"""Tenants and their settings (operator CLI, as the owner); the server's own rows."""

from __future__ import annotations

from recall_server.db.queries._common import Conn


async def create_tenant(conn: Conn, tenant: str) -> bool:
    return await conn.fetchval(
        "INSERT INTO tenants (id) VALUES ($1) ON CONFLICT DO NOTHING RETURNING true", tenant
    ) is not None


async def tenant_exists(conn: Conn, tenant: str) -> bool:
    return await conn.fetchval("SELECT true FROM tenants WHERE id = $1", tenant) is not None


async def tenant_names(conn: Conn, limit: int) -> list[str]:
    """Up to `limit` tenants' names, in order (the operator's CLI: which tenant a command means)."""
    return [r[0] for r in await conn.fetch("SELECT id FROM tenants ORDER BY id LIMIT $1", limit)]


async def set_retention(conn: Conn, tenant: str, days: float | None) -> bool:
    return await conn.fetchval(
        """
        UPDATE tenants SET closed_thread_retention = CASE WHEN $2::float8 IS NULL THEN NULL
                                                         ELSE make_interval(secs => $2 * 86400) END
        WHERE id = $1 RETURNING true
        """,
        tenant, days,
    ) is not None


async def set_audit_retention(conn: Conn, tenant: str, days: float | None) -> bool:
    """How long the tenant's request audit is kept (None: the server's RECALL_AUDIT_TTL)."""
    return await conn.fetchval(
        "UPDATE tenants SET audit_retention = make_interval(secs => $2 * 86400) WHERE id = $1 RETURNING true",
        tenant, days,
    ) is not None


async def set_audit_queries(conn: Conn, tenant: str, keep: bool) -> bool:
    """Whether the tenant's audit keeps each search's question."""
    return await conn.fetchval("UPDATE tenants SET audit_queries = $2 WHERE id = $1 RETURNING true",
                               tenant, keep) is not None


async def set_lineage_policy(conn: Conn, tenant: str, policy: str) -> bool:
    """The tenant's lineage policy: what erasing a source does to the memories learned from it."""
    return await conn.fetchval("UPDATE tenants SET lineage_policy = $2 WHERE id = $1 RETURNING true",
                               tenant, policy) is not None


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


async def set_extract_namespace(conn: Conn, tenant: str, template: str | None) -> bool:
    """The namespace template the tenant's threads extract into unless they say otherwise (None: no default)."""
    return await conn.fetchval("UPDATE tenants SET extract_namespace = $2 WHERE id = $1 RETURNING true",
                               tenant, template) is not None


async def cursor_secret(conn: Conn) -> bytes:
    return await conn.fetchval("SELECT value FROM server_secrets WHERE name = 'cursor'")


async def ping(conn: Conn) -> None:
    await conn.fetchval("SELECT 1")
