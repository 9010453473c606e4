"""The operations behind the HTTP API: one async method each; validates links, owns transactions, renders views.

The mechanisms they share live in their own modules: tenant binding in db/tenancy.py, cursors in
cursor.py (Pager), Idempotency-Key in idempotency.py, 404/410 in errors.require_live.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import msgspec

import anyio

from recall_server import errors, grep, ids, idempotency, ops, spill
from recall_server.auth import Credential
from recall_server.coalesce import Coalescer
from recall_server.config import Settings
from recall_server.content import ContentCache
from recall_server.observability import CONTENT_CACHE
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import (
    BadRequest,
    Conflict,
    NotFound,
    Unprocessable,
    UnsupportedMediaType,
    not_found,
    require_live,
)
from recall_server.ids import State
from recall_server.models import (
    MAX_LINKS,
    AssignOwner,
    CreateHook,
    Backlink,
    BacklinkPage,
    GrepResult,
    SearchHit,
    SearchPage,
    CreateKey,
    CreateNote,
    CreateReport,
    CreateThread,
    CreateTrigger,
    CreateWorker,
    Delivery,
    EventPage,
    HookList,
    HookView,
    KeyList,
    KeyView,
    NewHook,
    NewKey,
    ReportPage,
    ReportView,
    Request,
    Resolved,
    ThreadPage,
    ThreadView,
    TriggerView,
    UpdateThread,
    WorkerView,
)
from recall_server.rows import Content, Labels, Outcome, TriggerRow
from recall_server.webhooks import github, signing

Creatable = CreateThread | CreateWorker | CreateTrigger | CreateReport
_json = msgspec.json.encode


def _labels(req: Creatable) -> Labels:
    return Labels(app_id=req.app_id, agent_id=req.agent_id, run_id=req.run_id)


def _hash(req: Request) -> bytes:
    return hashlib.sha256(_json(req)).digest()


def _encode_content(field: str, value: object, content_type: str | None) -> tuple[str, bytes]:
    """The exact bytes to store and serve: JSON text for JSON types, the string's UTF-8 otherwise."""
    if content_type is None:
        content_type = "text/plain" if isinstance(value, str) else "application/json"
    content_type = content_type.lower()
    if spill.is_json(content_type):
        return content_type, _json(value)
    if not isinstance(value, str):
        raise Unprocessable(
            f"{field} must be a JSON string when content_type is {content_type} (only JSON types take other values).",
            field=field,
        )
    return content_type, value.encode()


