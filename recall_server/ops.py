"""Operator operations: what the CLI runs on an owner connection (tenants, keys, sweeps, erasure checks)."""

from __future__ import annotations

from recall_server import auth
from recall_server.db import queries as q
from recall_server.errors import NotFound
from recall_server.ids import State
from recall_server.models import KeyView, NewKey


async def create_tenant(conn: q.Conn, tenant: str) -> bool:
    """Create a tenant; False if it already existed."""
    return await q.create_tenant(conn, tenant)


async def set_retention(conn: q.Conn, tenant: str, days: float | None) -> None:
    if not await q.set_retention(conn, tenant, days):
        raise NotFound(f"No tenant named {tenant!r}.")


async def issue_key(conn: q.Conn, tenant: str, scope: str, label: str) -> NewKey:
    """Create a key for a tenant (the admin route does this too, bound to its own tenant); the
    returned NewKey is the only copy of its secret."""
    key_id, key, secret_sha256 = auth.generate()
    info = await q.insert_key(conn, key_id, tenant, scope, secret_sha256, label)
    return NewKey(id=info.id, tenant=info.tenant, scope=info.scope, label=info.label, created_at=info.created_at,
                  key=key)


async def issue_key_checked(conn: q.Conn, tenant: str, scope: str, label: str) -> NewKey:
    if not await q.tenant_exists(conn, tenant):
        raise NotFound(f"No tenant named {tenant!r}; create it with `recall-server tenants create {tenant}`.")
    return await issue_key(conn, tenant, scope, label)


async def list_keys(conn: q.Conn, tenant: str | None) -> list[KeyView]:
    return await q.list_keys(conn, tenant)


async def revoke_key(conn: q.Conn, key_id: str) -> KeyView | None:
    return await q.revoke_key(conn, key_id, None)


async def sweep(conn: q.Conn, batch: int = 500) -> int:
    """Purge expired objects in every tenant until a batch comes back short; each batch is its own
    transaction (recall_sweep runs as the owner)."""
    purged = 0
    while (done := await q.sweep(conn, batch)) == batch:
        purged += done
    return purged + done


async def verify_erasure(conn: q.Conn, tenant: str, object_id: str) -> list[str]:
    """Where this ID's content could still be read (empty: erased). An ID still live says so."""
    state = await q.state(conn, tenant, object_id)
    if state is State.MISSING:
        return [f"{object_id} never existed in tenant {tenant}"]
    findings = sorted([*await q.erasure_findings(conn, tenant, object_id),
                       *await q.search_index_findings(conn, tenant, object_id)])
    return findings if state is State.GONE else [f"{object_id} is live (not deleted, not expired)", *findings]
