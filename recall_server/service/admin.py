"""Administration within the caller's tenant (admin scope): API keys and webhook endpoints."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from recall_server.auth import Credential, KeyCache
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import NotFound
from recall_server.models import (CreateHook, CreateKey, HookList, HookView, KeyList, KeyView, NewHook, NewKey,
                                   UpdateKey)
from recall_server.service import ops

log = logging.getLogger("recall_server.keys")


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
            return await ops.issue_key(conn, tenant, req.scope, req.label, req.subject, req.grants)

    async def update_key(self, cred: Credential, key_id: str, req: UpdateKey) -> KeyView:
        """Replace a key's grants; returns once every process applies them (like a revoke)."""
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            changed = await ops.set_grants(conn, key_id, tenant, req.grants)
        await tenancy.after_revoking()
        return changed

    async def record_key_use_forever(self, keys: KeyCache, interval: float = 5.0) -> None:
        """Write when this process's checks last accepted each key (api_keys.last_used_at), every
        `interval` seconds: one statement for all of them, never one per request."""
        while True:
            await asyncio.sleep(interval)
            if used := keys.take_used():
                try:
                    async with self.db.connection() as conn:
                        await q.record_key_use(conn, {k: datetime.fromtimestamp(t, UTC) for k, t in used.items()})
                except Exception as exc:  # a database outage (a 503 for requests): kept for the next interval
                    keys.keep_used(used)
                    log.warning("recording when keys were last used failed (%s); kept for the next interval",
                                type(exc).__name__)

    async def list_keys(self, cred: Credential) -> KeyList:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return KeyList(data=await q.list_keys(conn, tenant))

    async def revoke_key(self, cred: Credential, key_id: str) -> KeyView:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            revoked = await q.revoke_key(conn, tenant, key_id)
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
            revoked = await q.revoke_hook(conn, tenant, hook_id)
        if revoked is None:
            raise NotFound(f"No webhook with ID {hook_id} exists.", id=hook_id)
        return revoked
