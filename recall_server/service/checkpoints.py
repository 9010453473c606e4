"""LangGraph checkpoints: put, pending writes, a tuple, pages, erasing a thread, deleting runs, copying, pruning.

The server stores what LangGraph's serde made on the client (bytes with their type tag) and never decodes it;
it reads only the JSON it is given beside them: the channel versions a checkpoint holds (which stored values
make its state) and its metadata (list filters). What is particular here:

- a LangGraph thread is a row of checkpoint_threads, locked by every write to it (shared by a put and a
  task's writes, in their one statement each; exclusive for an erasure, a prune, a copy or deleting runs),
  so an erasure never interleaves with a put; an erased thread keeps its row as a tombstone (410; a put
  is a 409);
- a retried put lands once (the same checkpoint ID and body: 200, another body: 409), a retried put_writes
  too (once per (task, idx)); a channel's value is written once per version.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlencode

import asyncpg
import msgspec

from recall_server.auth import Credential
from recall_server.cursor import PAGE_BYTES, CursorCodec, json_size
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import BadRequest, Conflict, Forbidden, Gone, NotFound
from recall_server.ids import State
from recall_server.models import (
    ChannelValue,
    CheckpointCount,
    CheckpointPage,
    CheckpointRef,
    CheckpointTupleView,
    CopyCheckpoints,
    DeleteCheckpointRuns,
    PendingWrite,
    PruneCheckpoints,
    PutCheckpoint,
    PutWrites,
    WriteItem,
)
from recall_server.rows import Content, Outcome

_metadata = msgspec.json.Decoder(dict)
_json = msgspec.json.Encoder()


def _gone(thread_id: str) -> Gone:
    return Gone(f"The LangGraph thread {thread_id!r} was deleted; its checkpoints were erased.", thread_id=thread_id)


def _retired(thread_id: str) -> Conflict:
    return Conflict(f"The LangGraph thread {thread_id!r} was deleted; its thread_id is retired and is never "
                    "written again.", thread_id=thread_id)


def _refused(thread_id: str) -> Forbidden:
    return Forbidden(f"This key may not write LangGraph thread {thread_id!r}: its grants do not cover it.",
                     thread_id=thread_id)


def metadata_filter(text: str | None) -> str | None:
    """`metadata_contains`: a JSON object a checkpoint's metadata must contain (jsonb @>)."""
    if text is None:
        return None
    try:
        parsed = msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise BadRequest("metadata_contains must be a JSON object.", field="metadata_contains") from None
    if not isinstance(parsed, dict):
        raise BadRequest("metadata_contains must be a JSON object.", field="metadata_contains")
    return text


# The escape of a NUL in a JSON text: \u0000 after an even number of backslashes (each pair one backslash).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def holds_nul(json_text: str) -> bool:
    """Whether a JSON text holds the NUL character (U+0000) in a string or a member name: jsonb cannot."""
    return "\\u0000" in json_text and _NUL.search(json_text) is not None


def _tuple(row: asyncpg.Record) -> CheckpointTupleView:
    return CheckpointTupleView(
        thread_id=row["thread_id"], checkpoint_ns=row["checkpoint_ns"], checkpoint_id=row["checkpoint_id"],
        parent_checkpoint_id=row["parent_id"], type=row["type"], checkpoint=row["checkpoint"],
        metadata=_metadata.decode(row["metadata"]),
        channel_values=[ChannelValue(channel=b[0], type=b[1], data=b[2], size=b[3], version=b[4],
                                     href=_href(row, b[2], "/checkpoints/value", channel=b[0], version=b[4]))
                        for b in row["blobs"]],
        pending_writes=[PendingWrite(task_id=w[0], channel=w[1], type=w[2], data=w[3], task_path=w[4], idx=w[5],
                                     size=w[6], href=_href(row, w[3], "/checkpoints/writes/value",
                                                           checkpoint_id=row["checkpoint_id"], task_id=w[0], idx=w[5]))
                        for w in row["writes"]],
        created_at=row["created_at"],
    )


def _href(row: asyncpg.Record, inlined: bytes | None, path: str, **which: str | int) -> str | None:
    """Where a value the tuple does not inline (its bytes None: above q.VALUE_INLINE_MAX) is read: a channel
    value (GET /checkpoints/value) or a pending write (GET /checkpoints/writes/value) of the tuple's thread and
    namespace; None for an inlined one."""
    if inlined is not None:
        return None
    return f"{path}?{urlencode({'thread_id': row['thread_id'], 'checkpoint_ns': row['checkpoint_ns'], **which})}"


def _served(state: State, data: bytes | None, sha: bytes, thread_id: str, missing: str, **which: str | int) -> Content:
    """A stored value as content (ETag, Range): 404 if none (`missing` says what), 410 if the thread was erased."""
    if state is State.GONE:
        raise _gone(thread_id)
    if data is None:
        raise NotFound(f"The LangGraph thread {thread_id!r} has no {missing}.", thread_id=thread_id, **which)
    return Content(content_type="application/octet-stream", data=data, sha256=sha, gone=False)


