"""Administration within the caller's tenant (admin scope): API keys and webhook endpoints."""

from __future__ import annotations

from recall_server.auth import Credential
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import NotFound
from recall_server.models import CreateHook, CreateKey, HookList, HookView, KeyList, KeyView, NewHook, NewKey
from recall_server.service import ops


class Admin:
    """Keys and hooks of the key's own tenant; the operator's versions, for any tenant, are in ops.py."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- API keys ------------------------------------------------------------------------

    async def check_key(self, cred: Credential) -> None:
        """401 unless the key is live (before a request's body is read: tenancy.verify)."""
        await tenancy.verify(self.db, cred)

    async def own_key(self, cred: Credential) -> KeyView:
        async with self.db.connection() as conn:
            return await q.own_key(conn, cred)

    async def create_key(self, cred: Credential, req: CreateKey) -> NewKey:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return await ops.issue_key(conn, tenant, req.scope, req.label)

    async def list_keys(self, cred: Credential) -> KeyList:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return KeyList(data=await q.list_keys(conn, tenant))

    async def revoke_key(self, cred: Credential, key_id: str) -> KeyView:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            revoked = await q.revoke_key(conn, key_id, tenant)
        if revoked is None:
            raise NotFound(f"No API key with ID {key_id} exists.", id=key_id)
        await tenancy.after_revoking()  # committed: now wait until no process relies on an earlier check
        return revoked

    # ---- webhook endpoints ---------------------------------------------------------------

    async def create_hook(self, cred: Credential, req: CreateHook) -> NewHook:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return await ops.issue_hook(conn, tenant, req.source, req.label)

    async def list_hooks(self, cred: Credential) -> HookList:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return HookList(data=await q.list_hooks(conn, tenant))

    async def revoke_hook(self, cred: Credential, hook_id: str) -> HookView:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            revoked = await q.revoke_hook(conn, hook_id, tenant)
        if revoked is None:
            raise NotFound(f"No webhook with ID {hook_id} exists.", id=hook_id)
        return revoked
