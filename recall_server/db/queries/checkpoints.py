"""LangGraph checkpoints: threads and their tombstones, checkpoints, channel values, pending writes, pruning."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import asyncpg

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed, keyed_write
from recall_server.errors import Forbidden
from recall_server.ids import State

# A channel value or a pending write larger than this is not inlined in a tuple: it is read from its own link
# (GET /checkpoints/value, GET /checkpoints/writes/value, with ETag and Range), as a payload is.
VALUE_INLINE_MAX = 65536


def _inline(blob: str) -> str:
    """A stored value's bytes if they are inlined in a tuple (NULL: read from its link)."""
    return f"CASE WHEN octet_length({blob}) <= {VALUE_INLINE_MAX} THEN {blob} END"


# The columns of a checkpoint tuple as read: the checkpoint, the values of the channel versions it names, and
# the pending writes of the step after it (in LangGraph's writes_sort_key order: task_path, task_id, idx);
# of each value and write, its bytes when inlined (_inline) and its size. `named`: each value and write a row of
# the type recall_checkpoint_value or recall_checkpoint_write (citus.sql): a Citus shard query passes its rows to
# the coordinator as text, and an anonymous ROW(...) has no input function there.
def _tuple_columns(named: bool) -> str:
    value, write = ("::recall_checkpoint_value", "::recall_checkpoint_write") if named else ("", "")
    return f"""
    c.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.type, c.checkpoint, c.metadata::text AS metadata,
    c.created_at,
    ARRAY(SELECT ROW(b.channel, b.type, {_inline("b.blob")}, octet_length(b.blob), b.version){value}
            FROM jsonb_each_text(c.channel_versions) v
            JOIN checkpoint_blobs b ON b.tenant_id = auth.tenant AND b.thread_id = c.thread_id
                 AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key AND b.version = v.value
           ORDER BY b.channel) AS blobs,
    ARRAY(SELECT ROW(w.task_id, w.channel, w.type, {_inline("w.blob")}, w.task_path, w.idx, octet_length(w.blob)){write}
            FROM checkpoint_writes w
           WHERE w.tenant_id = auth.tenant AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
             AND w.checkpoint_id = c.checkpoint_id
           ORDER BY w.task_path, w.task_id, w.idx) AS writes
"""


def _both(read: str) -> tenancy.Keyed:
    """A checkpoint read, its values and writes as named rows on a Citus coordinator."""
    return keyed(read.format(columns=_tuple_columns(False)), read.format(columns=_tuple_columns(True)))


# One checkpoint of a thread (the newest of the namespace when $5 is NULL), and whether the thread is erased.
_TUPLE = _both("""
    SELECT t.deleted_at IS NOT NULL AS gone, x.* FROM checkpoint_threads t
      LEFT JOIN LATERAL (
        SELECT {columns} FROM checkpoints c
         WHERE c.tenant_id = auth.tenant AND c.thread_id = t.thread_id AND c.checkpoint_ns = $4
           AND ($5::text IS NULL OR c.checkpoint_id = $5)
         ORDER BY c.checkpoint_id DESC LIMIT 1) x ON true
     WHERE t.tenant_id = auth.tenant AND t.thread_id = $3
""")


async def fetch_checkpoint(conn: Conn, cred: Credential, thread_id: str, checkpoint_ns: str,
                           checkpoint_id: str | None) -> tuple[str, State, asyncpg.Record | None]:
    """The key's tenant, the thread's state, and the checkpoint (None when the thread has no such one)."""
    tenant, row = await tenancy.fetch(conn, cred, _TUPLE, thread_id, checkpoint_ns, checkpoint_id)
    if row is None:
        return tenant, State.MISSING, None
    return tenant, State.of(row["gone"]), row if row["checkpoint_id"] is not None else None