def _timestamp(field: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = msgspec.convert(value, datetime)
    except msgspec.ValidationError:
        raise BadRequest(f"{field} must be an RFC 3339 date-time, got {value!r}.", field=field) from None
    if parsed.tzinfo is None:
        raise BadRequest(f"{field} must carry a UTC offset (e.g. 2026-11-30T12:00:00Z).", field=field)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise BadRequest(f"{field} is out of range: {value!r}.", field=field) from None


def _expiry(req: Creatable) -> datetime | None:
    """expires_at from `ttl` (seconds from now) or `expires_at`; at most one of them."""
    if req.ttl is not None and req.expires_at is not None:
        raise Unprocessable("Give either ttl or expires_at, not both.")
    if req.ttl is not None:
        return datetime.now(UTC) + timedelta(seconds=req.ttl)
    expires_at = _timestamp("expires_at", req.expires_at)
    if expires_at is not None and expires_at <= datetime.now(UTC):
        raise Unprocessable(f"expires_at {req.expires_at} is in the past.", field="expires_at")
    return expires_at


def _one_line(text: str, limit: int = 300) -> str:
    """A snippet as one line: control characters (newlines too) become spaces, runs of spaces one."""
    flat = " ".join("".join(" " if ord(c) < 32 or 127 <= ord(c) < 160 else c for c in text).split())
    return flat if len(flat) <= limit else flat[:limit - 1] + "…"


def _created(status_new: bool, view: Any, location: str) -> Outcome:
    return Outcome(status=201 if status_new else 200, body=_json(view), object_id=view.id, location=location)


class Recall:
    """The operations behind the HTTP API, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec, settings: Settings) -> None:
        """`settings`: the retention periods (Idempotency-Key outcomes, trace reads, webhook deliveries)
        and the content cache's size; config.py holds their defaults."""
        self.db = db
        self.trace_ttl = settings.trace_ttl
        self.delivery_ttl = settings.delivery_ttl
        self.cursors = cursors
        self.idempotency_ttl = settings.idempotency_ttl
        self.contents = ContentCache(settings.content_cache_bytes)
        # Concurrent plain writes of one key, each kind in one statement: triggers, triggers on threads (whatever
        # the threads) and notes
        self.triggers = Coalescer(self._pooled(q.ingest_many))
        self.filings = Coalescer(self._pooled(q.file_on_threads))
        self.notes = Coalescer(self._pooled(q.note_many))

    def _pooled(self, write_batch: Callable[[q.Conn, Credential, list[Any]], Awaitable[list[Any]]]
                ) -> Callable[[Credential, list[Any]], Awaitable[list[Any]]]:
        """`write_batch` on a pooled connection: what a Coalescer runs."""
        async def run(cred: Credential, items: list[Any]) -> list[Any]:
            async with self.db.connection() as conn:
                return await write_batch(conn, cred, items)

        return run

    # ---- shared steps ----------------------------------------------------------------

    async def _require(self, conn: q.Conn, tenant: str, linked: list[str],
                       known: dict[str, State] | None = None) -> None:
        """No dangling edges: every linked ID must exist, and still be there, in the caller's tenant.
        `known`: states the caller has just read (under a row lock), not asked for again."""
        found = dict(known or {})
        unknown = [i for i in linked if i not in found]
        if unknown:
            found.update(await q.states(conn, tenant, unknown))
        dangling = [i for i in dict.fromkeys(linked) if found[i] is not State.LIVE]
        if dangling:
            raise Unprocessable(f"Linked IDs do not exist: {', '.join(dangling)}.", missing=dangling)

    async def _existing_or_conflict(self, conn: q.Conn, tenant: str, kind: str, object_id: str, h: bytes) -> None:
        """A create that hit an existing ID: identical request is a retry, anything else a clash."""
        state, found = await q.request_hash(conn, tenant, kind, object_id)
        if state is State.GONE:
            raise Conflict(f"{object_id} was deleted or has expired; its ID is retired and is never reused.",
                           id=object_id)
        if found != h:
            raise Conflict(f"{object_id} already exists with a different body; IDs are never reassigned.",
                           id=object_id)

    async def _write(self, cred: Credential, idempotency_key: str | None, fingerprint: bytes,
                     operation: Callable[[q.Conn, str], Awaitable[Outcome]]) -> Outcome:
        """Run a write in one transaction bound to the key's tenant, at most once per Idempotency-Key."""
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):

            async def render(object_id: str) -> bytes:
                return _json(await self._view(conn, cred, object_id, spill.DEFAULT_BUDGET))

            return await idempotency.once(conn, tenant, idempotency_key, fingerprint, self.idempotency_ttl,
                                          lambda: operation(conn, tenant), render)

    async def _view(self, conn: q.Conn, cred: Credential, object_id: str, budget: int, *,
                    created: bool = False) -> Any:
        """The inline view of any object, in one statement with the key check; 404 if it never existed,
        410 if it is gone. `created`: the response to the create itself, shown even if a short ttl has
        already run out."""
        kind = ids.kind_of(object_id)
        if kind == "thread":
            _, row = await q.fetch_thread(conn, cred, object_id, spill.recent_limit(budget))
            render: Any = spill.thread_view
        elif kind == "worker":
            (_, row), render = await q.fetch_worker(conn, cred, object_id, spill.recent_limit(budget)), spill.worker_view
        elif kind == "trigger":
            _, row = await q.fetch_trigger(conn, cred, object_id, budget, spill.PREVIEW_BYTES)
            render = spill.trigger_view
        else:
            _, row = await q.fetch_report(conn, cred, object_id, budget, spill.PREVIEW_BYTES)
            render = spill.report_view
        state = State.MISSING if row is None else State.GONE if row.gone and not created else State.LIVE
        require_live(state, object_id, kind or "recall")
        return render(row, budget)

    async def _authenticated_miss(self, cred: Credential, kind: str, object_id: str) -> None:
        """A malformed or wrong-kind ID is a miss, decided without a read, but only for a valid key: 401 first."""
        if ids.kind_of(object_id) != kind:
            async with tenancy.session(self.db, cred, "read"):
                raise not_found(object_id, kind)

    async def _read_view(self, cred: Credential, kind: str, object_id: str, budget: int) -> Any:
        await self._authenticated_miss(cred, kind, object_id)
        async with self.db.connection() as conn:
            return await self._view(conn, cred, object_id, budget)

    # ---- reads -----------------------------------------------------------------------

    async def get_thread(self, cred: Credential, thread_id: str, budget: int) -> ThreadView:
        return await self._read_view(cred, "thread", thread_id, budget)

    async def get_worker(self, cred: Credential, worker_id: str, budget: int) -> WorkerView:
        return await self._read_view(cred, "worker", worker_id, budget)

    async def get_trigger(self, cred: Credential, trigger_id: str, budget: int) -> TriggerView:
        return await self._read_view(cred, "trigger", trigger_id, budget)

    async def get_report(self, cred: Credential, report_id: str, budget: int) -> ReportView:
        return await self._read_view(cred, "report", report_id, budget)

    async def _content(self, cred: Credential, kind: str, object_id: str) -> Content:
        """The content, with the bytes from this process's cache when the database says they are the same."""
        await self._authenticated_miss(cred, kind, object_id)
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
        return await self._content(cred, "trigger", trigger_id)

    async def get_body(self, cred: Credential, report_id: str) -> Content:
        return await self._content(cred, "report", report_id)

    async def resolve(self, cred: Credential, value: str) -> Resolved:
        kind = ids.kind_of(value)
        if kind is None:
            await self._authenticated_miss(cred, "recall", value)
        async with self.db.connection() as conn:
            state, found = await q.resolve(conn, cred, kind, value)
        require_live(state, value, kind)
        return found

    async def list_threads(self, cred: Credential, status: str | None, owner: str | None, labels: Labels,
                           cursor: str | None, limit: int) -> ThreadPage:
        pager = self.cursors.pager(cursor, tuple[datetime, str], "threads", status, owner, labels.key())
        async with self.db.connection() as conn:
            tenant, rows = await q.list_threads(conn, cred, status, owner, labels, pager.after, limit + 1)
        return ThreadPage(*pager.keyset(tenant, rows, limit))

    async def list_events(self, cred: Credential, thread_id: str, cursor: str | None, limit: int) -> EventPage:
        await self._authenticated_miss(cred, "thread", thread_id)
        pager = self.cursors.pager(cursor, tuple[int], "events", thread_id)
        after = (pager.after or (0,))[0]
        async with self.db.connection() as conn:
            tenant, state, events = await q.list_events(conn, cred, thread_id, after, limit + 1)
        pager.verify(tenant)
        require_live(state, thread_id, "thread")
        has_more = len(events) > limit
        events = events[:limit]
        # Always hand back a position: a caller tailing a live thread polls with it for new events.
        position = events[-1].seq if events else after
        return EventPage(data=events, next_cursor=pager.next(tenant, [position]), has_more=has_more)

    async def list_reports(self, cred: Credential, worker_id: str, labels: Labels, cursor: str | None,
                           limit: int) -> ReportPage:
        await self._authenticated_miss(cred, "worker", worker_id)
        pager = self.cursors.pager(cursor, tuple[datetime, str], "reports", worker_id, labels.key())
        async with self.db.connection() as conn:
            tenant, state, rows = await q.list_reports(conn, cred, worker_id, labels, pager.after, limit + 1)
        pager.verify(tenant)
        require_live(state, worker_id, "worker")
        return ReportPage(*pager.keyset(tenant, rows, limit))

    # ---- finding and navigating the graph: search, backlinks, grep -------------------------

    async def search(self, cred: Credential, text: str, kinds: list[str] | None, status: str | None,
                     labels: Labels, since: str | None, until: str | None, cursor: str | None,
                     limit: int) -> SearchPage:
        """Live objects whose text matches `text` (websearch syntax), best first, then newest."""
        if not text.strip():
            raise BadRequest("q must contain something to search for.", field="q")
        wanted = sorted(set(kinds or ids.PLURAL))
        if status is not None:  # only threads have a status
            wanted = [k for k in wanted if k == "thread"]
        start, end = _timestamp("since", since), _timestamp("until", until)
        pager = self.cursors.pager(cursor, tuple[Decimal, datetime, str], "search", text, ",".join(wanted), status,
                                   labels.key(), start, end)
        after = pager.after
        if after is not None and not (after[0].is_finite() and 0 <= after[0] < 1_000_000):
            after = None  # never a signed position: read from the start, and verify's 400 follows
        async with self.db.connection() as conn:
            tenant, hits = await q.search(conn, cred, text, wanted, status, labels, start, end, after, limit + 1)
        pager.verify(tenant)
        has_more = len(hits) > limit
        hits = hits[:limit]
        data = [SearchHit(id=h.id, type=h.type, summary=h.summary, href=ids.href(h.id), score=h.score,  # type: ignore[arg-type]
                          snippet=_one_line(h.snippet or h.summary), thread_id=h.thread_id) for h in hits]
        last = hits[-1] if hits else None
        next_cursor = pager.next(tenant, [Decimal(last.position), last.created_at, last.id]) if has_more and last \
            else None
        return SearchPage(data=data, next_cursor=next_cursor, has_more=has_more)

    async def backlinks(self, cred: Credential, object_id: str, cursor: str | None, limit: int) -> BacklinkPage:
        """Every live object that links to this one, with the relation, in (relation, id) order."""
        kind = ids.kind_of(object_id)
        if kind is None:
            await self._authenticated_miss(cred, "recall", object_id)
        assert kind is not None
        pager = self.cursors.pager(cursor, tuple[str, str], "backlinks", object_id)
        async with self.db.connection() as conn:
            tenant, state, rows = await q.backlinks(conn, cred, kind, object_id, pager.after, limit + 1)
        pager.verify(tenant)
        require_live(state, object_id, kind)
        has_more = len(rows) > limit
        rows = rows[:limit]
        data = [Backlink(id=r.id, type=r.type, relation=r.relation, summary=r.summary,  # type: ignore[arg-type]
                         href=ids.href(r.id)) for r in rows]
        next_cursor = pager.next(tenant, [rows[-1].relation, rows[-1].id]) if has_more else None
        return BacklinkPage(data=data, next_cursor=next_cursor, has_more=has_more)

    async def grep(self, cred: Credential, kind: str, object_id: str, pattern: str, regex: bool, context: int,
                   max_matches: int) -> GrepResult:
        """Matching lines of a payload or body, with line numbers, byte offsets and a Range for each."""
        found = grep.matcher(pattern, regex)  # a bad pattern is a 400 before anything is read
        content = await self._content(cred, kind, object_id)
        data = content.data or b""
        if not (content.content_type.startswith("text/") or spill.is_json(content.content_type)):
            raise UnsupportedMediaType(
                f"{object_id}'s content is {content.content_type}; grep reads text/* and JSON content only. "
                "Read it with a Range request instead.", id=object_id)
        if len(data) > 64 * 1024:  # bounded, but long enough to keep off the event loop
            result = await anyio.to_thread.run_sync(grep.grep, data, found, context, max_matches)
        else:
            result = grep.grep(data, found, context, max_matches)
        href = f"/triggers/{object_id}/payload" if kind == "trigger" else f"/reports/{object_id}/body"
        return GrepResult(id=object_id, content_type=content.content_type, bytes=len(data), scanned=result.scanned,
                          matches=result.matches, truncated=result.truncated, href=href)

    # ---- creates ---------------------------------------------------------------------

    async def create_thread(self, cred: Credential, req: CreateThread, idempotency_key: str | None) -> Outcome:
        thread_id = req.id or ids.new("thread")
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=thread_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            created = await q.insert_thread(conn, tenant, thread_id, req.title, req.summary, req.status,
                                            _labels(req), h, expires_at)
            if not created:
                await self._existing_or_conflict(conn, tenant, "thread", thread_id, h)
            return _created(created, await self._view(conn, cred, thread_id, spill.DEFAULT_BUDGET, created=created),
                            f"/threads/{thread_id}")

        return await self._write(cred, idempotency_key, idempotency.fingerprint("POST", "/threads", req), operation)

    async def create_worker(self, cred: Credential, req: CreateWorker, idempotency_key: str | None) -> Outcome:
        worker_id = req.id or ids.new("worker")
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=worker_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            created = await q.insert_worker(conn, tenant, worker_id, req.name, req.summary, _labels(req), h,
                                            expires_at)
            if not created:
                await self._existing_or_conflict(conn, tenant, "worker", worker_id, h)
            return _created(created, await self._view(conn, cred, worker_id, spill.DEFAULT_BUDGET, created=created),
                            f"/workers/{worker_id}")

        return await self._write(cred, idempotency_key, idempotency.fingerprint("POST", "/workers", req), operation)

    async def create_trigger(self, cred: Credential, req: CreateTrigger, idempotency_key: str | None) -> Outcome:
        trigger_id = req.id or ids.new("trigger")
        if trigger_id in req.neighbours:
            raise Unprocessable("A trigger cannot be its own neighbour.", id=trigger_id)
        content_type, payload = _encode_content("payload", req.payload, req.content_type)
        occurred_at = _timestamp("occurred_at", req.occurred_at)
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=trigger_id))
        if idempotency_key is None and not req.neighbours:  # the plain case: one statement
            trigger = q.NewTrigger(trigger_id, req.source, req.summary, content_type, payload,
                                   hashlib.sha256(payload).digest(), h, occurred_at, req.app_id, req.agent_id,
                                   req.run_id, req.external_id, expires_at)
            # shared with the key's other plain triggers arriving meanwhile (on threads, or not)
            written = await (self.triggers.submit(cred, trigger) if req.thread_id is None
                             else self.filings.submit(cred, (req.thread_id, trigger)))
            if written is not None:
                return _created(True, self._new_trigger_view(trigger_id, req, content_type, payload, *written),
                                f"/triggers/{trigger_id}")

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            created, existing_id = await self._file_trigger(conn, tenant, trigger_id, req, content_type, payload,
                                                            occurred_at, expires_at, h)
            return _created(created, await self._view(conn, cred, existing_id, spill.DEFAULT_BUDGET, created=created),
                            f"/triggers/{existing_id}")

        return await self._write(cred, idempotency_key, idempotency.fingerprint("POST", "/triggers", req), operation)

    @staticmethod
    def _new_trigger_view(trigger_id: str, req: CreateTrigger, content_type: str, payload: bytes,
                          occurred_at: datetime, created_at: datetime, expires_at: datetime | None) -> TriggerView:
        """The view of a trigger just filed without neighbours, from the request and what the insert returned:
        what fetch_trigger reads back. The row holds the whole payload: spill cuts its preview, the one it
        cuts from what fetch_trigger reads (the same head and tail)."""
        row = TriggerRow(id=trigger_id, source=req.source, thread_id=req.thread_id, summary=req.summary,
                         content_type=content_type, size=len(payload), head=payload, tail=b"", occurred_at=occurred_at,
                         created_at=created_at, neighbours=[], app_id=req.app_id, agent_id=req.agent_id,
                         run_id=req.run_id, expires_at=expires_at)
        return spill.trigger_view(row, spill.DEFAULT_BUDGET)

    async def _file_trigger(self, conn: q.Conn, tenant: str, trigger_id: str, req: CreateTrigger, content_type: str,
                            payload: bytes, occurred_at: datetime | None, expires_at: datetime | None,
                            h: bytes, thread: State | None = None) -> tuple[bool, str]:
        """A trigger's write steps (POST /triggers and webhook deliveries): (created, its ID, which on a
        redelivery of the same (source, external_id) is the first delivery's trigger). `thread`: the
        state of req.thread_id when the caller holds its row lock already."""
        known: dict[str, State] = {}
        if req.thread_id:  # its row lock orders this filing against a concurrent delete or close
            known[req.thread_id] = thread if thread is not None else await q.lock_thread(conn, tenant, req.thread_id)
        await self._require(conn, tenant, [*known, *req.neighbours], known)
        created = await q.insert_trigger(  # with its trigger_filed event
            conn, tenant, trigger_id, req.source, req.thread_id, req.summary, content_type, payload,
            hashlib.sha256(payload).digest(), _labels(req), h, occurred_at, req.external_id, expires_at,
        )
        if created:
            if req.neighbours:  # most triggers have none: no round trip for an empty insert
                await q.insert_neighbours(conn, tenant, trigger_id, list(dict.fromkeys(req.neighbours)))
            return True, trigger_id
        if req.external_id is not None and (
            first := await q.trigger_by_external_id(conn, tenant, req.source, req.external_id)
        ):
            return False, first  # a redelivery: the trigger made by the first delivery
        await self._existing_or_conflict(conn, tenant, "trigger", trigger_id, h)
        return False, trigger_id

    async def create_report(self, cred: Credential, worker_id: str, req: CreateReport,
                            idempotency_key: str | None) -> Outcome:
        report_id = req.id or ids.new("report")
        content_type, body = _encode_content("body", req.body, req.content_type)
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=report_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            if ids.kind_of(worker_id) != "worker":
                raise not_found(worker_id, "worker")
            require_live(await q.state(conn, tenant, worker_id), worker_id, "worker")
            thread = await q.lock_thread(conn, tenant, req.thread_id)  # ordered against a concurrent delete or close
            await self._require(conn, tenant, [req.thread_id, *req.refs], {req.thread_id: thread})
            created = await q.insert_report(
                conn, tenant, report_id, worker_id, req.thread_id, req.summary, content_type, body,
                hashlib.sha256(body).digest(), _labels(req), h, expires_at,
            )
            if created:
                if req.refs:
                    await q.insert_refs(conn, tenant, report_id, req.refs)
                await q.append_event(conn, tenant, req.thread_id, "report_filed", req.summary, report_id)
                await q.rebuild_worker_head(conn, tenant, worker_id)
            else:
                await self._existing_or_conflict(conn, tenant, "report", report_id, h)
            return _created(created, await self._view(conn, cred, report_id, spill.DEFAULT_BUDGET, created=created),
                            f"/reports/{report_id}")

        path = f"/workers/{worker_id}/reports"
        return await self._write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    # ---- thread writes ---------------------------------------------------------------

    async def _locked_thread(self, conn: q.Conn, tenant: str, thread_id: str) -> None:
        """Take the thread's row lock (it serialises appends); 404 / 410 when it is missing / gone."""
        if ids.kind_of(thread_id) != "thread":
            raise not_found(thread_id, "thread")
        require_live(await q.lock_thread(conn, tenant, thread_id), thread_id, "thread")

    async def update_thread(self, cred: Credential, thread_id: str, req: UpdateThread) -> ThreadView:
        unset = msgspec.UNSET
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            await self._locked_thread(conn, tenant, thread_id)
            await self._change_thread(
                conn, tenant, thread_id,
                None if req.title is unset else req.title,
                None if req.summary is unset else req.summary,
                None if req.status is unset else req.status,
            )
            return await self._view(conn, cred, thread_id, spill.DEFAULT_BUDGET)

    async def _change_thread(self, conn: q.Conn, tenant: str, thread_id: str, title: str | None,
                             summary: str | None, status: str | None) -> None:
        """A thread update's write steps, under the thread's row lock (PATCH /threads and webhook deliveries)."""
        old, new = await q.update_thread(conn, tenant, thread_id, title, summary, status)
        if summary is not None:  # the owners' views show it
            await q.rebuild_owner_heads(conn, tenant, thread_id)
        if old != new:
            await q.append_event(conn, tenant, thread_id, "status_changed", f"status: {old} -> {new}", None)
            await q.cap_expiry(conn, tenant, thread_id)  # closing may have started the retention clock

    async def add_note(self, cred: Credential, thread_id: str, req: CreateNote,
                       idempotency_key: str | None) -> Outcome:
        if idempotency_key is None:  # the plain case: one statement, shared with the key's other plain notes
            written = await self.notes.submit(cred, q.NewNote(thread_id, req.summary, req.ref))
            if written is not None:
                return Outcome(status=201, body=_json(written), object_id=thread_id, event_seq=written.seq)

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            await self._locked_thread(conn, tenant, thread_id)
            if req.ref is not None:
                await self._require(conn, tenant, [req.ref])
            event = await q.append_event(conn, tenant, thread_id, "note", req.summary, req.ref)
            return Outcome(status=201, body=_json(event), object_id=thread_id, event_seq=event.seq)

        path = f"/threads/{thread_id}/events"
        return await self._write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    async def assign_owner(self, cred: Credential, thread_id: str, req: AssignOwner,
                           idempotency_key: str | None) -> Outcome:

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            # The thread's row lock serialises assignments, so the owner cap holds under concurrency.
            await self._locked_thread(conn, tenant, thread_id)
            await self._require(conn, tenant, [req.worker_id])
            created = await q.insert_owner(conn, tenant, thread_id, req.worker_id)
            if created:
                if await q.count_owners(conn, tenant, thread_id) > MAX_LINKS:
                    raise Unprocessable(f"A thread has at most {MAX_LINKS} owner workers.", id=thread_id)
                await q.append_event(conn, tenant, thread_id, "owner_assigned",
                                     f"owner assigned: {req.worker_id}", req.worker_id)
                await q.rebuild_head(conn, tenant, thread_id)  # the new owner, in the view's order
                await q.rebuild_worker_head(conn, tenant, req.worker_id)
            return _created(created, await self._view(conn, cred, thread_id, spill.DEFAULT_BUDGET, created=created),
                            f"/threads/{thread_id}")

        path = f"/threads/{thread_id}/owners"
        return await self._write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    # ---- deletion ----------------------------------------------------------------------

    async def delete(self, cred: Credential, kind: str, object_id: str) -> None:
        """Erase an object (and, for a thread, its log and what was filed on it); its ID is retired.

        Deleting something already gone erases again (a no-op, or the purge an expiry still owed).
        """
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            if ids.kind_of(object_id) != kind or await q.state(conn, tenant, object_id) is State.MISSING:
                raise not_found(object_id, kind)
            await q.erase(conn, tenant, object_id)

    # ---- API keys (admin scope, within the caller's tenant) ---------------------------

    async def check_key(self, cred: Credential) -> None:
        """401 unless the key is live (before a request's body is read: tenancy.verify)."""
        await tenancy.verify(self.db, cred)

    async def own_key(self, cred: Credential) -> KeyView:
        async with self.db.connection() as conn:
            return await q.own_key(conn, cred)

    async def create_key(self, cred: Credential, req: CreateKey) -> NewKey:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return await ops.issue_key(conn, tenant, req.scope, req.label)

    async def list_keys(self, cred: Credential) -> KeyList:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return KeyList(data=await q.list_keys(conn, tenant))

    async def revoke_key(self, cred: Credential, key_id: str) -> KeyView:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            revoked = await q.revoke_key(conn, key_id, tenant)
        if revoked is None:
            raise NotFound(f"No API key with ID {key_id} exists.", id=key_id)
        await tenancy.after_revoking()  # committed: now wait until no process relies on an earlier check
        return revoked

    # ---- webhooks: endpoints (admin scope, within the caller's tenant) and deliveries ----

    async def create_hook(self, cred: Credential, req: CreateHook) -> NewHook:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return await ops.issue_hook(conn, tenant, req.source, req.label)

    async def list_hooks(self, cred: Credential) -> HookList:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            return HookList(data=await q.list_hooks(conn, tenant))

    async def revoke_hook(self, cred: Credential, hook_id: str) -> HookView:
        async with tenancy.session(self.db, cred, "admin") as (conn, tenant):
            revoked = await q.revoke_hook(conn, hook_id, tenant)
        if revoked is None:
            raise NotFound(f"No webhook with ID {hook_id} exists.", id=hook_id)
        return revoked

    async def deliver_github(self, hook_id: str, signature: str | None, event: str | None, delivery: str | None,
                             body: bytes) -> Outcome:
        """A GitHub delivery, in one transaction bound to the hook's tenant once its signature checks out.

        Headers are checked before anything is read (404 malformed hook ID, 401 no signature, 400 no
        event or delivery ID); then the hook (404) and the HMAC (401); then the body is mapped
        (webhooks/github.py). A GUID seen before answers its first result and writes nothing.
        """
        if not signing.is_hook_id(hook_id):
            raise errors.unknown_hook(hook_id)
        mac = signing.parse(signature)
        if mac is None:
            raise errors.bad_signature()
        if event is None or not github.is_event(event):
            raise BadRequest("X-GitHub-Event must name the GitHub event (e.g. pull_request).")
        if delivery is None or not github.is_delivery(delivery):
            raise BadRequest("X-GitHub-Delivery must be the delivery's GUID (1-64 of [A-Za-z0-9-]).")
        async with tenancy.hook_session(self.db, hook_id, "github", body, mac) as (conn, tenant):
            plan = github.plan(event, body)
            result = Delivery(delivery=delivery, event=event, outcome=plan.outcome, action=plan.action)
            if plan.outcome != "filed":
                return Outcome(status=200, body=_json(result), object_id="")
            if not await q.claim_delivery(conn, tenant, hook_id, delivery):
                first = await q.delivery_outcome(conn, tenant, hook_id, delivery)
                assert first is not None
                return msgspec.structs.replace(first, replayed=True)
            outcome = await self._file_github(conn, tenant, delivery, plan, body, result)
            await q.finish_delivery(conn, tenant, hook_id, delivery, outcome)
            return outcome

    async def _file_github(self, conn: q.Conn, tenant: str, delivery: str, plan: github.Plan, body: bytes,
                           result: Delivery) -> Outcome:
        """The delivery as a trigger on its thread (made if missing; 410 if gone), and the thread moved
        to the PR's or issue's state when that state is newer than the last one applied."""
        thread_id, state = plan.thread_id, plan.state
        assert thread_id is not None
        made, thread = await q.ensure_thread(conn, tenant, thread_id, plan.thread_title, plan.thread_summary,
                                             state.status if state else "open",
                                             hashlib.sha256(b"github thread\0" + thread_id.encode()).digest())
        require_live(thread, thread_id, "thread")
        req = CreateTrigger(source=plan.source, thread_id=thread_id, summary=plan.summary,
                            content_type="application/json", external_id=delivery)
        _, trigger_id = await self._file_trigger(conn, tenant, ids.new("trigger"), req, "application/json", body,
                                                 None, None, _hash(req), thread)
        result.thread_id, result.trigger_id = thread_id, trigger_id
        if state is not None:
            if await q.advance_github_thread(conn, tenant, thread_id, state.updated_at, state.status):
                if not made:
                    await self._change_thread(conn, tenant, thread_id, state.title, state.summary, state.status)
                result.thread_state = "applied"
            else:
                result.thread_state = "stale"
        return Outcome(status=201, body=_json(result), object_id=trigger_id, location=f"/triggers/{trigger_id}")

    # ---- the server's own upkeep -----------------------------------------------------------

    async def ready(self) -> None:
        async with self.db.connection() as conn:
            await q.ping(conn)

    async def sweep(self, batch: int = 500) -> int:
        """Purge expired objects in every tenant (the serve loop's periodic sweep)."""
        async with self.db.connection() as conn:
            return await ops.sweep(conn, batch, self.trace_ttl, self.delivery_ttl)
