"""Idempotency-Key: a write's first outcome is recorded in the write's own transaction and replayed
to every retry of the same request; the same key on another request is a 422, and a retry while
the first still runs is a 409 (it never runs twice). Each API key's Idempotency-Keys are its own."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable

import msgspec

from recall_server.db import queries as q
from recall_server.errors import Conflict, Unprocessable, gone
from recall_server.ids import State
from recall_server.rows import Outcome, Stored


def fingerprint(method: str, path: str, request: msgspec.Struct) -> bytes:
    """What a key is bound to: the route and the decoded body."""
    return hashlib.sha256(f"{method} {path}\0".encode() + msgspec.json.encode(request)).digest()


async def once(conn: q.Conn, tenant: str, key: str | None, request: bytes, keep_seconds: int,
               operation: Callable[[], Awaitable[Outcome]],
               render: Callable[[str], Awaitable[bytes]], api_key_id: str, has_grants: bool) -> Outcome:
    """Run `operation` (in the caller's transaction) unless `key` already has an outcome; record it if so.

    `request` is the fingerprint; `render(object_id)` renders an object's view again for a replay
    whose stored body an erasure scrubbed. The slot is the sending API key's (`api_key_id`): another key of
    the tenant, whatever its scope or grants, never replays, is blocked by, or learns of what this one wrote.
    A key without grants also replays what was stored before slots were per key (`has_grants` False).
    """
    if key is None:
        return await operation()
    if not await q.idempotency_lock(conn, tenant, api_key_id, key):
        raise Conflict("A request with this Idempotency-Key is still in flight; retry shortly.",
                       headers={"Retry-After": "1"})
    stored = await q.idempotency_get(conn, tenant, api_key_id, key, not has_grants)
    if stored is not None:
        if stored.fingerprint != request:
            raise Unprocessable("This Idempotency-Key was used for a different request.", idempotency_key=key)
        return await _replay(conn, tenant, stored.outcome, render)
    outcome = await operation()
    await q.idempotency_put(conn, tenant, api_key_id, key, Stored(request, outcome), keep_seconds)
    return outcome


async def _replay(conn: q.Conn, tenant: str, outcome: Outcome,
                  render: Callable[[str], Awaitable[bytes]]) -> Outcome:
    """The stored outcome; if an erasure dropped it, what still exists is rendered again (or 410).

    Never the old content of something deleted or expired since: that is 410, sweep or no sweep.
    """
    if await q.state(conn, tenant, outcome.object_id) is not State.LIVE:
        raise gone(outcome.object_id)
    body = outcome.body
    if body is None and outcome.event_seq is not None:
        event = await q.event_at(conn, tenant, outcome.object_id, outcome.event_seq)
        if event is None:
            raise gone(outcome.object_id)
        body = msgspec.json.encode(event)
    elif body is None:
        body = await render(outcome.object_id)
    return msgspec.structs.replace(outcome, body=body, replayed=True)