# The bytes a tuple inlines: its checkpoint and its inlined values and writes (octet_length reads a stored
# value's size from its header, without reading the value).
_INLINED = f"""octet_length(c.checkpoint)
    + (SELECT coalesce(sum(octet_length(b.blob)), 0) FROM jsonb_each_text(c.channel_versions) v
         JOIN checkpoint_blobs b ON b.tenant_id = auth.tenant AND b.thread_id = c.thread_id
              AND b.checkpoint_ns = c.checkpoint_ns AND b.channel = v.key AND b.version = v.value
        WHERE octet_length(b.blob) <= {VALUE_INLINE_MAX})
    + (SELECT coalesce(sum(octet_length(w.blob)), 0) FROM checkpoint_writes w
        WHERE w.tenant_id = auth.tenant AND w.thread_id = c.thread_id AND w.checkpoint_ns = c.checkpoint_ns
          AND w.checkpoint_id = c.checkpoint_id AND octet_length(w.blob) <= {VALUE_INLINE_MAX})"""

# A page of checkpoints, newest first (checkpoint ID, then thread and namespace), below the cursor's position
# ($6-$8) and below `before` ($5); of one thread ($3, or every thread) and namespace ($4, or every namespace);
# whose metadata contains $9 (jsonb @>). At most $10 of them, and only while the bytes they inline before each
# are at most $11 (the page's byte budget), and the first two whatever their size: the page the pager cuts
# (cursor.within_budget, on each tuple's JSON, which its base64 makes larger than its bytes) then always has
# the row after its last, when there is one. The values of the rows left out are never read.
_LIST = _both("""
    SELECT {columns} FROM (
      SELECT c.*, sum(c.inlined) OVER w - c.inlined AS inlined_before, row_number() OVER w AS n FROM (
        SELECT c.*, """ + _INLINED + """ AS inlined FROM checkpoints c
         WHERE c.tenant_id = auth.tenant AND ($3::text IS NULL OR c.thread_id = $3)
           AND ($4::text IS NULL OR c.checkpoint_ns = $4) AND ($5::text IS NULL OR c.checkpoint_id < $5)
           AND ($6::text IS NULL OR (c.checkpoint_id, c.thread_id, c.checkpoint_ns) < ($6, $7, $8))
           AND ($9::jsonb IS NULL OR c.metadata @> $9::jsonb)
         ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC LIMIT $10) c
      WINDOW w AS (ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC
                   ROWS UNBOUNDED PRECEDING)) c
     WHERE c.inlined_before <= $11 OR c.n <= 2
     ORDER BY c.checkpoint_id DESC, c.thread_id DESC, c.checkpoint_ns DESC
""")
_LIST_GONE = keyed("""
    SELECT true AS gone FROM checkpoint_threads t
     WHERE t.tenant_id = auth.tenant AND t.thread_id = $3 AND t.deleted_at IS NOT NULL
""")


# One channel value of a thread's namespace, by version, and whether the thread is erased.
_VALUE = keyed("""
    SELECT t.deleted_at IS NOT NULL AS gone, b.blob, sha256(b.blob) AS sha256 FROM checkpoint_threads t
      LEFT JOIN checkpoint_blobs b ON b.tenant_id = auth.tenant AND b.thread_id = t.thread_id
                                  AND b.checkpoint_ns = $4 AND b.channel = $5 AND b.version = $6
     WHERE t.tenant_id = auth.tenant AND t.thread_id = $3
""")


async def fetch_channel_value(conn: Conn, cred: Credential, thread_id: str, checkpoint_ns: str, channel: str,
                              version: str) -> tuple[State, bytes | None, bytes]:
    """The thread's state, and the channel value's bytes (None when there is no such value) and SHA-256."""
    _, row = await tenancy.fetch(conn, cred, _VALUE, thread_id, checkpoint_ns, channel, version)
    if row is None:
        return State.MISSING, None, b""
    return State.of(row["gone"]), row["blob"], row["sha256"] or b""


# One pending write of a checkpoint, by task and idx, and whether the thread is erased.
_WRITE_VALUE = keyed("""
    SELECT t.deleted_at IS NOT NULL AS gone, w.blob, sha256(w.blob) AS sha256 FROM checkpoint_threads t
      LEFT JOIN checkpoint_writes w ON w.tenant_id = auth.tenant AND w.thread_id = t.thread_id
                                   AND w.checkpoint_ns = $4 AND w.checkpoint_id = $5 AND w.task_id = $6 AND w.idx = $7
     WHERE t.tenant_id = auth.tenant AND t.thread_id = $3
""")


