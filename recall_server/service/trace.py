"""The recall trace: which IDs a run read. Captured per read, buffered in process, written in batches, paged.

A read joins a run by carrying `X-Recall-Run: <run>` (1-128 of [A-Za-z0-9._:-]; anything else is a
400). `TraceReads`, the middleware of the protected routes, records every traced GET, hits and
misses alike (404/410 are what debugging needs; never a 401, which has no tenant): run, time, the
path's ID, route template, status, bytes sent, key ID, request ID. Recording is an append to this
process's buffer: the read itself runs exactly the statements it ran untraced.

`Trace.flush` writes the buffer in one statement (`recall_record_reads`) at least every
`trace_flush_interval` seconds and at shutdown, the batch as one JSON document: as ten parameter
arrays, asyncpg's encoding held the worker's event loop ~7 ms for 3,000 reads (every request in
flight waited), against ~1 ms for msgspec's encoding. That SECURITY DEFINER function puts each row
in the tenant of the key that made the read, verifying the key's secret hash again as
`recall_authenticate` does, so the tenant is never carried or trusted from the read path, and a row
can never land in another tenant. A failed write never fails a read: its rows stay buffered for the
next flush (a retry inserts nothing twice: each row has a unique tick), within the bound
`trace_buffer`; beyond it rows are dropped. A batch the database refuses as data (which no retry
can change) is dropped at once rather than kept, so it cannot hold up every later read; the path's
ID, the one field a client writes freely, is made storable first (PostgreSQL text holds no NUL).
All of it is counted in /metrics. What a crash loses: the reads of at most one flush interval per
process, plus whatever a failing database made it drop.

Paging in order, exactly once, while rows arrive up to a flush interval late from several
processes: rows are ordered by `pos`, which is the read's time `at`, or, for a row written more than
the acceptance window (1.5 flush intervals) after it, its arrival minus that window; a page shows
only rows older than the settle horizon (2 flush intervals). Every row that is not yet written when
a page is read therefore has a `pos` newer than the horizon (the write, one INSERT, commits within the
half interval between the two), so it can never land behind a cursor.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
from prometheus_client import Counter

from recall_server import ids
from recall_server.auth import Credential
from recall_server.cursor import CursorCodec, Pager
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import BadRequest, not_found, require_live
from recall_server.ids import State
from recall_server.models import Read, ReadPage
from recall_server.observability import request_id

log = logging.getLogger("recall_server.trace")

RUN_HEADER = "X-Recall-Run"
_RUN_HEADER = RUN_HEADER.lower().encode()
_OBJECT_CHARS = 200  # a path's ID is stored up to this long (a malformed one can be a whole URL)
START = (datetime(1970, 1, 1, tzinfo=UTC), -1)  # before every row

# Route handlers with opt={"trace": False} are never traced: reading the trace, managing keys.
UNTRACED = {"trace": False}

WRITTEN = Counter("recall_trace_reads_written_total", "Traced reads written to the trace")
WRITE_FAILURES = Counter("recall_trace_write_failures_total",
                         "Trace writes (one per flush) that failed; their reads stay buffered for the next")
DROPPED = Counter("recall_trace_dropped_total", "Traced reads never written: the buffer was full "
                  "(a failing database), the key no longer verified, or the database refused the batch's data",
                  ["reason"])
AUDITED = Counter("recall_audit_requests_written_total", "Audited requests written to the audit")
AUDIT_FAILURES = Counter("recall_audit_write_failures_total",
                         "Audit writes (one per flush) that failed; their requests stay buffered for the next")
AUDIT_DROPPED = Counter("recall_audit_dropped_total", "Audited requests never written: the buffer was full, "
                        "the key no longer verified, or the database refused the batch's data", ["reason"])


class Buffer:
    """Rows of one kind buffered in this process and written in batches, each batch one statement (`write`,
    given the batch as one JSON document and the acceptance window). A failed write keeps its rows for the next
    flush, within `capacity`; a batch refused as data is dropped (no retry can change it). Counted in /metrics."""

    def __init__(self, what: str, write: Any, written: Counter, failures: Counter, dropped: Counter,
                 capacity: int) -> None:
        self.what, self.write, self.capacity = what, write, capacity
        self.written, self.failures, self.dropped = written, failures, dropped
        self.pending: list[tuple[Any, ...]] = []
        self._encode = msgspec.json.Encoder().encode

    def add(self, row: tuple[Any, ...]) -> None:
        if len(self.pending) >= self.capacity:
            self.dropped.labels("buffer_full").inc()
            return
        self.pending.append(row)

    async def flush(self, db: Database, accept: float) -> int:
        """Write the buffer in one statement; returns the rows written. Never raises for a database failure:
        the rows stay buffered (up to the bound) for the next flush."""
        if not self.pending:
            return 0
        batch, self.pending = self.pending, []
        try:
            async with db.connection() as conn:
                verified = await self.write(conn, self._encode(batch).decode(), accept)
        except asyncpg.DataError as exc:
            self.dropped.labels("refused").inc(len(batch))
            log.warning("%s write of %d rows refused (%s); dropped", self.what, len(batch), type(exc).__name__)
            return 0
        except BaseException as exc:
            self._keep(batch)
            if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                raise  # shutdown: the final flush writes them (a row written twice is inserted once)
            self.failures.inc()
            log.warning("%s write of %d rows failed (%s); kept for the next flush", self.what, len(batch),
                        type(exc).__name__)
            return 0
        self.written.inc(verified)
        if verified < len(batch):
            self.dropped.labels("key_not_verified").inc(len(batch) - verified)
        return verified

    def _keep(self, batch: list[tuple[Any, ...]]) -> None:
        """Put a batch that was not written back in front of what arrived since, within the bound."""
        room = max(self.capacity - len(self.pending), 0)
        if room < len(batch):
            self.dropped.labels("buffer_full").inc(len(batch) - room)
        self.pending[:0] = batch[:room]


class Trace:
    """This process's trace buffers (reads, and the audit's requests) and their writer, and the read pages."""

    def __init__(self, db: Database, cursors: CursorCodec, flush_interval: float = 1.0,
                 capacity: int = 10_000) -> None:
        self.db = db
        self.cursors = cursors
        self.flush_interval = flush_interval
        self.accept = 1.5 * flush_interval  # a row written later than this after its read is re-placed
        self.settle = 2 * flush_interval  # pages show reads older than this
        self.reads = Buffer("trace", q.record_reads, WRITTEN, WRITE_FAILURES, DROPPED, capacity)
        self.requests = Buffer("audit", q.record_requests, AUDITED, AUDIT_FAILURES, AUDIT_DROPPED, capacity)
        # A tick names one row uniquely across processes and restarts: a counter from a random start in
        # 2^62 (two processes' ranges of a billion rows each overlap with odds of about 2^-32).
        self._ticks = itertools.count(int.from_bytes(os.urandom(8), "big") >> 2)

    @property
    def pending(self) -> list[tuple[Any, ...]]:
        """The reads buffered, not yet written."""
        return self.reads.pending

    @pending.setter
    def pending(self, rows: list[tuple[Any, ...]]) -> None:
        self.reads.pending = rows

    def record(self, cred: Credential, run: str, at_us: int, object_id: str | None, route: str, status: int,
               size: int, request: str | None) -> None:
        """Buffer one read (no I/O); dropped, and counted, when the buffer is full."""
        self.reads.add((cred.key_id, cred.secret_sha256, next(self._ticks), run, at_us,
                        None if object_id is None else _storable(object_id[:_OBJECT_CHARS]), route, status, size,
                        request))

    def record_request(self, cred: Credential, run: str | None, at_us: int, method: str, route: str, status: int,
                       object_ids: list[str], namespace: str | None, params: dict[str, Any] | None,
                       returned: list[str] | None, request: str | None) -> None:
        """Buffer one audited request (no I/O; service/audit.py); dropped, and counted, when the buffer is full."""
        self.requests.add((cred.key_id, cred.secret_sha256, next(self._ticks), run, at_us, method, route, status,
                           object_ids, None if namespace is None else _storable(namespace[:_OBJECT_CHARS]),
                           params, returned, request))

    async def flush(self) -> int:
        """Write both buffers, one statement each; returns the reads written (see Buffer.flush)."""
        await self.requests.flush(self.db, self.accept)
        return await self.reads.flush(self.db, self.accept)

    async def flush_forever(self) -> None:
        """Flush every `flush_interval` seconds, measured from one flush's start to the next."""
        while True:
            started = time.monotonic()
            await self.flush()
            await asyncio.sleep(max(0.0, self.flush_interval - (time.monotonic() - started)))

    # ---- the pages -----------------------------------------------------------------------

    @staticmethod
    def _page(pager: Pager, tenant: str, rows: list[tuple[Read, q.ReadPosition]], limit: int) -> ReadPage:
        """Like the event log, always a next cursor, to tail a live run."""
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, lambda r: list(r[1]),
                                                  tail=list(pager.after or START))
        return ReadPage(data=[read for read, _ in shown], next_cursor=next_cursor, has_more=has_more)

    async def run_reads(self, cred: Credential, run: str, cursor: str | None, limit: int) -> ReadPage:
        """A run's reads in the order they were made. A run with no reads in the key's tenant (never used,
        or another tenant's) is an empty page: run IDs are labels the client chooses, not objects."""
        pager = self.cursors.pager(cursor, q.ReadPosition, "run_reads", run)
        async with self.db.connection() as conn:
            tenant, rows = await q.run_reads(conn, cred, run, self.settle, pager.after, limit + 1)
        return self._page(pager, tenant, rows, limit)

    async def object_reads(self, cred: Credential, object_id: str, cursor: str | None, limit: int) -> ReadPage:
        """The reads of one object, each naming its run. 404 like GET /ids/{id} when the ID never existed in
        the key's tenant; a deleted or expired object's reads are still served (200): they are the audit of
        who read it before it went."""
        kind = ids.kind_of(object_id)
        if kind is None:  # a malformed ID is a miss, but only for a valid key: 401 first
            async with tenancy.session(self.db, cred, "read"):
                raise not_found(object_id, "recall")
        pager = self.cursors.pager(cursor, q.ReadPosition, "object_reads", object_id)
        async with self.db.connection() as conn:
            tenant, state, rows = await q.object_reads(conn, cred, kind, object_id, self.settle, pager.after,
                                                       limit + 1)
        page = self._page(pager, tenant, rows, limit)
        if state is State.MISSING:
            require_live(state, object_id, kind)
        return page


