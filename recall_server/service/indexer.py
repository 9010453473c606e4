"""Search by meaning, the server's side: the embedder (loaded in the background at start), the question's
vector, and the indexer that drains the embedding queue (schema.sql, vectors).

A write never waits for its vector: it queues its object in its own transaction, and `run_forever` embeds
the queue in batches. A batch is read with SKIP LOCKED and stored in the transaction that locked it, so
several server processes share the queue and a crash loses nothing (the entries stay queued). A batch is
shared between the tenants with entries due, which take turns (schema.sql, recall_embedding_batch): one
tenant's bulk write does not hold back another's few entries. An
embedder that is unavailable (timeout, 429, 5xx) leaves its batch to be retried after a backoff; one that
refuses a text (4xx) marks that entry refused until `recall-server reindex`.

Once a model has enough vectors to need its HNSW index (schema.sql, recall_embedding_index_plan), the indexer
builds it beside the batches, on a connection of its own as the owner: CREATE INDEX CONCURRENTLY, which no
write or delete waits for (a plain CREATE INDEX in the batch's transaction held a DELETE for the whole build).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import asyncpg

from recall_server import embedders
from recall_server.config import Settings
from recall_server.db import embedded
from recall_server.db import queries as q
from recall_server.db.pool import Database, connect
from recall_server.embedders import EmbedRejected, EmbedUnavailable, Embedder
from recall_server.errors import Unavailable
from recall_server.models import SearchStatus
from recall_server.observability import EMBED_FAILURES, EMBED_LAG, EMBED_QUEUE, EMBED_SECONDS, EMBEDDED

log = logging.getLogger("recall_server.indexer")

BATCH = 64  # texts per embedder call and per transaction
# Seconds between looks at an empty queue: from IDLE_POLL, doubling while it stays empty, up to IDLE_MAX (the
# lag from write to searchable after a quiet spell; under a stream of writes the queue is never empty).
IDLE_POLL, IDLE_MAX = 0.05, 1.0
STATS_EVERY = 5.0  # seconds between queue metrics
INDEX_EVERY = 50  # batches between looks at whether the model's vectors need their HNSW index yet
REINDEX_WAIT = 30.0  # seconds `reindex` waits for due entries another process holds
QUESTION_WAIT = 1.0  # seconds a search waits for its question's vector (a remote embedder's retries take longer)


def _lowest_priority() -> None:
    """Nice this thread (Linux schedules threads, so a thread's niceness is its own) to 19."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):  # not Linux, or not allowed: normal priority
        pass


def _nice_backend(data_dir: Path, pid: int) -> bool:
    """Nice a backend of the embedded cluster under data_dir to 19; whether it is one (a server's backends
    elsewhere are not this process's to reprioritise)."""
    if not embedded.runs(data_dir, pid):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except OSError:  # not allowed: normal priority
        pass
    return True


async def build_vector_index(owner_dsn: str, model: str, dims: int, data_dir: Path) -> bool:
    """Build `model`'s HNSW index if it needs one, CONCURRENTLY, on an owner connection of its own (outside any
    transaction); whether the index is ready. An invalid one, left by a build that stopped, is dropped first;
    while another process builds it (its advisory lock), nothing is done. On the embedded cluster the build
    runs at the lowest CPU priority, in its backend alone (no parallel workers, which would run at normal)."""
    conn = await connect(owner_dsn)
    try:
        plan = await q.vector_index_plan(conn, model, dims)
        if plan.ready or plan.build is None or not await q.hold_index_build(conn, plan):
            return plan.ready
        plan = await q.vector_index_plan(conn, model, dims)  # again under the lock: another may have finished it
        if plan.ready or plan.build is None:
            return plan.ready
        if _nice_backend(data_dir, conn.get_server_pid()):
            await conn.execute("SET max_parallel_maintenance_workers = 0")
        started = time.perf_counter()
        log.info("building the HNSW index of %s", model)
        if plan.drop_first:
            await q.run_index_statement(conn, plan.drop_first)
        await q.run_index_statement(conn, plan.build)
        log.info("built the HNSW index of %s in %.1f s", model, time.perf_counter() - started)
        return True
    finally:
        try:
            await conn.close(timeout=5)
        except Exception:  # cancelled mid-statement (the server stops): the socket goes, PostgreSQL ends the build
            conn.terminate()


def as_vector(values: list[float]) -> str:
    """pgvector's text form."""
    return "[" + ",".join(f"{v:.7g}" for v in values) + "]"


class Indexer:
    """The embedder and the queue drain for one server process (or one `reindex` command)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.embedder: Embedder | None = None
        self.vectors: bool | None = None  # pgvector in this database; None until start() looked
        self.note: str | None = "the embedder is loading: search is lexical until it is ready"
        self._ready = asyncio.Event()
        self._indexed_model: str | None = None
        self._low: ThreadPoolExecutor | None = None
        self._batches = 0
        self._turn = ""  # the tenant of the last batch's last entry: the next batch's turns start after it
        self._niced: set[int] = set()  # backends whose priority _lowest_priority_backend looked at
        self._building: asyncio.Task[None] | None = None  # the model's HNSW index being built

    @property
    def semantic(self) -> bool:
        """Whether a question can be embedded and compared now."""
        return self.embedder is not None and bool(self.vectors) and bool(self.embedder.dims)

    def describe(self) -> SearchStatus:
        """What search can do now (GET /readyz)."""
        return SearchStatus(modes=["hybrid", "lexical", "semantic", "exact"] if self.semantic else ["lexical", "exact"],
                            embedder=self.embedder.model if self.embedder else self.settings.embedder,
                            vectors=bool(self.vectors), note=self.note)

    async def start(self) -> None:
        """Look for pgvector, then load the embedder (in a thread: a local model takes about a second)."""
        try:
            async with self.db.connection() as conn:
                self.vectors = await q.vectors_available(conn)
            if self.settings.embedder == "none":
                self.note = "RECALL_EMBEDDER=none: search is lexical only"
            elif not self.vectors:
                self.note = ("this PostgreSQL has no pgvector: search is lexical only (install pgvector, "
                             "then run `recall-server migrate` and `recall-server reindex`)")
            else:
                self.embedder = await asyncio.to_thread(embedders.from_settings, self.settings)
                self.note = None
        except Exception as exc:  # a model that cannot load leaves search lexical; the server keeps serving
            self.note = f"the embedder could not be loaded ({type(exc).__name__}): search is lexical only"
            log.error("embedder %s could not be loaded", self.settings.embedder, exc_info=True)
        finally:
            self._ready.set()

    async def ready(self) -> None:
        await self._ready.wait()

    async def question(self, text: str) -> str | None:
        """The question's vector (pgvector text), or None when search by meaning is unavailable or the embedder
        does not answer within QUESTION_WAIT (a search then runs lexical, and says so)."""
        if self.embedder is None or not self.vectors:
            return None
        try:
            [vector] = await asyncio.wait_for(self.embedder.embed([text], first=True), QUESTION_WAIT)
        except (EmbedUnavailable, EmbedRejected, ValueError, asyncio.TimeoutError):
            return None
        return as_vector(vector)

    async def run_forever(self) -> None:
        """Drain the queue while the server runs; publish its depth and lag."""
        await self.start()
        if self.embedder is None:
            return
        try:
            await self._drain_forever()
        finally:
            if self._building is not None:  # cancelled: PostgreSQL undoes it, the next look drops what it left
                self._building.cancel()
                await asyncio.gather(self._building, return_exceptions=True)

    async def _drain_forever(self) -> None:
        last_stats, idle = 0.0, IDLE_POLL
        while True:
            try:
                done = await self.drain_once()
                if time.monotonic() - last_stats > STATS_EVERY:
                    await self.publish_stats()
                    last_stats = time.monotonic()
            except asyncio.CancelledError:
                raise
            except (Unavailable, OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
                log.warning("indexing paused, the database is unavailable: %s", exc)  # expected: no traceback
                done = 0
            except Exception:  # anything else: said with its traceback, and tried again
                log.warning("indexing failed; will retry", exc_info=True)
                done = 0
            if done:
                idle = IDLE_POLL
            else:
                await asyncio.sleep(idle)
                idle = min(idle * 2, IDLE_MAX)

    async def drain_once(self, batch: int = BATCH) -> int:
        """Embed and store one batch of due entries; how many it took off the queue (0: none due, or the embedder
        was unavailable and the batch waits for its retry). Then, now and again, a look at the model's index."""
        done = await self._embed_batch(batch)
        if done:
            await self._index_when_needed()
        return done

    async def _embed_batch(self, batch: int) -> int:
        assert self.embedder is not None
        async with self.db.connection() as conn, conn.transaction():
            self._lowest_priority_backend(conn.get_server_pid())
            entries = await q.embedding_batch(conn, batch, self._turn)
            if not entries:
                return 0
            self._turn = entries[-1].tenant_id
            texts = [e.text for e in entries if e.text and e.text.strip()]
            started = time.perf_counter()
            try:
                made = await self._embed(texts) if texts else []
            except EmbedUnavailable as exc:  # kept, to be tried again after a backoff (committed with this batch)
                await q.embeddings_failed(conn, entries, f"{type(exc).__name__}: {exc}", permanent=False)
                EMBED_FAILURES.labels("unavailable").inc(len(entries))
                log.warning("embedder unavailable, %d entries wait for a retry: %s", len(entries), exc)
                return 0
            except EmbedRejected:
                made = await self._one_by_one(conn, entries)
            EMBED_SECONDS.observe(time.perf_counter() - started)
            vectors: list[str | None] = []
            queue = iter(made)
            for entry in entries:
                vectors.append(next(queue) if entry.text and entry.text.strip() else None)
            await q.store_embeddings(conn, entries, vectors, self.embedder.model, self.embedder.dims)
            EMBEDDED.inc(sum(v is not None for v in vectors))
            return len(entries)

    def _lowest_priority_backend(self, pid: int) -> None:
        """Nice the indexer's PostgreSQL backend to 19 too, once per connection, where it is a process of the
        embedded cluster: its HNSW inserts then take the CPU the requests' backends leave, as the embedding
        does (bench/indexing.py)."""
        if pid not in self._niced:
            self._niced.add(pid)
            _nice_backend(self.settings.data_dir, pid)

    async def _embed(self, texts: list[str]) -> list[str]:
        """A batch's vectors, in pgvector's text form. A model in this process encodes (and the vectors are
        formatted) on the indexer's own thread, at the lowest CPU
        priority: under load the requests' threads go first (a search's question is encoded at normal
        priority, by `question`), and the indexer takes what CPU is left (bench/indexing.py)."""
        assert self.embedder is not None
        encode = getattr(self.embedder, "embed_sync", None)
        if encode is None:  # a remote model: waiting on the network costs no CPU here
            return [as_vector(v) for v in await self.embedder.embed(texts)]
        if self._low is None:
            self._low = ThreadPoolExecutor(1, thread_name_prefix="recall-indexer", initializer=_lowest_priority)
        loop, made = asyncio.get_running_loop(), []
        for i in range(0, len(texts), 16):  # the model's lock is let go between chunks, for a question waiting
            made += await loop.run_in_executor(self._low, lambda chunk: [as_vector(v) for v in encode(chunk)],
                                               texts[i:i + 16])
        return made

    async def _one_by_one(self, conn, entries: list[q.Queued]) -> list[str]:
        """After a refused batch: each text alone, so one bad text does not hold back the rest. Refused ones
        are marked and dropped from `entries`; the vectors of the others, in order."""
        assert self.embedder is not None
        made: list[str] = []
        for entry in list(entries):
            if not (entry.text and entry.text.strip()):
                continue
            try:
                made += await self._embed([entry.text])
            except EmbedRejected as exc:
                await q.embeddings_failed(conn, [entry], f"{type(exc).__name__}: {exc}", permanent=True)
                EMBED_FAILURES.labels("rejected").inc()
                entries.remove(entry)
        return made

    async def _index_when_needed(self) -> None:
        """Every INDEX_EVERY batches until the model's HNSW index is ready: whether it needs building now, and if
        so its build, in a task of its own (one at a time), while the batches go on."""
        assert self.embedder is not None
        model, dims = self.embedder.model, self.embedder.dims
        if self._indexed_model == model or not dims:
            return
        self._batches += 1
        if self._batches % INDEX_EVERY != 1 or (self._building is not None and not self._building.done()):
            return
        async with self.db.connection() as conn:
            plan = await q.vector_index_plan(conn, model, dims)
        if plan.ready:
            self._indexed_model = model
        elif plan.build is not None:
            self._building = asyncio.create_task(self._build_index(model, dims))

    async def _build_index(self, model: str, dims: int) -> None:
        if not self.settings.database_url:
            log.warning("the vector index of %s is not built: no owner DSN (DATABASE_URL)", model)
            return
        try:
            if await build_vector_index(self.settings.database_url, model, dims, self.settings.data_dir):
                self._indexed_model = model
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError, asyncio.TimeoutError) as exc:
            log.warning("the vector index of %s was not built; will look again: %s", model, exc)

    async def publish_stats(self) -> q.QueueStats:
        async with self.db.connection() as conn:
            stats = await q.embedding_queue_stats(conn)
        EMBED_QUEUE.labels("due").set(stats.due)
        EMBED_QUEUE.labels("retrying").set(stats.retrying)
        EMBED_QUEUE.labels("refused").set(stats.refused)
        EMBED_LAG.set(stats.oldest_seconds)
        return stats

    async def reindex(self, everything: bool, progress: Callable[[int, int], None]) -> int:
        """Queue what has no vector of this model (everything: all), then drain it here; `progress(done,
        total)` after each batch. Resumable: what is queued stays queued if this stops."""
        await self.start()
        if self.embedder is None:
            raise RuntimeError(self.note or "no embedder")
        async with self.db.connection() as conn:
            await q.queue_reindex(conn, self.embedder.model, everything)
            total = (await q.embedding_queue_stats(conn)).due
        done, idle_since = 0, time.monotonic()
        while True:
            if n := await self.drain_once():
                done, idle_since = done + n, time.monotonic()
                progress(done, total)
                continue
            # An empty batch while entries are due: another process's indexer (or a writer) holds them. They
            # are embedded when it commits; wait for that rather than report the queue drained, up to a bound.
            async with self.db.connection() as conn:
                if not (await q.embedding_queue_stats(conn)).due or time.monotonic() - idle_since > REINDEX_WAIT:
                    if self._building is not None:  # the index this run made due: built before the command ends
                        await self._building
                    return done
            await asyncio.sleep(0.1)
