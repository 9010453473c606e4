"""Apply schema.sql idempotently, under an advisory lock so concurrent starters take turns."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import asyncpg

_LOCK_KEY = 0x7265_6361_6C6C  # "recall": serialises concurrent migrations
ATTEMPTS = 5


def schema_path() -> Path:
    """schema.sql: packaged next to the code in a wheel, at the repository root in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "schema.sql", here.parent / "schema.sql"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError("schema.sql not found next to the package or at the repository root")


async def migrate(dsn: str) -> int:
    """Apply the schema and make sure a cursor secret exists; return the schema version.

    On a live store the migration's DDL (schema.sql re-runs its GRANTs, ALTERs and policies) can
    deadlock with a transaction that holds a lock it needs: seen with autovacuum's ANALYZE of a
    table whose catalog row a GRANT had just updated. PostgreSQL then undoes one of the two; when it
    is the migration, nothing of it was applied, and it is tried again (up to ATTEMPTS times) rather
    than failing the server's start.
    """
    sql = schema_path().read_text()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return await _apply(dsn, sql)
        except asyncpg.DeadlockDetectedError:
            if attempt == ATTEMPTS:
                raise
            await asyncio.sleep(0.1 * attempt)
    raise AssertionError("unreachable")


async def _apply(dsn: str, sql: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
            await conn.execute(sql)
            await conn.execute(
                "INSERT INTO server_secrets (name, value) VALUES ('cursor', $1) ON CONFLICT DO NOTHING",
                secrets.token_bytes(32),
            )
            return await conn.fetchval("SELECT max(version) FROM schema_migrations")
    finally:
        await conn.close()
