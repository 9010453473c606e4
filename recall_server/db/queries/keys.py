"""API keys: create, list, change grants, revoke (operator CLI as the owner; admin endpoints within a tenant),
a key's own row, when keys were last used."""

from __future__ import annotations

from datetime import datetime

import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed
from recall_server.models import KeyView

_COLUMNS = "id, tenant_id, scope, label, created_at, revoked_at, subject, grants::text, last_used_at"


def _view(row: object) -> KeyView:
    *head, grants, last_used_at = row  # type: ignore[misc]
    return msgspec.convert({"id": head[0], "tenant": head[1], "scope": head[2], "label": head[3],
                            "created_at": head[4], "revoked_at": head[5], "subject": head[6],
                            "grants": msgspec.json.decode(grants), "last_used_at": last_used_at}, KeyView)


async def insert_key(conn: Conn, tenant: str, key_id: str, scope: str, secret_sha256: bytes, label: str,
                     subject: str | None, grants: bytes, grant_lines: str) -> KeyView:
    row = await conn.fetchrow(
        f"""
        INSERT INTO api_keys (id, tenant_id, scope, secret_sha256, label, subject, grants, grant_lines)
        VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb, $8) RETURNING {_COLUMNS}
        """,
        key_id, tenant, scope, secret_sha256, label, subject, grants.decode(), grant_lines,
    )
    return _view(row)


async def list_keys(conn: Conn, tenant: str | None) -> list[KeyView]:
    rows = await conn.fetch(
        f"""
        SELECT {_COLUMNS} FROM api_keys
        WHERE $1::text IS NULL OR tenant_id = $1 ORDER BY tenant_id, created_at, id
        """,
        tenant,
    )
    return [_view(r) for r in rows]


_OWN_KEY = keyed(f"""
    SELECT {_COLUMNS} FROM api_keys WHERE tenant_id = auth.tenant AND id = $3
""")


async def own_key(conn: Conn, cred: Credential) -> KeyView:
    """The key a request carries, in one statement with its own check (401 if it is not valid)."""
    _, row = await tenancy.fetch(conn, cred, _OWN_KEY, cred.key_id)
    assert row is not None  # the key check just found it
    return _view(row[2:])


async def revoke_key(conn: Conn, tenant: str | None, key_id: str) -> KeyView | None:
    """Revoke (idempotently); None when no such key (in that tenant, when one is given). The time comes from a
    subquery: Citus refuses a volatile function in the SET of an UPDATE (docs/scaling.md)."""
    row = await conn.fetchrow(
        f"""
        UPDATE api_keys SET revoked_at = coalesce(revoked_at, n.at) FROM (SELECT clock_timestamp() AS at) n
        WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2)
        RETURNING {_COLUMNS}
        """,
        key_id, tenant,
    )
    return None if row is None else _view(row)


async def key_subject(conn: Conn, tenant: str | None, key_id: str) -> tuple[str | None] | None:
    """(its subject,) of a live key (in that tenant, when one is given); None when there is no such key."""
    row = await conn.fetchrow(
        "SELECT subject FROM api_keys WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND revoked_at IS NULL",
        key_id, tenant,
    )
    return None if row is None else (row[0],)


async def set_grants(conn: Conn, tenant: str | None, key_id: str, grants: bytes, grant_lines: str) -> KeyView | None:
    """Replace a live key's grants; None when there is no such key (in that tenant, when one is given)."""
    row = await conn.fetchrow(
        f"""
        UPDATE api_keys SET grants = $3::text::jsonb, grant_lines = $4
        WHERE id = $1 AND ($2::text IS NULL OR tenant_id = $2) AND revoked_at IS NULL
        RETURNING {_COLUMNS}
        """,
        key_id, tenant, grants.decode(), grant_lines,
    )
    return None if row is None else _view(row)


async def record_key_use(conn: Conn, used: dict[str, datetime]) -> None:
    """Set each key's last_used_at to when a process last saw it used, unless a later time is there."""
    await conn.execute("SELECT recall_keys_used($1::text[], $2::timestamptz[])", list(used), list(used.values()))
