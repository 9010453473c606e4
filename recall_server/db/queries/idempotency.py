"""Idempotency-Key records: the per-key lock, the stored response, recording one. A slot is (tenant, API key
ID, Idempotency-Key): each API key's are its own."""

from __future__ import annotations

from recall_server import ids
from recall_server.db.queries._common import Conn
from recall_server.rows import Outcome, Stored

async def idempotency_lock(conn: Conn, tenant: str, api_key_id: str, key: str) -> bool:
    """Hold the slot for this transaction; False when another request holds it (still in flight)."""
    return await conn.fetchval(
        "SELECT pg_try_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 7))", tenant, api_key_id, key
    )


async def idempotency_get(conn: Conn, tenant: str, api_key_id: str, key: str, legacy: bool) -> Stored | None:
    """The slot's stored response. `legacy`: for a key without grants, a response stored before slots were
    per key (api_key_id '', when they were the tenant's; schema.sql) if the key has none of its own."""
    row = await conn.fetchrow(
        """
        SELECT request_hash, status, body, location, object_id, event_seq FROM idempotency_keys
        WHERE tenant_id = $1 AND api_key_id IN ($2, CASE WHEN $4 THEN '' ELSE $2 END) AND key = $3
          AND expires_at > now()
        ORDER BY api_key_id = $2 DESC LIMIT 1
        """,
        tenant, api_key_id, key, legacy,
    )
    if row is None:
        return None
    return Stored(row[0], Outcome(status=row[1], body=row[2], location=row[3], object_id=row[4], event_seq=row[5]))


async def idempotency_put(conn: Conn, tenant: str, api_key_id: str, key: str, stored: Stored,
                          keep_seconds: int) -> None:
    done = stored.outcome
    await conn.execute(
        """
        INSERT INTO idempotency_keys (tenant_id, api_key_id, key, request_hash, status, body, location, object_id,
                                      event_seq, expires_at, shows)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, clock_timestamp() + make_interval(secs => $10), $11)
        ON CONFLICT (tenant_id, api_key_id, key) DO UPDATE SET
            request_hash = excluded.request_hash, status = excluded.status, body = excluded.body,
            location = excluded.location, object_id = excluded.object_id, event_seq = excluded.event_seq,
            created_at = excluded.created_at, expires_at = excluded.expires_at, shows = excluded.shows
        """,
        tenant, api_key_id, key, stored.fingerprint, done.status, done.body, done.location, done.object_id,
        done.event_seq, keep_seconds, _shows(done),
    )


def _shows(done: Outcome) -> list[str]:
    """The IDs erasing any of which drops the stored response: those its body shows and the object the write
    was about (a note's or a retraction's body names no thread, yet echoes what was written on it)."""
    about = [done.object_id] if ids.kind_of(done.object_id) else []
    return sorted({*ids.shown_in(done.body or b""), *about})
