"""The operations behind the API, one module per mechanism, and `Service`, the one object the app holds.

  views.py        reads: an object by ID (one table from kind to fetch and render), content, resolve,
                  the lists of threads, events and reports
  writes.py       creates, thread updates, notes, owners, deletion; the write steps others compose
  messages.py     conversations on threads: appending messages, the replay, retractions, their content
  memories.py     memory versions by (namespace, key): the current one, the lists, writing a version
  lens.py         search, backlinks, grep
  indexer.py      search by meaning: the embedder, the question's vector, the embedding queue's drain
  extraction.py   memories extracted from conversations: the extraction queue's worker, a thread's jobs
  checkpoints.py  LangGraph checkpoints: put, writes, tuples, pages, erasing a thread, runs, copies, pruning
  trace.py        the recall trace: capture, buffer, batched writes, its pages
  admin.py        API keys and webhook endpoints of the caller's tenant
  ops.py          operator functions the CLI runs on an owner connection
  idempotency.py  Idempotency-Key: record in the write's transaction, replay, 409/422
  inputs.py       what a create's fields become (content bytes, timestamps, expiry, its hash)

A route handler makes one call, e.g. `request.service.views.get_thread(...)`. The mechanisms share what
they need by composition (memories holds the views and the writes), never by subclassing; none writes
SQL (db/queries/) or binds a tenant itself (db/tenancy.py).
"""

from __future__ import annotations

from recall_server import extractors
from recall_server.config import Settings
from recall_server.content import ContentCache
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db.pool import Database
from recall_server.service import ops
from recall_server.service.admin import Admin
from recall_server.service.checkpoints import Checkpoints
from recall_server.service.extraction import Extractions
from recall_server.service.indexer import Indexer
from recall_server.service.lens import Lens
from recall_server.service.memories import Memories
from recall_server.service.messages import Messages
from recall_server.service.audit import Audit
from recall_server.service.trace import Trace
from recall_server.service.views import Views
from recall_server.service.writes import Writes


class Service:
    """Every operation of the API for one store, by mechanism: `views`, `writes`, `memories`, `messages`,
    `extractions`, `lens`,
    `trace`, `audit`, `admin`, `checkpoints`; and the server's own upkeep (`ready`, `sweep`)."""

    def __init__(self, db: Database, cursors: CursorCodec, settings: Settings, indexer_db: Database | None = None) -> None:
        """`settings`: the retention periods (Idempotency-Key outcomes, trace reads, webhook deliveries),
        the content cache's size and the trace buffer's; config.py holds their defaults. `indexer_db`: the
        indexer's own connection, so that embedding never takes a connection a request is waiting for."""
        self.db = db
        self.views = Views(db, cursors, ContentCache(settings.content_cache_bytes))
        self.writes = Writes(db, self.views, settings.idempotency_ttl)
        self.memories = Memories(db, cursors, self.views, self.writes)
        self.extractions = Extractions(db, cursors, self.views, settings, extractors.from_settings(settings))
        self.messages = Messages(db, cursors, self.views, self.writes, self.extractions)
        self.indexer = Indexer(indexer_db or db, settings)
        self.lens = Lens(db, cursors, self.views, self.indexer)
        self.admin = Admin(db)
        self.checkpoints = Checkpoints(db, cursors)
        self.trace = Trace(db, cursors, settings.trace_flush_interval, settings.trace_buffer)
        self.audit = Audit(self.trace)
        self.trace_ttl = settings.trace_ttl
        self.audit_ttl = settings.audit_ttl
        self.delivery_ttl = settings.delivery_ttl

    async def ready(self) -> None:
        async with self.db.connection() as conn:
            await q.ping(conn)

    async def sweep(self, batch: int = 500) -> int:
        """Purge expired objects in every tenant (the serve loop's periodic sweep)."""
        async with self.db.connection() as conn:
            return await ops.sweep(conn, batch, self.trace_ttl, self.delivery_ttl, self.audit_ttl)
