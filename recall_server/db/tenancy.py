"""The one place where an API key becomes a bound tenant: the key check, the binding, 401 and 403.

A request's tenant comes from its key, here, and from nowhere else (never a body or a parameter):

- A read is one statement. `keyed(read)` puts the key check in front of it: `recall_authenticate`
  (SECURITY DEFINER, so recall_app cannot read other tenants' keys) finds the key's tenant and access,
  and `set_config('app.tenant_id', ..., true)` binds the tenant for row-level security, and
  `app.access` the access: the key's scope, then its grants, one per line (schema.sql's
  recall_grants_cover), which the policies of the tables whose rows have a namespace apply, so a key
  with grants sees and writes only what they cover (docs/tenancy.md#grants). The read then runs as a
  LATERAL subquery for `auth.tenant`, taking its own parameters from $3 (the key is $1 and $2).
  OFFSET 0 keeps the planner from flattening the read into a join, so it is a parameterised nested
  loop over the one auth row and runs after set_config. Were it ever evaluated first, RLS would show
  it nothing (no tenant is set outside a transaction): a false miss, never another tenant's row, and
  every read also filters on `auth.tenant` explicitly.
- A write is a transaction opened by `session()`: the same check and binding first, then the scope.
  The hot writes (plain triggers and notes; those of one key that arrive together share one,
  coalesce.py) first try one statement, `keyed_write(write, scope)`: the key check, the binding
  and the scope gate as CTEs in front of a data-modifying CTE `done` that reads its tenant from
  `gate.tenant` (no row, so no write, when the key lacks the scope). It is its own transaction; a
  write it did not make falls back to the transaction above, which tells the cases apart (401,
  403, 404, 409, 410, 422).
- A webhook delivery carries no key: `hook_session()` binds the tenant of the hook its URL names,
  from `recall_hook_verify` (SECURITY DEFINER, like `recall_authenticate`), once the HMAC of the
  body that function computes matches X-Hub-Signature-256 (compared in constant time). 404 for an
  unknown or revoked hook, 401 for a wrong signature; either way the transaction writes nothing.

Each statement is a `Keyed`: its texts for one node (`single`, and `bound` behind BOUND) and for a
Citus coordinator (`sharded`), built once from the same parts. On a coordinator (the pool's connections
say so: pool.ShardedConnection) set_config would bind the coordinator alone: the shard queries run on
the workers, where row-level security is checked. There the key check is a statement of its own, and
the tenant is bound with `SET LOCAL app.tenant_id` and `citus.propagate_set_commands = 'local'` in the
request's transaction, which Citus repeats on every worker connection of the transaction; the read or
write then runs with the tenant as $1 where the one-node form names `auth.tenant` or `gate.tenant`.
A write Citus cannot plan as one statement runs as the steps its own module gives (`steps`), or not at
all (`sharded=False`: the caller's transaction writes it). The section at the end of this file.

The binding is transaction-local (`is_local`, SET LOCAL), so a pooled connection never carries one
request's tenant into the next.

A key this process checked within the last auth.REVOCATION_WINDOW (its Credential's KeyCache says
so) skips the lookup: the same statements run behind BOUND, which binds the tenant and scope that
check found ($1, $2). A revoke, or a change of grants, returns only after that window
(`after_revoking`), so it holds from the next request on, in every process.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import asyncpg

from recall_server.auth import REVOCATION_WINDOW, SCOPES, Credential
from recall_server.db.pool import Database
from recall_server.errors import Forbidden, bad_signature, unknown_hook, unknown_key

KEY_CHECK = """SELECT set_config('app.tenant_id', a.tenant_id, true) AS tenant,
                      set_config('app.access', a.scope, true) AS scope
               FROM recall_authenticate($1, $2) a"""
BOUND = """SELECT set_config('app.tenant_id', $1::text, true) AS tenant, set_config('app.access', $2::text, true) AS scope"""

# How a keyed read names its tenant (and a keyed write, `gate.tenant`): the key check's row on one node, $1 on a
# Citus coordinator, where the tenant is bound before the statement runs. A read compares every table's
# tenant_id with it (never one table's with another's): Citus routes a statement to the tenant's shard only
# when each table's tenant is a value, and sends it to every shard otherwise (~150 ms).
TENANT = "auth.tenant"
GATE_TENANT = "gate.tenant"
SHARD_TENANT = "$1::text"

# A write's steps on a Citus coordinator, once the tenant is bound: (connection, tenant, scope, the statement's
# own parameters) -> the row `done` would have returned, or None when it wrote nothing.
Steps = Callable[..., Awaitable[Any]]


class Keyed(NamedTuple):
    """A statement behind the key check, in each form a store runs it; built once by keyed() or keyed_write()."""

    single: str  # one node: the key check, the binding and the statement in one
    bound: str  # one node, for a key this process checked within the window: behind BOUND
    sharded: str | None  # a Citus coordinator, the tenant bound: the tenant $1, the scope $2; None: steps or none
    scopes: frozenset[str] = frozenset()  # a write: the scopes that may write (empty: a read)
    steps: Steps | None = None  # a write Citus cannot plan as one statement: its steps there


def _keyed(auth: str, read: str) -> str:
    return f"""
        WITH auth AS MATERIALIZED ({auth})
        SELECT auth.tenant AS bound_tenant, auth.scope AS bound_scope, v.*
          FROM auth LEFT JOIN LATERAL ({read} OFFSET 0) v ON true
    """


# The key check alone: verify() and session().
CHECK = Keyed(KEY_CHECK, BOUND, None)


async def _run(conn: asyncpg.Connection, cred: Credential, stmt: Keyed, args: tuple[object, ...],
               many: bool = False) -> list[Any]:
    """A statement behind the key check, or behind BOUND for a key the process checked within the
    window. Its rows start with the tenant and the scope; a check that found the key is remembered."""
    if conn.sharded:
        return await _run_sharded(conn, cred, stmt, args)
    run = conn.fetch if many else conn.fetchrow
    if cred.keys is not None and (bound := cred.keys.get(cred)) is not None:
        cred.access = bound[1]
        found = await run(stmt.bound, *bound, *args)
        return found if many else [found]
    sent = cred.keys.clock() if cred.keys is not None else 0.0
    found = await run(stmt.single, cred.key_id, cred.secret_sha256, *args)
    rows = found if many else [] if found is None else [found]
    if not rows:
        raise unknown_key()
    cred.access = rows[0][1]
    if cred.keys is not None:
        cred.keys.put(cred, sent, rows[0][0], rows[0][1])
    return rows


async def verify(db: Database, cred: Credential) -> None:
    """401 unless the key is live; a key this process checked within the window passes at once. For the
    requests whose input costs work before their statement runs (a body to read and decode, a pattern
    to compile): a forged key is refused before any of it, and the statement that follows binds the
    tenant this check remembered."""
    if cred.keys is not None and cred.keys.get(cred) is not None:
        return
    async with db.connection() as conn:
        await _run(conn, cred, CHECK, ())


async def after_revoking() -> None:
    """Wait out the window in which a process may still rely on a check made before a revocation that
    has just committed (auth.KeyCache): after this, every process refuses the key."""
    await asyncio.sleep(REVOCATION_WINDOW)


def keyed(read: str, sharded: str | None = None) -> Keyed:
    """`read` (for tenant `auth.tenant`, parameters from $3) as one statement behind the key check.

    The row it returns starts with the key's tenant and scope; the read's own columns follow, all NULL
    when it found nothing (so a read's first column must never be NULL on a row it found). `sharded`:
    the read as a coordinator runs it, when it differs (built by its module from the same parts).

    No OFFSET 0 on a coordinator: it makes the read a subplan Citus runs on every shard, not on the tenant's.
    """
    on_shards = (sharded or read).replace(TENANT, SHARD_TENANT)
    return Keyed(_keyed(KEY_CHECK, read), _keyed(BOUND, read),
                 f"SELECT $1::text AS bound_tenant, $2::text AS bound_scope, v.* FROM ({on_shards}) v")


async def fetch(conn: asyncpg.Connection, cred: Credential, stmt: Keyed, *args: object
                ) -> tuple[str, asyncpg.Record | None]:
    """Run a `keyed` read: (the key's tenant, the row or None when the read found none). 401 for a bad key."""
    row = (await _run(conn, cred, stmt, args))[0]
    return row[0], None if row[2] is None else row


async def fetch_many(conn: asyncpg.Connection, cred: Credential, stmt: Keyed, *args: object
                     ) -> tuple[str, list[asyncpg.Record]]:
    """Run a `keyed` read of several rows: (the key's tenant, the rows it found, maybe none). 401 for a bad key."""
    rows = await _run(conn, cred, stmt, args, many=True)
    return rows[0][0], [row for row in rows if row[2] is not None]


def _require_scope(access: str, needed: str) -> None:
    """403 unless the key's scope (the first line of its access) includes the one the operation needs."""
    granted, _, grants = access.partition("\n")
    if SCOPES[granted] < SCOPES[needed]:
        raise Forbidden(f"This key has {granted} scope; this operation needs {needed}.")
    if needed == "admin" and grants:  # it could make a key reaching more than its own grants
        raise Forbidden("This key has grants; administering keys and webhooks needs an admin key without grants.")


def _keyed_write(auth: str, allowed: str, write: str) -> str:
    return f"""
        WITH auth AS MATERIALIZED ({auth}),
        gate AS MATERIALIZED (SELECT tenant FROM auth WHERE split_part(scope, E'\\n', 1) IN ({allowed})),
        {write}
        SELECT auth.tenant AS bound_tenant, auth.scope AS bound_scope, d.* FROM auth LEFT JOIN done d ON true
    """


def keyed_write(write: str, scope: str, *, steps: Steps | None = None, sharded: bool = True) -> Keyed:
    """`write` (CTEs ending in one named `done`, for tenant `gate.tenant`, parameters from $3) as one
    statement behind the key check, writing only for a key with `scope`. Its row: the key's tenant, the
    key's scope, then `done`'s columns (all NULL when it wrote nothing).

    On a Citus coordinator: the same CTEs with the tenant as $1; or `steps` in their place, when Citus cannot
    plan the statement; or, `sharded=False`, nothing (the caller's transaction writes it, as after a write the
    statement did not make)."""
    scopes = frozenset(name for name, rank in SCOPES.items() if rank >= SCOPES[scope])
    allowed = ", ".join(f"'{name}'" for name in SCOPES if name in scopes)
    on_shards = None if steps is not None or not sharded else (
        f"WITH gate AS (SELECT $1::text AS tenant), {write.replace(GATE_TENANT, SHARD_TENANT)}"
        " SELECT $1::text AS bound_tenant, $2::text AS bound_scope, d.* FROM done d")
    return Keyed(_keyed_write(KEY_CHECK, allowed, write), _keyed_write(BOUND, allowed, write), on_shards,
                 scopes, steps)


async def write_many(conn: asyncpg.Connection, cred: Credential, scope: str, stmt: Keyed, *args: object
                     ) -> tuple[str, list[asyncpg.Record]]:
    """Run a `keyed_write`: (the key's tenant, the rows its `done` wrote, maybe none). 401 bad key, 403 scope."""
    rows = await _run(conn, cred, stmt, args, many=True)
    _require_scope(rows[0][1], scope)
    return rows[0][0], [row for row in rows if row[2] is not None]


@asynccontextmanager
async def session(db: Database, cred: Credential, scope: str) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    """A transaction bound to the key's tenant: (connection, tenant). 401 unknown/revoked key, 403 scope."""
    async with db.connection() as conn, conn.transaction():
        tenant, granted = (await _run(conn, cred, CHECK, ()))[0]
        _require_scope(granted, scope)
        yield conn, tenant


@asynccontextmanager
async def key_session(db: Database, tenant: str, access: str) -> AsyncIterator[asyncpg.Connection]:
    """A transaction bound to a tenant and the access of one of its keys, found by the caller from the key's
    ID (the extraction worker, writing for the key that appended the messages): its grants apply exactly as to
    that key's own requests."""
    async with db.connection() as conn, conn.transaction():
        if conn.sharded:
            await conn.execute(_sharded_binding(tenant, access))
        else:
            await conn.fetchrow(BOUND, tenant, access)
        yield conn


HOOK_CHECK = """SELECT set_config('app.tenant_id', h.tenant_id, true) AS tenant, h.source, h.mac
                FROM recall_hook_verify($1, $2) h"""


@asynccontextmanager
async def hook_session(db: Database, hook_id: str, source: str, body: bytes, signature: bytes
                       ) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
    """A transaction bound to the tenant of a live hook of `source` whose secret signed `body`: (connection,
    tenant). 404 unknown/revoked hook, 401 wrong signature."""
    async with db.connection() as conn, conn.transaction():
        found = await conn.fetchrow(HOOK_CHECK, hook_id, body)
        if found is None or found[1] != source:
            raise unknown_hook(hook_id)
        # constant time: how much of a forged signature is right must not show in the response time
        if not hmac.compare_digest(found[2], signature):
            raise bad_signature()
        if conn.sharded:
            await conn.execute(_sharded_binding(found[0]))
        yield conn, found[0]


# ---- Citus -------------------------------------------------------------------------------------

SHARDED_KEY_CHECK = "SELECT a.tenant_id, a.scope FROM recall_authenticate($1, $2) a"


def _literal(text: str) -> str:
    """A quoted SQL literal: SET takes no parameters (standard_conforming_strings, the default)."""
    return "'" + text.replace("'", "''") + "'"


def _sharded_binding(tenant: str, access: str | None = None) -> str:
    """The tenant (and the key's access: its scope, then its grants) bound for the transaction, on the
    coordinator and on each worker connection it opens."""
    bind = f"SET LOCAL citus.propagate_set_commands = 'local'; SET LOCAL app.tenant_id = {_literal(tenant)}"
    return bind if access is None else f"{bind}; SET LOCAL app.access = {_literal(access)}"


async def _run_sharded(conn: asyncpg.Connection, cred: Credential, stmt: Keyed, args: tuple[object, ...]
                       ) -> list[Any]:
    """_run on a Citus coordinator: the key check (unless remembered), then the binding, then the statement
    (or its steps), in one transaction (the caller's, if it has one). Rows as _run's: the tenant and scope
    first, and a row of them alone when the statement found or wrote nothing."""
    bound = cred.keys.get(cred) if cred.keys is not None else None
    if bound is None:
        sent = cred.keys.clock() if cred.keys is not None else 0.0
        found = await conn.fetchrow(SHARDED_KEY_CHECK, cred.key_id, cred.secret_sha256)
        if found is None:
            raise unknown_key()
        bound = (found[0], found[1])
        if cred.keys is not None:
            cred.keys.put(cred, sent, *bound)
    tenant, scope = bound
    cred.access = scope
    if stmt is CHECK:
        if conn.is_in_transaction():
            await conn.execute(_sharded_binding(tenant, scope))
        return [bound]
    if stmt.scopes and (scope.partition("\n")[0] not in stmt.scopes or (stmt.sharded is None and stmt.steps is None)):
        return [(tenant, scope, None)]  # write_many answers 403; or the caller's transaction writes it
    async with conn.transaction():
        await conn.execute(_sharded_binding(tenant, scope))
        if stmt.steps is not None:
            row = await stmt.steps(conn, tenant, scope, *args)
            rows = [] if row is None else [row]
        else:
            rows = await conn.fetch(stmt.sharded, tenant, scope, *args)
    return rows if rows else [(tenant, scope, None)]
