"""Operator operations: what the CLI runs on an owner connection (tenants, keys, sweeps, erasure checks)."""

from __future__ import annotations

import msgspec

from recall_server import auth, ids
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.errors import NotFound, Unprocessable
from recall_server.ids import State
from recall_server.models import Grant, HookView, KeyView, NewHook, NewKey


async def create_tenant(conn: q.Conn, tenant: str) -> bool:
    """Create a tenant; False if it already existed."""
    return await q.create_tenant(conn, tenant)


async def set_retention(conn: q.Conn, tenant: str, days: float | None) -> None:
    if not await q.set_retention(conn, tenant, days):
        raise NotFound(f"No tenant named {tenant!r}.")


async def set_audit_retention(conn: q.Conn, tenant: str, days: float | None) -> None:
    """Days the tenant's request audit is kept (None: the server's RECALL_AUDIT_TTL)."""
    if not await q.set_audit_retention(conn, tenant, days):
        raise NotFound(f"No tenant named {tenant!r}.")


async def set_audit_queries(conn: q.Conn, tenant: str, keep: bool) -> None:
    """Whether the tenant's request audit keeps each search's question (`q` in its params)."""
    if not await q.set_audit_queries(conn, tenant, keep):
        raise NotFound(f"No tenant named {tenant!r}.")


async def set_extract_namespace(conn: q.Conn, tenant: str, template: str | None) -> None:
    """The namespace template the tenant's threads extract memories into by default (None: no default).
    ValueError for a template that is no namespace once its subject placeholders are filled in."""
    if template is not None:
        from recall_server.service.extraction import resolve_namespace

        resolve_namespace(template, "user:x" if "{" in template else None)
    if not await q.set_extract_namespace(conn, tenant, template):
        raise NotFound(f"No tenant named {tenant!r}.")


async def set_memory_ttl(conn: q.Conn, tenant: str, scratchpad: float | None, state: float | None) -> None:
    """Default lifetimes (seconds) of scratchpad and state memories written without ttl/expires_at (0: none)."""
    if not await q.set_memory_ttl(conn, tenant, scratchpad, state):
        raise NotFound(f"No tenant named {tenant!r}.")


def _grants(grants: list[Grant], subject: str | None) -> tuple[bytes, str]:
    """Grants as stored: as written (JSON), and resolved for the subject (ids.grant_lines); 422 when a
    grant names the subject of a key that has none."""
    try:
        lines = ids.grant_lines([(g.namespace, g.access) for g in grants], subject)
    except ValueError as exc:
        raise Unprocessable(str(exc), field="grants") from None
    return msgspec.json.encode(grants), lines


async def issue_key(conn: q.Conn, tenant: str, scope: str, label: str, subject: str | None = None,
                    grants: list[Grant] | None = None) -> NewKey:
    """Create a key for a tenant (the admin route does this too, bound to its own tenant); the
    returned NewKey is the only copy of its secret."""
    stored, lines = _grants(grants or [], subject)
    key_id, key, secret_sha256 = auth.generate()
    info = await q.insert_key(conn, tenant, key_id, scope, secret_sha256, label, subject, stored, lines)
    return NewKey(id=info.id, tenant=info.tenant, scope=info.scope, label=info.label, created_at=info.created_at,
                  key=key, subject=info.subject, grants=info.grants)


async def issue_key_checked(conn: q.Conn, tenant: str | None, scope: str, label: str, subject: str | None = None,
                            grants: list[Grant] | None = None) -> NewKey:
    """A key for `tenant`, or (None) for the store's only tenant."""
    if tenant is None:
        names = await q.tenant_names(conn, 6)
        if len(names) != 1:
            listed = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            raise Unprocessable(f"This store has {'no tenant' if not names else 'several tenants (' + listed + ')'}: "
                                "name one with --tenant." + ("" if names else
                                                             " Create one with `recall-server tenants create NAME`."))
        tenant = names[0]
    elif not await q.tenant_exists(conn, tenant):
        raise NotFound(f"No tenant named {tenant!r}; create it with `recall-server tenants create {tenant}`.")
    return await issue_key(conn, tenant, scope, label, subject, grants)


async def set_grants(conn: q.Conn, key_id: str, tenant: str | None, grants: list[Grant]) -> KeyView:
    """Replace a live key's grants (in that tenant, when one is given); 404 when there is no such key. The
    caller waits out tenancy.after_revoking once this has committed."""
    found = await q.key_subject(conn, tenant, key_id)
    if found is None:
        raise NotFound(f"No live API key with ID {key_id} exists.", id=key_id)
    stored, lines = _grants(grants, found[0])
    changed = await q.set_grants(conn, tenant, key_id, stored, lines)
    if changed is None:  # revoked meanwhile
        raise NotFound(f"No live API key with ID {key_id} exists.", id=key_id)
    return changed


async def list_keys(conn: q.Conn, tenant: str | None) -> list[KeyView]:
    return await q.list_keys(conn, tenant)


async def revoke_key(conn: q.Conn, key_id: str) -> KeyView | None:
    """Revoke on an owner connection outside a transaction, and return once every server process refuses it."""
    revoked = await q.revoke_key(conn, None, key_id)
    await tenancy.after_revoking()
    return revoked


