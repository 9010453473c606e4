"""Apply schema.sql idempotently, under an advisory lock so concurrent starters take turns."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from pathlib import Path

import asyncpg

from recall_server.db import citus as citus_db
from recall_server.db.pool import is_sharded

_LOCK_KEY = 0x7265_6361_6C6C  # "recall": serialises concurrent migrations
ATTEMPTS = 5


def schema_path() -> Path:
    """schema.sql: packaged next to the code in a wheel, at the repository root in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "schema.sql", here.parent / "schema.sql"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError("schema.sql not found next to the package or at the repository root")


async def migrate(dsn: str, *, again: bool = False, citus: bool = False) -> int:
    """Apply the schema and make sure a cursor secret exists; return the schema version.

    A store that already has this exact schema.sql applied (its SHA-256 in schema_applied) is left
    alone unless `again`: a server start then takes no lock at all. `recall-server migrate` applies
    it again (to repair a store someone changed by hand).

    On a live store the migration's DDL (schema.sql re-runs its GRANTs, ALTERs and policies) can
    deadlock with a transaction that holds a lock it needs: seen with autovacuum's ANALYZE of a
    table whose catalog row a GRANT had just updated. PostgreSQL then undoes one of the two; when it
    is the migration, nothing of it was applied, and it is tried again (up to ATTEMPTS times) rather
    than failing the server's start.

    On a Citus coordinator the schema is sent one statement at a time (citus.statements); with `citus`
    the tables and functions are then distributed by tenant_id (citus.distribute), and citus.sql defines
    what differs there, in the same transaction; a second run finds them distributed and leaves them.
    """
    sql = schema_path().read_text()
    digest = hashlib.sha256(sql.encode()).digest()
    conn = await asyncpg.connect(dsn)
    try:
        if not again and not citus and (version := await _applied(conn, digest)) is not None:
            return version
        on_citus = await is_sharded(conn)
        if citus and not on_citus:
            raise RuntimeError("--citus: the citus extension is not installed in this database")
        for attempt in range(1, ATTEMPTS):
            try:
                return await _apply(conn, sql, digest, on_citus, citus)
            except asyncpg.DeadlockDetectedError:  # the transaction is undone; the connection stays usable
                await asyncio.sleep(0.1 * attempt)
        return await _apply(conn, sql, digest, on_citus, citus)
    finally:
        await conn.close()


async def _applied(conn: asyncpg.Connection, digest: bytes) -> int | None:
    """The schema version, if this schema.sql (by its SHA-256) was applied to the store; else None."""
    if await conn.fetchval("SELECT to_regclass('schema_applied')") is None:
        return None
    return await conn.fetchval("SELECT (SELECT max(version) FROM schema_migrations)"
                               " FROM schema_applied WHERE sha256 = $1", digest)


async def _apply(conn: asyncpg.Connection, sql: str, digest: bytes, on_citus: bool = False,
                 distribute: bool = False) -> int:
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        if on_citus:
            await citus_db.prepare(conn)
            for statement in citus_db.statements(sql):
                await conn.execute(statement)
            if distribute:
                await citus_db.distribute(conn)
            for statement in citus_db.statements(citus_db.definitions()):
                await conn.execute(statement)
        else:
            await conn.execute(sql)
        await conn.execute(
            "INSERT INTO server_secrets (name, value) VALUES ('cursor', $1) ON CONFLICT DO NOTHING",
            secrets.token_bytes(32),
        )
        await conn.execute("INSERT INTO schema_applied (sha256) VALUES ($1) ON CONFLICT DO NOTHING", digest)
        return await conn.fetchval("SELECT max(version) FROM schema_migrations")