def _storable(object_id: str) -> str:
    """The path's ID as PostgreSQL text can hold it: no NUL, no lone surrogate (each becomes U+FFFD)."""
    if object_id.isascii() and "\x00" not in object_id:
        return object_id
    return object_id.encode("utf-8", "surrogatepass").decode("utf-8", "replace").replace("\x00", "\ufffd")


def run_of(scope: dict[str, Any]) -> str | None:
    """The run a GET joins (its X-Recall-Run header), None when it carries none; 400 when malformed."""
    run = next((v for k, v in scope["headers"] if k == _RUN_HEADER), None)
    if run is None:
        return None
    run = run.decode("latin-1")
    if not ids.RUN_RE.match(run):
        raise BadRequest(f"{RUN_HEADER} must be 1-128 characters from [A-Za-z0-9._:-].", header=RUN_HEADER)
    return run


async def traced(trace: Trace, run: str, cred: Credential, object_id: str | None, route: str,
                 scope: dict[str, Any], answer: Any, send: Any) -> None:
    """Run `answer(send)`, then record the read: its status and the body bytes it sent (never a 401: a key
    the database refused has no tenant to trace it in)."""
    at_us = time.time_ns() // 1000
    status, size = 500, 0

    async def counting(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            size += len(message.get("body", b""))
        await send(message)

    try:
        await answer(counting)
    finally:
        if status != 401:
            trace.record(cred, run, at_us, object_id, route, status, size, request_id(scope))


class TraceReads:
    """Middleware of the protected routes (after RequireKey): records each GET that carries X-Recall-Run.

    A read without the header costs one scan of the headers; with it, a wrapped `send` that keeps the
    status and counts the body bytes, and an append to the buffer at the end. (direct.Direct
    records the reads it answers itself with the same two functions.)
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        run = run_of(scope) if scope["method"] == "GET" and scope["route_handler"].opt.get("trace", True) else None
        if run is None:
            await self.app(scope, receive, send)
            return
        params = scope.get("path_params")
        await traced(scope["app"].state.service.trace, run, scope["state"]["credential"],
                     next(iter(params.values())) if params else None, scope["path_template"], scope,
                     lambda counting: self.app(scope, receive, counting), send)