async def sweep(conn: q.Conn, batch: int, trace_ttl: float, delivery_ttl: float, audit_ttl: float) -> int:
    """Purge expired objects in every tenant until a batch comes back short; each batch is its own
    transaction (recall_sweep runs as the owner). Trace reads older than `trace_ttl` seconds and webhook
    deliveries older than `delivery_ttl` go too, audited requests past their tenant's audit retention
    (`audit_ttl` seconds where it sets none), and so do the LangGraph checkpoints past their tenant's
    retention and the pending writes whose checkpoint is gone. Returns how many objects it purged."""
    purged = 0
    while (done := await q.sweep(conn, batch)) == batch:
        purged += done
    while await q.purge_retained(conn, trace_ttl, delivery_ttl, batch * 10) == batch * 10:
        pass
    while await q.purge_audit(conn, audit_ttl, batch * 10) >= batch * 10:
        pass
    while await q.checkpoint_retention(conn, batch) > 0:  # each tenant's checkpoint retention policy
        pass
    while await q.checkpoint_orphans(conn, batch) == batch:  # pending writes whose checkpoint is gone
        pass
    return purged + done


async def set_checkpoint_retention(conn: q.Conn, tenant: str, keep: int | None, max_age: float | None) -> None:
    """A tenant's LangGraph checkpoint retention, applied by the sweep: keep the newest `keep` of each
    (thread, namespace), drop those older than `max_age` seconds but the newest (None: no such rule)."""
    if not await q.set_checkpoint_retention(conn, tenant, keep, max_age):
        raise NotFound(f"No tenant named {tenant!r}.")


# What verify-erasure reads is the store's rows (tables, search columns, vectors, stored responses). What it
# cannot read, so never vouches for, the CLI prints after every check: bytes of an erased row outlive it there.
NOT_CHECKED = (
    "PostgreSQL's write-ahead log (WAL), and any WAL archive or replica fed from it",
    "table and index pages: old row versions and index entries stay in the data files until VACUUM reclaims "
    "their space and later writes reuse it",
    "backups and dumps taken before the erasure",
    "copies outside the store: an embedding provider the text was sent to, clients, logs",
)


async def verify_checkpoint_erasure(conn: q.Conn, tenant: str, thread_id: str) -> list[str]:
    """Where checkpoints of a deleted LangGraph thread could still be read (empty: erased)."""
    state = await q.checkpoint_thread_state(conn, tenant, thread_id)
    if state is State.MISSING:
        return [f"LangGraph thread {thread_id!r} never had checkpoints in tenant {tenant}"]
    findings = await q.checkpoint_erasure_findings(conn, tenant, thread_id)
    return findings if state is State.GONE else [f"LangGraph thread {thread_id!r} is live (not deleted)", *findings]


async def verify_erasure(conn: q.Conn, tenant: str, object_id: str) -> list[str]:
    """Where this ID's content could still be read (empty: erased). An ID still live says so."""
    state = await q.state(conn, tenant, object_id)
    if state is State.MISSING:
        return [f"{object_id} never existed in tenant {tenant}"]
    findings = sorted([*await q.erasure_findings(conn, tenant, object_id),
                       *await q.search_index_findings(conn, tenant, object_id),
                       *await q.message_findings(conn, tenant, object_id),
                       *[f for f, _ in await erasure_lineage(conn, tenant, object_id) if f]])
    return findings if state is State.GONE else [f"{object_id} is live (not deleted, not expired)", *findings]


async def erasure_lineage(conn: q.Conn, tenant: str, object_id: str) -> list[tuple[str | None, str]]:
    """Each memory version learned from what erasing this ID erased: (a finding, when its state is not what
    the policy applied says, else None; its state as verify-erasure reports it)."""
    out: list[tuple[str | None, str]] = []
    for d in await q.derived_memories(conn, tenant, object_id):
        where = f"lineage: {d.memory_id}, learned from it"
        if d.policy is None:
            finding = f"memory_sources: {d.memory_id} cites it, and its lineage was never followed"
            out.append((finding, f"{where}: not followed"))
        elif d.policy == "erase":
            out.append((None if d.erased else f"memories: {d.memory_id}, learned from it, still has content "
                        "(lineage policy erase)", f"{where}: {'erased' if d.erased else 'NOT erased'} (policy erase)"))
        elif d.erased:
            out.append((None, f"{where}: erased since (policy {d.policy})"))
        elif d.policy == "flag":
            out.append((None if d.flagged else f"memories: {d.memory_id}, learned from it, is not flagged",
                        f"{where}: kept, {'flagged' if d.flagged else 'NOT flagged'} source_erased (policy flag)"))
        else:
            out.append((None, f"{where}: kept as it is (policy keep)"))
    return out


async def set_lineage_policy(conn: q.Conn, tenant: str, policy: str) -> None:
    """What erasing a source does to the memories learned from it: erase, flag or keep."""
    if not await q.set_lineage_policy(conn, tenant, policy):
        raise NotFound(f"No tenant named {tenant!r}.")


async def issue_hook(conn: q.Conn, tenant: str, source: str, label: str) -> NewHook:
    """Create a webhook endpoint for a tenant (the admin route does this too, bound to its own tenant);
    the returned NewHook is the only copy of its secret."""
    hook_id, secret = ids.new_hook_id(), auth.new_hook_secret()
    ipad, opad = auth.padded_keys(secret)
    info = await q.insert_hook(conn, tenant, hook_id, source, ipad, opad, label)
    return NewHook(id=info.id, tenant=info.tenant, source=info.source, label=info.label, url=info.url,
                   created_at=info.created_at, secret=secret)


async def issue_hook_checked(conn: q.Conn, tenant: str, source: str, label: str) -> NewHook:
    if not await q.tenant_exists(conn, tenant):
        raise NotFound(f"No tenant named {tenant!r}; create it with `recall-server tenants create {tenant}`.")
    return await issue_hook(conn, tenant, source, label)


async def list_hooks(conn: q.Conn, tenant: str | None) -> list[HookView]:
    return await q.list_hooks(conn, tenant)


async def revoke_hook(conn: q.Conn, hook_id: str) -> HookView | None:
    return await q.revoke_hook(conn, None, hook_id)
