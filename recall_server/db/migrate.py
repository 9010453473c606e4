"""Apply schema.sql idempotently, under an advisory lock so concurrent starters take turns."""

from __future__ import annotations

import secrets
from pathlib import Path

import asyncpg

_LOCK_KEY = 0x7265_6361_6C6C  # "recall": serialises concurrent migrations


def schema_path() -> Path:
    """schema.sql: packaged next to the code in a wheel, at the repository root in a checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "schema.sql", here.parent / "schema.sql"):
        if candidate.exists():
            return candidate
    raise FileNotFoundError("schema.sql not found next to the package or at the repository root")


async def migrate(dsn: str) -> int:
    """Apply the schema and make sure a cursor secret exists; return the schema version."""
    sql = schema_path().read_text()
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