async def fetch_write_value(conn: Conn, cred: Credential, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                            task_id: str, idx: int) -> tuple[State, bytes | None, bytes]:
    """The thread's state, and the pending write's bytes (None when there is no such write) and SHA-256."""
    _, row = await tenancy.fetch(conn, cred, _WRITE_VALUE, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
    if row is None:
        return State.MISSING, None, b""
    return State.of(row["gone"]), row["blob"], row["sha256"] or b""


async def list_checkpoints(conn: Conn, cred: Credential, thread_id: str | None, checkpoint_ns: str | None,
                           before: str | None, after: tuple[str, str, str] | None, metadata: str | None,
                           limit: int, budget: int) -> tuple[str, list[asyncpg.Record]]:
    """The key's tenant and a page of checkpoints, newest first, read up to about `budget` bytes (see _LIST)."""
    a = after or (None, None, None)
    return await tenancy.fetch_many(conn, cred, _LIST, thread_id, checkpoint_ns, before, *a, metadata, limit,
                                    budget)


async def checkpoint_thread_gone(conn: Conn, cred: Credential, thread_id: str) -> bool:
    """Whether the thread was erased (a list's 410)."""
    _, row = await tenancy.fetch(conn, cred, _LIST_GONE, thread_id)
    return row is not None


async def make_checkpoint_thread(conn: Conn, tenant: str, thread_id: str, like: str) -> None:
    """The thread's row, made if new, in the namespace of thread `like` (a write grant on it is checked: RG403);
    a row that exists already, seen or not, is left as it is (lock_checkpoint_threads then tells which)."""
    # The namespace of `like` read first: Citus refuses a subquery in an INSERT's VALUES (a rare write: a copy's).
    await conn.execute(
        "INSERT INTO checkpoint_threads (tenant_id, thread_id, namespace) VALUES ($1, $2, $3)"
        " ON CONFLICT (tenant_id, thread_id) DO NOTHING",
        tenant, thread_id, await _namespace_of(conn, tenant, like))


async def _namespace_of(conn: Conn, tenant: str, thread_id: str) -> str | None:
    return await conn.fetchval("SELECT namespace FROM checkpoint_threads WHERE tenant_id = $1 AND thread_id = $2",
                               tenant, thread_id)


async def lock_checkpoint_threads(conn: Conn, tenant: str, written: list[str], read: list[str] | None = None
                                  ) -> dict[str, State]:
    """Lock the threads' rows until the transaction ends (writers of a thread wait); each one's state, for those
    the key sees. The grant decision of every write that locks a thread (an erasure, a prune, deleting runs, a
    copy's target), as a put's _THREAD_SHARED makes it: a `written` thread the key's grants let it read but not
    write is refused with SQLSTATE RG403 (recall_granted, a 403 naming its namespace); one they do not cover at
    all is not seen (row-level security), as if it had none. `read` (a copy's source) is locked, not written."""
    rows = await conn.fetch(
        """SELECT thread_id, deleted_at IS NOT NULL AS gone FROM checkpoint_threads
            WHERE tenant_id = $1 AND thread_id = ANY ($2::text[] || $3::text[])
              AND (thread_id <> ALL ($2::text[]) OR recall_granted(namespace, true))
            ORDER BY thread_id FOR UPDATE""",
        tenant, written, read or [])
    return {r["thread_id"]: State.of(r["gone"]) for r in rows}


# The thread's row for a put or a task's writes: made if new, else locked FOR SHARE, so puts and writes of a
# thread run side by side while an erasure (FOR UPDATE) waits for them, and they for it (then they see its
# deleted_at). Empty only when another statement made the row after this one's snapshot: run it again.
# Also empty when a key with grants cannot see the row: another subject's thread (a 403, checkpoint_refused).
# A key with grants that sees the row only to read it is refused with SQLSTATE RG403 (recall_granted).
_THREAD_SHARED = """
    made_thread AS (INSERT INTO checkpoint_threads (tenant_id, thread_id, namespace) SELECT gate.tenant, $3, {ns}
                      FROM gate
                    ON CONFLICT (tenant_id, thread_id) DO NOTHING RETURNING tenant_id, deleted_at, namespace),
    old_thread AS (SELECT t.tenant_id, t.deleted_at, t.namespace FROM checkpoint_threads t, gate
                    WHERE t.tenant_id = gate.tenant AND t.thread_id = $3 AND recall_granted(t.namespace, true)
                    FOR SHARE OF t),
    th AS (SELECT * FROM made_thread UNION ALL SELECT * FROM old_thread),"""

async def _shared_thread_steps(conn: Conn, tenant: str, thread_id: str, namespace: str) -> Any:
    """_THREAD_SHARED on a Citus coordinator: the thread's row made if new (in `namespace`), else locked FOR SHARE
    when the key's grants cover it; its (deleted_at, namespace), or None when the key cannot see it."""
    made = await conn.fetchrow(
        "INSERT INTO checkpoint_threads (tenant_id, thread_id, namespace) VALUES ($1, $2, $3)"
        " ON CONFLICT (tenant_id, thread_id) DO NOTHING RETURNING deleted_at, namespace", tenant, thread_id, namespace)
    if made is not None:
        return made
    return await conn.fetchrow(
        "SELECT deleted_at, namespace FROM checkpoint_threads"
        " WHERE tenant_id = $1 AND thread_id = $2 AND recall_granted(namespace, true) FOR SHARE", tenant, thread_id)


async def _put_steps(conn: Conn, tenant: str, scope: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                     parent_id: Any, type_: str, checkpoint: bytes, channel_versions: str, metadata: str,
                     request_hash: bytes, channels: list[str], versions: list[str], types: list[str],
                     blobs: list[bytes], namespace: str) -> Any:
    """_PUT on a Citus coordinator (no data-modifying CTE in front of an INSERT): the thread's row, then unless it
    was erased each channel value new in it and the checkpoint unless its ID is taken; the row `done` returns."""
    thread = await _shared_thread_steps(conn, tenant, thread_id, namespace)
    if thread is None:
        return None
    stored, written = None, 0
    if thread["deleted_at"] is None:
        for channel, version, type_of, blob in zip(channels, versions, types, blobs, strict=True):
            written += await conn.fetchval(
                "INSERT INTO checkpoint_blobs (tenant_id, thread_id, checkpoint_ns, channel, version, type, blob,"
                " namespace) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING RETURNING 1",
                tenant, thread_id, checkpoint_ns, channel, version, type_of, blob, thread["namespace"]) or 0
        stored = await conn.fetchval(
            "INSERT INTO checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint,"
            " channel_versions, metadata, request_hash, namespace)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11)"
            " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id) DO NOTHING RETURNING request_hash",
            tenant, thread_id, checkpoint_ns, checkpoint_id, parent_id, type_, checkpoint, channel_versions, metadata,
            request_hash, thread["namespace"])
    return await conn.fetchrow(
        "SELECT $1::text AS bound_tenant, $2::text AS bound_scope, $3::boolean AS gone, $4::boolean AS made,"
        " coalesce($5::bytea, (SELECT request_hash FROM checkpoints WHERE tenant_id = $1 AND thread_id = $6"
        " AND checkpoint_ns = $7 AND checkpoint_id = $8)) AS stored, $9::bigint AS blobs",
        tenant, scope, thread["deleted_at"] is not None, stored is not None, stored, thread_id, checkpoint_ns,
        checkpoint_id, written)


async def _put_writes_steps(conn: Conn, tenant: str, scope: str, thread_id: str, checkpoint_ns: str,
                            checkpoint_id: str, task_id: str, task_path: str, idxs: list[int], channels: list[str],
                            types: list[str], blobs: list[bytes], namespace: str) -> Any:
    """_PUT_WRITES on a Citus coordinator: the thread's row, then unless it was erased each write once per
    (task, idx), a special channel's (idx < 0) replacing the stored one; the row `done` returns."""
    thread = await _shared_thread_steps(conn, tenant, thread_id, namespace)
    if thread is None:
        return None
    written = 0
    if thread["deleted_at"] is None:
        for idx, channel, type_of, blob in zip(idxs, channels, types, blobs, strict=True):
            written += await conn.fetchval(
                "INSERT INTO checkpoint_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,"
                " idx, channel, type, blob, namespace) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
                " DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob,"
                " task_path = EXCLUDED.task_path WHERE EXCLUDED.idx < 0 RETURNING 1",
                tenant, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type_of, blob,
                thread["namespace"]) or 0
    return await conn.fetchrow(
        "SELECT $1::text AS bound_tenant, $2::text AS bound_scope, $3::boolean AS gone, $4::bigint AS written",
        tenant, scope, thread["deleted_at"] is not None, written)


# A put in one statement behind the key check: the thread's row (made if new, locked), then, unless the thread
# was erased, the channel values new in it (a version already stored is not written again) and the
# checkpoint unless its ID is taken; `stored` is the request hash under that ID (a retry's, or a clash's).
# The foreign keys to the thread's row are checked at the statement's end, when the row exists.
_PUT = keyed_write(f"""{_THREAD_SHARED.format(ns="$16")}
    live AS (SELECT tenant_id, namespace FROM th WHERE deleted_at IS NULL),
    blobs AS (
        INSERT INTO checkpoint_blobs (tenant_id, thread_id, checkpoint_ns, channel, version, type, blob, namespace)
        SELECT live.tenant_id, $3, $4, x.channel, x.version, x.type, x.blob, live.namespace
          FROM live, unnest($12::text[], $13::text[], $14::text[], $15::bytea[]) AS x(channel, version, type, blob)
        ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING RETURNING 1),
    made AS (
        INSERT INTO checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint,
                                 channel_versions, metadata, request_hash, namespace)
        SELECT live.tenant_id, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11, live.namespace FROM live
        ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id) DO NOTHING RETURNING request_hash),
    done AS (
        SELECT th.deleted_at IS NOT NULL AS gone, EXISTS (SELECT 1 FROM made) AS made,
               coalesce((SELECT request_hash FROM made),
                        (SELECT c.request_hash FROM checkpoints c
                          WHERE c.tenant_id = th.tenant_id AND c.thread_id = $3 AND c.checkpoint_ns = $4
                            AND c.checkpoint_id = $5)) AS stored,
               (SELECT count(*) FROM blobs) AS blobs
          FROM th)
""", "write", steps=_put_steps)


async def put_checkpoint(conn: Conn, cred: Credential, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                         parent_id: str | None, type_: str, checkpoint: bytes, channel_versions: str, metadata: str,
                         request_hash: bytes, channels: list[str], versions: list[str], types: list[str],
                         blobs: list[bytes], namespace: str) -> tuple[bool, bool, bytes | None]:
    """Store a checkpoint and its new channel values (see _PUT): (the thread was erased, it wrote the
    checkpoint, the request hash stored under its ID). 401 for a bad key, 403 without write scope or grant."""
    for _ in range(3):
        _, rows = await tenancy.write_many(conn, cred, "write", _PUT, thread_id, checkpoint_ns, checkpoint_id,
                                           parent_id, type_, checkpoint, channel_versions, metadata, request_hash,
                                           channels, versions, types, blobs, namespace)
        if rows:
            return rows[0]["gone"], rows[0]["made"], rows[0]["stored"]
    checkpoint_refused(cred, thread_id)
    raise RuntimeError("the thread's row stayed invisible to three statements in a row")


def checkpoint_refused(cred: Credential, thread_id: str) -> None:
    """403 for a key with grants whose put found no thread row it may see, three times (a row another statement
    made after one's snapshot is seen by the next): another subject's thread."""
    if cred.has_grants:
        raise Forbidden(f"This key may not write LangGraph thread {thread_id!r}: its grants do not cover it.",
                        thread_id=thread_id)


# A task's writes in one statement behind the key check: the thread's row (made if new, locked), then, unless
# the thread was erased, each write once per (task, idx); a special channel's (idx < 0) replaces the stored one.
_PUT_WRITES = keyed_write(f"""{_THREAD_SHARED.format(ns="$12")}
    written AS (
        INSERT INTO checkpoint_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
                                       idx, channel, type, blob, namespace)
        SELECT th.tenant_id, $3, $4, $5, $6, $7, x.idx, x.channel, x.type, x.blob, th.namespace
          FROM th, unnest($8::integer[], $9::text[], $10::text[], $11::bytea[]) AS x(idx, channel, type, blob)
         WHERE th.deleted_at IS NULL
        ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
        DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob,
                      task_path = EXCLUDED.task_path
        WHERE EXCLUDED.idx < 0
        RETURNING 1),
    done AS (SELECT th.deleted_at IS NOT NULL AS gone, (SELECT count(*) FROM written) AS written FROM th)
""", "write", steps=_put_writes_steps)


async def put_checkpoint_writes(conn: Conn, cred: Credential, thread_id: str, checkpoint_ns: str,
                                checkpoint_id: str, task_id: str, task_path: str, idxs: list[int],
                                channels: list[str], types: list[str], blobs: list[bytes], namespace: str) -> bool:
    """Store a task's writes (see _PUT_WRITES); False when the thread was erased (nothing written)."""
    for _ in range(3):
        _, rows = await tenancy.write_many(conn, cred, "write", _PUT_WRITES, thread_id, checkpoint_ns,
                                           checkpoint_id, task_id, task_path, idxs, channels, types, blobs, namespace)
        if rows:
            return not rows[0]["gone"]
    checkpoint_refused(cred, thread_id)
    raise RuntimeError("the thread's row stayed invisible to three statements in a row")


async def erase_checkpoint_thread(conn: Conn, tenant: str, thread_id: str) -> None:
    """Erase a thread: every checkpoint, channel value and write gone, the thread row kept as its tombstone.
    (A data-modifying CTE runs to completion whether or not the query reads it.)"""
    await conn.execute(
        """WITH tomb AS (
             UPDATE checkpoint_threads SET deleted_at = now()
              WHERE tenant_id = $1 AND thread_id = $2 AND deleted_at IS NULL RETURNING 1),
           c AS (DELETE FROM checkpoints WHERE tenant_id = $1 AND thread_id = $2 RETURNING 1),
           b AS (DELETE FROM checkpoint_blobs WHERE tenant_id = $1 AND thread_id = $2 RETURNING 1),
           w AS (DELETE FROM checkpoint_writes WHERE tenant_id = $1 AND thread_id = $2 RETURNING 1)
           SELECT count(*) FROM tomb""",
        tenant, thread_id)


async def checkpoint_threads_of_runs(conn: Conn, tenant: str, run_ids: list[str]) -> list[str]:
    """The threads holding checkpoints of these runs."""
    rows = await conn.fetch(
        "SELECT DISTINCT thread_id FROM checkpoints WHERE tenant_id = $1 AND run_id = ANY ($2::text[])",
        tenant, run_ids)
    return [r[0] for r in rows]


async def delete_checkpoint_runs(conn: Conn, tenant: str, run_ids: list[str]) -> int:
    """Delete the checkpoints of these runs with their writes, and the channel values no checkpoint left
    names; how many checkpoints went."""
    return await conn.fetchval(
        """WITH doomed AS MATERIALIZED (
             SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints
              WHERE tenant_id = $1 AND run_id = ANY ($2::text[])),
           gone AS (
             DELETE FROM checkpoints c USING doomed d
              WHERE c.tenant_id = $1 AND c.thread_id = d.thread_id AND c.checkpoint_ns = d.checkpoint_ns
                AND c.checkpoint_id = d.checkpoint_id RETURNING 1),
           gone_writes AS (
             DELETE FROM checkpoint_writes w USING doomed d
              WHERE w.tenant_id = $1 AND w.thread_id = d.thread_id AND w.checkpoint_ns = d.checkpoint_ns
                AND w.checkpoint_id = d.checkpoint_id RETURNING 1),
           gone_blobs AS (
             DELETE FROM checkpoint_blobs b
              WHERE b.tenant_id = $1 AND (b.thread_id, b.checkpoint_ns) IN (SELECT thread_id, checkpoint_ns FROM doomed)
                AND NOT EXISTS (
                  SELECT 1 FROM checkpoints c
                   WHERE c.tenant_id = $1 AND c.thread_id = b.thread_id AND c.checkpoint_ns = b.checkpoint_ns
                     AND c.channel_versions->>b.channel = b.version AND (c.run_id IS NULL OR c.run_id <> ALL ($2::text[])))
             RETURNING 1)
           SELECT count(*)::integer FROM gone""",
        tenant, run_ids)


async def copy_checkpoint_thread(conn: Conn, tenant: str, source: str, target: str) -> int:
    """Copy every checkpoint, channel value and write of `source` to `target`, in the target's namespace (what
    `target` has already under the same keys stays); how many checkpoints were copied."""
    # The target's namespace read first, then each table's rows copied by an INSERT ... SELECT of their own: Citus
    # refuses data-modifying CTEs in front of an INSERT ... SELECT with a subquery (a rare write, on any store).
    namespace = await _namespace_of(conn, tenant, target)
    copied = [await conn.execute(sql, tenant, source, target, namespace) for sql in _COPY]
    return int(copied[0].rsplit(" ", 1)[1])


_COPY = (
    "INSERT INTO checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint,"
    " channel_versions, metadata, request_hash, namespace)"
    " SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint, channel_versions, metadata,"
    " request_hash, $4 FROM checkpoints WHERE tenant_id = $1 AND thread_id = $2 ON CONFLICT DO NOTHING",
    "INSERT INTO checkpoint_blobs (tenant_id, thread_id, checkpoint_ns, channel, version, type, blob, namespace)"
    " SELECT tenant_id, $3, checkpoint_ns, channel, version, type, blob, $4"
    " FROM checkpoint_blobs WHERE tenant_id = $1 AND thread_id = $2 ON CONFLICT DO NOTHING",
    "INSERT INTO checkpoint_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type,"
    " blob, task_path, namespace)"
    " SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path, $4"
    " FROM checkpoint_writes WHERE tenant_id = $1 AND thread_id = $2 ON CONFLICT DO NOTHING",
)


async def prune_checkpoints(conn: Conn, tenant: str, thread_ids: list[str], keep: int) -> int:
    """Keep the newest `keep` checkpoints of each (thread, namespace) (0: none); how many went."""
    return await conn.fetchval("SELECT recall_prune_checkpoints($1, $2::text[], $3, NULL)", tenant, thread_ids, keep)


async def checkpoint_retention(conn: Conn, batch: int) -> int:
    """The sweep's pass over the tenants' checkpoint retention (every tenant, as the owner); how many went."""
    return await conn.fetchval("SELECT recall_checkpoint_retention($1)", batch)


async def checkpoint_orphans(conn: Conn, batch: int) -> int:
    """The sweep's pass over pending writes of no checkpoint below the newest of their (thread, namespace), in
    every tenant (recall_checkpoint_orphans, as the owner); how many threads it pruned of them."""
    return await conn.fetchval("SELECT recall_checkpoint_orphans($1)", batch)


async def set_checkpoint_retention(conn: Conn, tenant: str, keep: int | None, max_age: float | None) -> bool:
    """A tenant's checkpoint retention (None: no such rule); False when there is no such tenant."""
    return await conn.fetchval(
        """UPDATE tenants SET checkpoint_keep_latest = $2, checkpoint_max_age = $3 * interval '1 second'
            WHERE id = $1 RETURNING true""",
        tenant, keep, max_age) is not None


async def checkpoint_thread_state(conn: Conn, tenant: str, thread_id: str) -> State:
    """An operator's look at a LangGraph thread: missing, live or erased."""
    gone = await conn.fetchval(
        "SELECT deleted_at IS NOT NULL FROM checkpoint_threads WHERE tenant_id = $1 AND thread_id = $2",
        tenant, thread_id)
    return State.MISSING if gone is None else State.of(gone)


async def checkpoint_erasure_findings(conn: Conn, tenant: str, thread_id: str) -> list[str]:
    """Every table where content of an erased LangGraph thread could still be read (verify-erasure)."""
    rows = await conn.fetch(
        """SELECT place FROM (
             SELECT 'checkpoints: ' || count(*) || ' checkpoints of the thread' AS place FROM checkpoints
              WHERE tenant_id = $1 AND thread_id = $2 HAVING count(*) > 0
             UNION ALL SELECT 'checkpoint_blobs: ' || count(*) || ' channel values of the thread' FROM checkpoint_blobs
              WHERE tenant_id = $1 AND thread_id = $2 HAVING count(*) > 0
             UNION ALL SELECT 'checkpoint_writes: ' || count(*) || ' pending writes of the thread' FROM checkpoint_writes
              WHERE tenant_id = $1 AND thread_id = $2 HAVING count(*) > 0
           ) found ORDER BY place""",
        tenant, thread_id)
    return [r[0] for r in rows]
