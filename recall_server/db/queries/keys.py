"""API keys: create, list, revoke (operator CLI as the owner; admin endpoints within a tenant), a key's own row."""

from __future__ import annotations

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed
from recall_server.models import KeyView

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
