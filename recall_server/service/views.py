"""The reads of the recall graph: an object's view by ID (one table from kind to its fetch and its renderer),
its content, what an ID resolves to, and the lists of threads, events and reports."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from recall_server import ids, spill
from recall_server.auth import Credential
from recall_server.content import ContentCache
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import not_found, require_live
from recall_server.ids import State
from recall_server.models import (
    EventPage,
    MemoryView,
    ReportPage,
    ReportView,
    Resolved,
    ThreadPage,
    ThreadView,
    TriggerView,
    WorkerView,
)
from recall_server.observability import CONTENT_CACHE
from recall_server.rows import Content, Labels
from recall_server.service.inputs import bound

Fetch = Callable[[q.Conn, Credential, str, int], Awaitable[tuple[str, Any]]]

# kind -> (its read by ID for a budget, in one statement with the key check; its renderer). Every kind has
# an entry: a kind missing here is a programming error (KeyError), never another kind's view.
VIEWS: dict[str, tuple[Fetch, Callable[[Any, int], Any]]] = {
    "thread": (lambda conn, cred, i, budget: q.fetch_thread(conn, cred, i, spill.recent_limit(budget)),
               spill.thread_view),
    "worker": (lambda conn, cred, i, budget: q.fetch_worker(conn, cred, i, spill.recent_limit(budget)),
               spill.worker_view),
    "trigger": (lambda conn, cred, i, budget: q.fetch_trigger(conn, cred, i, budget, spill.PREVIEW_BYTES),
                spill.trigger_view),
    "report": (lambda conn, cred, i, budget: q.fetch_report(conn, cred, i, budget, spill.PREVIEW_BYTES),
               spill.report_view),
    "memory": (lambda conn, cred, i, budget: q.fetch_memory(conn, cred, i, budget, spill.PREVIEW_BYTES),
               spill.memory_view),
}


class Views:
    """The reads by ID and the core lists, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec, contents: ContentCache) -> None:
        self.db = db
        self.cursors = cursors
        self.contents = contents  # this process's cache of content bytes, checked by SHA-256 on every read

    async def view(self, conn: q.Conn, cred: Credential, object_id: str, budget: int, *,
                   created: bool = False) -> Any:
        """The inline view of any object, in one statement with the key check; 404 if it never existed,
        410 if it is gone. `created`: the response to the create itself, shown even if a short ttl has
        already run out."""
        kind = ids.kind_of(object_id)
        if kind is None:  # the routes answer a malformed ID before this; here it is a programming error
            raise ValueError(f"not a recall ID: {object_id!r}")
        fetch, render = VIEWS[kind]
        _, row = await fetch(conn, cred, object_id, budget)
        state = State.MISSING if row is None else State.GONE if row.gone and not created else State.LIVE
        require_live(state, object_id, kind)
        return render(row, budget)

    async def authenticated_miss(self, cred: Credential, kind: str, object_id: str) -> None:
        """A malformed or wrong-kind ID is a miss, decided without a read, but only for a valid key: 401 first."""
        if ids.kind_of(object_id) != kind:
            async with tenancy.session(self.db, cred, "read"):
                raise not_found(object_id, kind)

    async def read(self, cred: Credential, kind: str, object_id: str, budget: int) -> Any:
        """GET of one object of `kind`: its view, on a pooled connection."""
        await self.authenticated_miss(cred, kind, object_id)
        async with self.db.connection() as conn:
            return await self.view(conn, cred, object_id, budget)

    async def get_thread(self, cred: Credential, thread_id: str, budget: int) -> ThreadView:
        return await self.read(cred, "thread", thread_id, budget)

    async def get_worker(self, cred: Credential, worker_id: str, budget: int) -> WorkerView:
        return await self.read(cred, "worker", worker_id, budget)

    async def get_trigger(self, cred: Credential, trigger_id: str, budget: int) -> TriggerView:
        return await self.read(cred, "trigger", trigger_id, budget)

    async def get_report(self, cred: Credential, report_id: str, budget: int) -> ReportView:
        return await self.read(cred, "report", report_id, budget)

    async def get_memory(self, cred: Credential, memory_id: str, budget: int) -> MemoryView:
        return await self.read(cred, "memory", memory_id, budget)

    # ---- content -----------------------------------------------------------------------

    async def content(self, cred: Credential, kind: str, object_id: str) -> Content:
        """The content, with the bytes from this process's cache when the database says they are the same."""
        await self.authenticated_miss(cred, kind, object_id)
        cached = self.contents.get(cred.key_id, object_id)  # only ever this key's tenant's entry
        async with self.db.connection() as conn:
            tenant, content = await q.fetch_content(conn, cred, kind, object_id, cached[0] if cached else None)
        require_live(State.MISSING if content is None else State.of(content.gone), object_id, kind)
        assert content is not None
        if content.data is None and cached is not None:  # same SHA-256 as the cached bytes
            content.data = cached[1]
            CONTENT_CACHE.labels("hit").inc()
        else:
            self.contents.put(tenant, cred.key_id, object_id, content.sha256, content.data)
            CONTENT_CACHE.labels("miss").inc()
        return content

    async def get_payload(self, cred: Credential, trigger_id: str) -> Content:
        return await self.content(cred, "trigger", trigger_id)

    async def get_body(self, cred: Credential, report_id: str) -> Content:
        return await self.content(cred, "report", report_id)

    async def get_memory_value(self, cred: Credential, memory_id: str) -> Content:
        return await self.content(cred, "memory", memory_id)

    async def resolve(self, cred: Credential, value: str) -> Resolved:
        kind = ids.kind_of(value)
        if kind is None:
            await self.authenticated_miss(cred, "recall", value)
        async with self.db.connection() as conn:
            state, found = await q.resolve(conn, cred, kind, value)
        require_live(state, value, kind)
        return found

    # ---- lists -------------------------------------------------------------------------

    async def list_threads(self, cred: Credential, status: str | None, owner: str | None, labels: Labels,
                           namespace: str | None, cursor: str | None, limit: int) -> ThreadPage:
        pager = self.cursors.pager(cursor, tuple[datetime, str], "threads", status, owner, labels.key(), namespace)
        async with self.db.connection() as conn:
            tenant, rows = await q.list_threads(conn, cred, status, owner, labels, namespace, pager.after, limit + 1)
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, _newest_first)
        return ThreadPage([entry for entry, _ in shown], next_cursor, has_more)

    async def list_events(self, cred: Credential, thread_id: str, cursor: str | None, limit: int,
                          as_of: str | None = None) -> EventPage:
        at = bound("as_of", as_of)
        await self.authenticated_miss(cred, "thread", thread_id)
        pager = self.cursors.pager(cursor, tuple[int], "events", thread_id, *([at] if at else []))
        after = (pager.after or (0,))[0]
        async with self.db.connection() as conn:
            tenant, state, events = await q.list_events(conn, cred, thread_id, after, limit + 1, at)
        # Always hand back a position: a caller tailing a live thread polls with it for new events.
        shown, next_cursor, has_more = pager.page(tenant, events, limit, lambda e: [e.seq], tail=[after])
        require_live(state, thread_id, "thread")
        return EventPage(data=shown, next_cursor=next_cursor, has_more=has_more)

    async def list_reports(self, cred: Credential, worker_id: str, labels: Labels, cursor: str | None,
                           limit: int) -> ReportPage:
        await self.authenticated_miss(cred, "worker", worker_id)
        pager = self.cursors.pager(cursor, tuple[datetime, str], "reports", worker_id, labels.key())
        async with self.db.connection() as conn:
            tenant, state, rows = await q.list_reports(conn, cred, worker_id, labels, pager.after, limit + 1)
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, _newest_first)
        require_live(state, worker_id, "worker")
        return ReportPage([entry for entry, _ in shown], next_cursor, has_more)


def _newest_first(row: tuple[Any, datetime]) -> list[Any]:
    """The keyset position of an entry of a list read newest first: (created_at, id)."""
    return [row[1], row[0].id]
