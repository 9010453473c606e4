"""Vectors for search by meaning: the indexer's queue (a batch, storing it, failures), reindexing, the
model's index, and whether this database can hold vectors at all. These run for the server, across
tenants, through SECURITY DEFINER functions (schema.sql, vectors)."""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from recall_server.db.queries._common import Conn


class Queued(Struct):
    """A queue entry of the indexer's batch; `text` is None when the object is gone (nothing to embed)."""

    tenant_id: str
    object_id: str
    kind: str
    queued_at: datetime
    text: str | None


class IndexPlan(Struct):
    """A model's HNSW index: `ready`, or the statements that make it once it is needed (`build`; None: not yet),
    `drop_first` an invalid one left by a build that stopped; `lock_key`: the builder's advisory lock."""

    ready: bool
    lock_key: int
    drop_first: str | None
    build: str | None


class QueueStats(Struct):
    due: int
    retrying: int
    refused: int
    oldest_seconds: float


async def vectors_available(conn: Conn) -> bool:
    """Whether pgvector is in this database (without it, search is lexical only)."""
    return await conn.fetchval("SELECT recall_vectors_available()")


async def embedding_batch(conn: Conn, n: int, after: str = "") -> list[Queued]:
    """Up to `n` due queue entries shared between their tenants (each tenant's oldest first), locked until the
    caller's transaction ends (SKIP LOCKED); the tenants' turns start after `after`, the tenant of the last entry
    of the caller's previous batch (schema.sql, recall_embedding_batch)."""
    rows = await conn.fetch("SELECT * FROM recall_embedding_batch($1, $2)", n, after)
    return [Queued(**dict(r)) for r in rows]


async def store_embeddings(conn: Conn, batch: list[Queued], vectors: list[str | None], model: str, dims: int) -> None:
    """Store each entry's vector (pgvector text form; None: nothing to store) and drop the entries."""
    await conn.execute("SELECT recall_embedding_store($1, $2, $3, $4, $5, $6)",
                       [q.tenant_id for q in batch], [q.object_id for q in batch], [q.kind for q in batch],
                       vectors, model, dims)


async def embeddings_failed(conn: Conn, batch: list[Queued], error: str, permanent: bool) -> None:
    """Retry these entries after a backoff, or (`permanent`) not until a reindex."""
    await conn.execute("SELECT recall_embedding_failed($1, $2, $3, $4)",
                       [q.tenant_id for q in batch], [q.object_id for q in batch], error, permanent)


async def embedding_queue_stats(conn: Conn) -> QueueStats:
    """Entries due now, retrying, refused, and the age of the oldest due one."""
    row = await conn.fetchrow("SELECT * FROM recall_embedding_queue_stats()")
    return QueueStats(**dict(row))


async def queue_reindex(conn: Conn, model: str, everything: bool) -> int:
    """Queue every live object without a vector of `model` (all of them with `everything`); how many."""
    return await conn.fetchval("SELECT recall_embedding_reindex($1, $2)", model, everything)


async def vector_index_plan(conn: Conn, model: str, dims: int) -> IndexPlan:
    """What `model`'s HNSW index needs now: nothing (ready), not yet, or the statements that build it without
    blocking a write (CONCURRENTLY; made by recall_embedding_index_plan, the name and the model quoted there)."""
    row = await conn.fetchrow("SELECT * FROM recall_embedding_index_plan($1, $2, true)", model, dims)
    return IndexPlan(**dict(row))


async def hold_index_build(conn: Conn, plan: IndexPlan) -> bool:
    """The build's advisory lock, for this connection (False: another process builds the index now)."""
    return await conn.fetchval("SELECT pg_try_advisory_lock($1)", plan.lock_key)


async def run_index_statement(conn: Conn, statement: str) -> None:
    """One of a plan's statements (its `drop_first` or `build`): as the owner, and outside any transaction, which
    CONCURRENTLY needs. DDL takes no parameters: the plan's function wrote it with format()'s quoting."""
    await conn.execute(statement)