def _once_per_idx(writes: list[WriteItem]) -> list[WriteItem]:
    """One write per idx, as if they were stored one by one: the first of a regular idx (a later one is a
    retry), the last of a special channel's (idx < 0: it replaces the stored one)."""
    kept: dict[int, WriteItem] = {}
    for write in writes:
        if write.idx < 0 or write.idx not in kept:
            kept[write.idx] = write
    return list(kept.values())


class Checkpoints:
    """The checkpoint operations, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self.db = db
        self.cursors = cursors

    # ---- reads -----------------------------------------------------------------------

    async def get_tuple(self, cred: Credential, thread_id: str, checkpoint_ns: str,
                        checkpoint_id: str | None) -> CheckpointTupleView:
        """One checkpoint (the newest of the namespace without an ID): 404 if none, 410 if the thread was erased."""
        async with self.db.connection() as conn:
            _, state, row = await q.fetch_checkpoint(conn, cred, thread_id, checkpoint_ns, checkpoint_id)
        if state is State.GONE:
            raise _gone(thread_id)
        if row is None:
            which = f"checkpoint {checkpoint_id!r}" if checkpoint_id else "checkpoint"
            raise NotFound(f"The LangGraph thread {thread_id!r} has no {which} in namespace {checkpoint_ns!r}.",
                           thread_id=thread_id, checkpoint_ns=checkpoint_ns)
        return _tuple(row)

    async def get_value(self, cred: Credential, thread_id: str, checkpoint_ns: str, channel: str,
                        version: str) -> Content:
        """A channel value's bytes, served as content (ETag, Range): 404 if none, 410 if the thread was erased."""
        async with self.db.connection() as conn:
            state, data, sha = await q.fetch_channel_value(conn, cred, thread_id, checkpoint_ns, channel, version)
        return _served(state, data, sha, thread_id,
                       f"value of channel {channel!r} at version {version!r} in namespace {checkpoint_ns!r}",
                       channel=channel)

    async def get_write_value(self, cred: Credential, thread_id: str, checkpoint_ns: str, checkpoint_id: str,
                              task_id: str, idx: int) -> Content:
        """A pending write's bytes, served as content (ETag, Range): 404 if none, 410 if the thread was erased."""
        async with self.db.connection() as conn:
            state, data, sha = await q.fetch_write_value(conn, cred, thread_id, checkpoint_ns, checkpoint_id,
                                                         task_id, idx)
        return _served(state, data, sha, thread_id, f"write {idx} of task {task_id!r} on checkpoint "
                                                    f"{checkpoint_id!r} in namespace {checkpoint_ns!r}",
                       checkpoint_id=checkpoint_id, task_id=task_id, idx=idx)

    async def list(self, cred: Credential, thread_id: str | None, checkpoint_ns: str | None, before: str | None,
                   metadata_contains: str | None, cursor: str | None, limit: int) -> CheckpointPage:
        """Newest first; 410 for an erased thread."""
        metadata = metadata_filter(metadata_contains)
        pager = self.cursors.pager(cursor, tuple[str, str, str], "checkpoints", thread_id, checkpoint_ns, before,
                                   metadata)
        # No metadata holds a NUL (a put refuses one): a filter holding one reads no row, and no NUL reaches jsonb.
        possible = metadata is None or not holds_nul(metadata)
        async with self.db.connection() as conn:
            tenant, rows = await q.list_checkpoints(conn, cred, thread_id, checkpoint_ns, before, pager.after,
                                                    metadata if possible else None, limit + 1 if possible else 0,
                                                    PAGE_BYTES)
            gone = not rows and thread_id is not None and await q.checkpoint_thread_gone(conn, cred, thread_id)
        shown, next_cursor, has_more = pager.page(
            tenant, [_tuple(r) for r in rows], limit, lambda t: [t.checkpoint_id, t.thread_id, t.checkpoint_ns],
            size=json_size)
        if gone:
            raise _gone(thread_id or "")
        return CheckpointPage(data=shown, next_cursor=next_cursor, has_more=has_more)

    # ---- writes ----------------------------------------------------------------------

    async def put(self, cred: Credential, req: PutCheckpoint) -> Outcome:
        """Store a checkpoint and its new channel values: 201, or 200 for a retry of the same put."""
        metadata = _json.encode(req.metadata).decode()
        if holds_nul(metadata):  # openapi.yaml states it (JsonWithoutNul); else PostgreSQL's cast would refuse it
            raise BadRequest("metadata must not hold the NUL character (U+0000) in a string or a member name: "
                             "PostgreSQL's jsonb cannot store it.", field="metadata")
        h = hashlib.sha256(_json.encode(req)).digest()
        ref = CheckpointRef(thread_id=req.thread_id, checkpoint_ns=req.checkpoint_ns, checkpoint_id=req.checkpoint_id)
        async with self.db.connection() as conn:
            gone, made, stored = await q.put_checkpoint(
                conn, cred, req.thread_id, req.checkpoint_ns, req.checkpoint_id, req.parent_checkpoint_id, req.type,
                req.checkpoint, _json.encode(req.channel_versions).decode(), metadata, h,
                [b.channel for b in req.blobs], [b.version for b in req.blobs], [b.type for b in req.blobs],
                [b.data for b in req.blobs], "/".join(req.namespace or ()))
        if gone:
            raise _retired(req.thread_id)
        if stored != h:
            raise Conflict(f"Checkpoint {req.checkpoint_id!r} of thread {req.thread_id!r} already exists with "
                           "a different body; checkpoint IDs are never reassigned.",
                           thread_id=req.thread_id, checkpoint_id=req.checkpoint_id)
        return Outcome(status=201 if made else 200, body=_json.encode(ref), object_id=req.checkpoint_id)

    async def put_writes(self, cred: Credential, req: PutWrites) -> None:
        """Store a task's writes against a checkpoint, once per (task, idx). LangGraph may send them while the
        checkpoint's own put is in flight, so they are not checked against it; 409 for an erased thread."""
        writes = _once_per_idx(req.writes)
        async with self.db.connection() as conn:
            live = await q.put_checkpoint_writes(
                conn, cred, req.thread_id, req.checkpoint_ns, req.checkpoint_id, req.task_id, req.task_path,
                [w.idx for w in writes], [w.channel for w in writes], [w.type for w in writes],
                [w.data for w in writes], "/".join(req.namespace or ()))
        if not live:
            raise _retired(req.thread_id)

    async def delete_thread(self, cred: Credential, thread_id: str) -> None:
        """Erase a thread's checkpoints, values and writes; its thread_id is retired (410 from now on).
        404 if it never had one; deleting it again is a no-op."""
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            states = await q.lock_checkpoint_threads(conn, tenant, [thread_id])
            if thread_id not in states:
                raise NotFound(f"No LangGraph thread {thread_id!r} has checkpoints.", thread_id=thread_id)
            await q.erase_checkpoint_thread(conn, tenant, thread_id)

    async def delete_runs(self, cred: Credential, req: DeleteCheckpointRuns) -> CheckpointCount:
        """Delete the checkpoints (and their writes) whose metadata names one of these runs."""
        if not req.run_ids:
            return CheckpointCount(checkpoints=0)
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            threads = await q.checkpoint_threads_of_runs(conn, tenant, req.run_ids)
            await q.lock_checkpoint_threads(conn, tenant, threads)
            return CheckpointCount(checkpoints=await q.delete_checkpoint_runs(conn, tenant, req.run_ids))

    async def copy_thread(self, cred: Credential, req: CopyCheckpoints) -> CheckpointCount:
        """Copy a thread's checkpoints, values and writes to another: 404 unknown source, 410 an erased one,
        409 an erased target. A thread copied onto itself already holds all of it: 0 copied, as LangGraph's
        savers do (an INSERT ... ON CONFLICT DO NOTHING of the same rows)."""
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            states = await q.lock_checkpoint_threads(conn, tenant, [req.target_thread_id], [req.source_thread_id])
            source = states.get(req.source_thread_id, State.MISSING)
            if source is State.MISSING:
                raise NotFound(f"No LangGraph thread {req.source_thread_id!r} has checkpoints.",
                               thread_id=req.source_thread_id)
            if source is State.GONE:
                raise _gone(req.source_thread_id)
            if req.target_thread_id not in states:
                await q.make_checkpoint_thread(conn, tenant, req.target_thread_id, req.source_thread_id)
                states = await q.lock_checkpoint_threads(conn, tenant, [req.target_thread_id])
            target = states.get(req.target_thread_id)
            if target is None:  # it exists, where the key's grants do not reach
                raise _refused(req.target_thread_id)
            if target is State.GONE:
                raise _retired(req.target_thread_id)
            copied = await q.copy_checkpoint_thread(conn, tenant, req.source_thread_id, req.target_thread_id)
        return CheckpointCount(checkpoints=copied)

    async def prune(self, cred: Credential, req: PruneCheckpoints) -> CheckpointCount:
        """Keep the newest `keep` checkpoints of each (thread, namespace) of these threads (0: none)."""
        threads = list(dict.fromkeys(req.thread_ids))
        if not threads:
            return CheckpointCount(checkpoints=0)
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            await q.lock_checkpoint_threads(conn, tenant, threads)
            return CheckpointCount(checkpoints=await q.prune_checkpoints(conn, tenant, threads, req.keep))
