"""One async function per operation: validates links, owns transactions, renders views."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from recall_server import auth, ids, spill
from recall_server.auth import Credential
from recall_server.content import ContentCache
from recall_server.observability import CONTENT_CACHE
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db.pool import Database
from recall_server.errors import (
    BadRequest,
    Conflict,
    NotFound,
    Unprocessable,
    gone,
    not_found,
)
from recall_server.models import (
    MAX_LINKS,
    AssignOwner,
    CreateKey,
    CreateNote,
    CreateReport,
    CreateThread,
    CreateTrigger,
    CreateWorker,
    EventPage,
    KeyList,
    KeyView,
    Labels,
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

Content = q.Content
Creatable = CreateThread | CreateWorker | CreateTrigger | CreateReport
_json = msgspec.json.encode


class Outcome(msgspec.Struct):
    """The result of a POST, as sent and as stored for Idempotency-Key replays."""

    status: int
    body: bytes
    object_id: str
    location: str | None = None
    event_seq: int | None = None
    replayed: bool = False


def _expect(kind: str, value: str) -> None:
    """A path ID of the wrong shape or kind is a miss, decided without touching the database."""
    if ids.kind_of(value) != kind:
        raise not_found(value, kind)


def _body_id(field: str, value: str, kind: str) -> None:
    if ids.kind_of(value) != kind:
        raise Unprocessable(
            f"{field} must be a {kind} ID ({ids.PREFIX[kind]}_...), got {value!r}.", field=field, id=value
        )


def _labels(req: Creatable) -> Labels:
    return Labels(app_id=req.app_id, agent_id=req.agent_id, run_id=req.run_id)


def _hash(req: Request) -> bytes:
    return hashlib.sha256(_json(req)).digest()


def _fingerprint(method: str, path: str, req: Request) -> bytes:
    """What an Idempotency-Key is bound to: the route and the decoded body."""
    return hashlib.sha256(f"{method} {path}\0".encode() + _json(req)).digest()


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


def _created(status_new: bool, view: Any, location: str) -> Outcome:
    return Outcome(status=201 if status_new else 200, body=_json(view), object_id=view.id, location=location)


class Recall:
    """The operations behind the HTTP API, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec, idempotency_ttl: int = 86_400,
                 content_cache_bytes: int = 64 * 1024 * 1024) -> None:
        self.db = db
        self.cursors = cursors
        self.idempotency_ttl = idempotency_ttl
        self.contents = ContentCache(content_cache_bytes)

    # ---- shared steps ----------------------------------------------------------------

    async def _require(self, conn: q.Conn, tenant: str, linked: list[str]) -> None:
        """No dangling edges: every linked ID must exist, and still be there, in the caller's tenant."""
        if not linked:
            return
        found = await q.existing(conn, tenant, linked)  # id -> gone?
        dangling = [i for i in dict.fromkeys(linked) if found.get(i, True)]
        if dangling:
            raise Unprocessable(f"Linked IDs do not exist: {', '.join(dangling)}.", missing=dangling)

    async def _parent(self, conn: q.Conn, tenant: str, kind: str, object_id: str) -> None:
        """The object a path names must exist (404) and not be gone (410)."""
        state = (await q.existing(conn, tenant, [object_id])).get(object_id)
        if state is None:
            raise not_found(object_id, kind)
        if state:
            raise gone(object_id)

    async def _existing_or_conflict(self, conn: q.Conn, tenant: str, kind: str, object_id: str, h: bytes) -> None:
        """A create that hit an existing ID: identical request is a retry, anything else a clash."""
        found = await q.request_hash(conn, tenant, kind, object_id)
        if found is not None and found[1]:
            raise Conflict(f"{object_id} was deleted or has expired; its ID is retired and is never reused.",
                           id=object_id)
        if found is None or found[0] != h:
            raise Conflict(f"{object_id} already exists with a different body; IDs are never reassigned.",
                           id=object_id)

    async def _write(self, cred: Credential, idempotency_key: str | None, fingerprint: bytes,
                     operation: Callable[[q.Conn, str], Awaitable[Outcome]]) -> Outcome:
        """Run a write in one transaction; with an Idempotency-Key, record its outcome in the same one."""
        async with self.db.session(cred, "write") as (conn, tenant):
            if idempotency_key is None:
                return await operation(conn, tenant)
            if not await q.idempotency_lock(conn, tenant, idempotency_key):
                raise Conflict("A request with this Idempotency-Key is still in flight; retry shortly.",
                               headers={"Retry-After": "1"})
            stored = await q.idempotency_get(conn, tenant, idempotency_key)
            if stored is not None:
                if stored.request_hash != fingerprint:
                    raise Unprocessable("This Idempotency-Key was used for a different request.",
                                        idempotency_key=idempotency_key)
                return await self._replay(conn, tenant, stored)
            outcome = await operation(conn, tenant)
            await q.idempotency_put(
                conn, tenant, idempotency_key,
                q.Stored(request_hash=fingerprint, status=outcome.status, body=outcome.body,
                         location=outcome.location, object_id=outcome.object_id, event_seq=outcome.event_seq),
                self.idempotency_ttl,
            )
            return outcome

    async def _replay(self, conn: q.Conn, tenant: str, stored: q.Stored) -> Outcome:
        """The stored outcome; if an erasure dropped it, what still exists is rendered again (or 410).

        Never the old content of something deleted or expired since: that is 410, sweep or no sweep.
        """
        if (await q.existing(conn, tenant, [stored.object_id])).get(stored.object_id, True):
            raise gone(stored.object_id)
        body = stored.body
        if body is None:
            if stored.event_seq is not None:
                event = await q.event_at(conn, tenant, stored.object_id, stored.event_seq)
                if event is None:
                    raise gone(stored.object_id)
                body = _json(event)
            else:
                body = _json(await self._view(conn, tenant, stored.object_id, spill.DEFAULT_BUDGET))
        return Outcome(status=stored.status, body=body, object_id=stored.object_id, location=stored.location,
                       event_seq=stored.event_seq, replayed=True)

    async def _view(self, conn: q.Conn, who: str | Credential, object_id: str, budget: int, *,
                    created: bool = False) -> Any:
        """The inline view of any object; 404 if it never existed, 410 if it is gone.

        `who` is the tenant of a bound session, or the caller's key: then the key check, the tenant
        binding and the read are one statement (one round trip). `created`: the response to the
        create itself, shown even if a short ttl has already run out.
        """
        kind = ids.kind_of(object_id)
        if kind == "thread":
            row: Any = await q.fetch_thread(conn, who, object_id, spill.recent_limit(budget))
            render: Any = spill.thread_view
        elif kind == "worker":
            row, render = await q.fetch_worker(conn, who, object_id, spill.recent_limit(budget)), spill.worker_view
        elif kind == "trigger":
            row = await q.fetch_trigger(conn, who, object_id, budget, spill.PREVIEW_BYTES)
            render = spill.trigger_view
        else:
            row = await q.fetch_report(conn, who, object_id, budget, spill.PREVIEW_BYTES)
            render = spill.report_view
        if row is None:
            raise not_found(object_id, kind or "recall")
        if row.gone and not created:
            raise gone(object_id)
        return render(row, budget)

    async def _authenticated_miss(self, cred: Credential, kind: str, object_id: str) -> None:
        """A malformed or wrong-kind ID is a miss, but only for a valid key: 401 comes first."""
        if ids.kind_of(object_id) != kind:
            async with self.db.session(cred, "read"):
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
        if content is None:
            raise not_found(object_id, kind)
        if content.gone:
            raise gone(object_id)
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
            async with self.db.session(cred, "read"):  # a malformed ID is a miss, but only for a valid key
                raise not_found(value, "recall")
        async with self.db.connection() as conn:
            found = await q.resolve(conn, cred, kind, value, ids.href(value))
        if found is None:
            raise not_found(value, kind)
        if found[0]:
            raise gone(value)
        return found[1]

    def _keyset_page(self, scope: str, rows: list[tuple[Any, datetime]], limit: int) -> tuple[list[Any], str | None, bool]:
        """(entries, next cursor, has_more) from rows fetched with limit + 1, newest first."""
        has_more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = None
        if has_more:
            last, created_at = rows[-1]
            next_cursor = self.cursors.encode(scope, [created_at, last.id])
        return [entry for entry, _ in rows], next_cursor, has_more

    def _verify(self, scope: str, cursor: str | None, shape: type) -> None:
        """A page is read from the position its cursor claims, in the statement that checks the key
        and tells its tenant; the cursor must then prove it was signed for this list (400) before
        anything the read found is shown."""
        if cursor:
            self.cursors.decode(scope, cursor, shape)

    async def list_threads(self, cred: Credential, status: str | None, owner: str | None, labels: Labels,
                           cursor: str | None, limit: int) -> ThreadPage:
        after = self.cursors.position(cursor, tuple[datetime, str]) if cursor else None
        async with self.db.connection() as conn:
            tenant, rows = await q.list_threads(conn, cred, status, owner, labels, after, limit + 1)
        scope = f"{tenant}\0threads\0{status}\0{owner}\0{labels.key()}"
        self._verify(scope, cursor, tuple[datetime, str])
        return ThreadPage(*self._keyset_page(scope, rows, limit))

    async def list_events(self, cred: Credential, thread_id: str, cursor: str | None, limit: int) -> EventPage:
        await self._authenticated_miss(cred, "thread", thread_id)
        after = (self.cursors.position(cursor, tuple[int]) if cursor else None) or (0,)
        async with self.db.connection() as conn:
            tenant, found = await q.list_events(conn, cred, thread_id, after[0], limit + 1)
        scope = f"{tenant}\0events\0{thread_id}"
        self._verify(scope, cursor, tuple[int])
        if found is None:
            raise not_found(thread_id, "thread")
        if found[0]:
            raise gone(thread_id)
        events = found[1]
        has_more = len(events) > limit
        events = events[:limit]
        # Always hand back a position: a caller tailing a live thread polls with it for new events.
        position = events[-1].seq if events else after[0]
        return EventPage(data=events, next_cursor=self.cursors.encode(scope, [position]), has_more=has_more)

    async def list_reports(self, cred: Credential, worker_id: str, labels: Labels, cursor: str | None,
                           limit: int) -> ReportPage:
        await self._authenticated_miss(cred, "worker", worker_id)
        after = self.cursors.position(cursor, tuple[datetime, str]) if cursor else None
        async with self.db.connection() as conn:
            tenant, found = await q.list_reports(conn, cred, worker_id, labels, after, limit + 1)
        scope = f"{tenant}\0reports\0{worker_id}\0{labels.key()}"
        self._verify(scope, cursor, tuple[datetime, str])
        if found is None:
            raise not_found(worker_id, "worker")
        if found[0]:
            raise gone(worker_id)
        return ReportPage(*self._keyset_page(scope, found[1], limit))

    # ---- creates ---------------------------------------------------------------------

    async def create_thread(self, cred: Credential, req: CreateThread, idempotency_key: str | None) -> Outcome:
        thread_id = req.id or ids.new("thread")
        _body_id("id", thread_id, "thread")
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=thread_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            created = await q.insert_thread(conn, tenant, thread_id, req.title, req.summary, req.status,
                                            _labels(req), h, expires_at)
            if not created:
                await self._existing_or_conflict(conn, tenant, "thread", thread_id, h)
            return _created(created, await self._view(conn, tenant, thread_id, spill.DEFAULT_BUDGET, created=created),
                            f"/threads/{thread_id}")

        return await self._write(cred, idempotency_key, _fingerprint("POST", "/threads", req), operation)

    async def create_worker(self, cred: Credential, req: CreateWorker, idempotency_key: str | None) -> Outcome:
        worker_id = req.id or ids.new("worker")
        _body_id("id", worker_id, "worker")
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=worker_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            created = await q.insert_worker(conn, tenant, worker_id, req.name, req.summary, _labels(req), h,
                                            expires_at)
            if not created:
                await self._existing_or_conflict(conn, tenant, "worker", worker_id, h)
            return _created(created, await self._view(conn, tenant, worker_id, spill.DEFAULT_BUDGET, created=created),
                            f"/workers/{worker_id}")

        return await self._write(cred, idempotency_key, _fingerprint("POST", "/workers", req), operation)

    async def create_trigger(self, cred: Credential, req: CreateTrigger, idempotency_key: str | None) -> Outcome:
        trigger_id = req.id or ids.new("trigger")
        _body_id("id", trigger_id, "trigger")
        if req.thread_id is not None:
            _body_id("thread_id", req.thread_id, "thread")
        for neighbour in req.neighbours:
            _body_id("neighbours", neighbour, "trigger")
        if trigger_id in req.neighbours:
            raise Unprocessable("A trigger cannot be its own neighbour.", id=trigger_id)
        content_type, payload = _encode_content("payload", req.payload, req.content_type)
        occurred_at = _timestamp("occurred_at", req.occurred_at)
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=trigger_id))
        linked = [*([req.thread_id] if req.thread_id else []), *req.neighbours]

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            if req.thread_id:  # its row lock orders this filing against a concurrent delete or close
                await q.lock_thread(conn, tenant, req.thread_id)
            await self._require(conn, tenant, linked)
            created = await q.insert_trigger(
                conn, tenant, trigger_id, req.source, req.thread_id, req.summary, content_type, payload,
                hashlib.sha256(payload).digest(), _labels(req), h, occurred_at, req.external_id, expires_at,
            )
            existing_id = trigger_id
            if created:
                if req.neighbours:  # most triggers have none: no round trip for an empty insert
                    await q.insert_neighbours(conn, tenant, trigger_id, list(dict.fromkeys(req.neighbours)))
                if req.thread_id:
                    await q.append_event(conn, tenant, req.thread_id, "trigger_filed", req.summary, trigger_id)
            elif req.external_id is not None and (
                first := await q.trigger_by_external_id(conn, tenant, req.source, req.external_id)
            ):
                existing_id = first  # a redelivery: the trigger made by the first delivery
            else:
                await self._existing_or_conflict(conn, tenant, "trigger", trigger_id, h)
            return _created(created, await self._view(conn, tenant, existing_id, spill.DEFAULT_BUDGET, created=created),
                            f"/triggers/{existing_id}")

        return await self._write(cred, idempotency_key, _fingerprint("POST", "/triggers", req), operation)

    async def create_report(self, cred: Credential, worker_id: str, req: CreateReport,
                            idempotency_key: str | None) -> Outcome:
        report_id = req.id or ids.new("report")
        _body_id("id", report_id, "report")
        _body_id("thread_id", req.thread_id, "thread")
        for ref in req.refs:
            _body_id("refs", ref, "trigger")
        content_type, body = _encode_content("body", req.body, req.content_type)
        expires_at = _expiry(req)
        h = _hash(msgspec.structs.replace(req, id=report_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            _expect("worker", worker_id)
            await self._parent(conn, tenant, "worker", worker_id)
            await q.lock_thread(conn, tenant, req.thread_id)  # ordered against a concurrent delete or close
            await self._require(conn, tenant, [req.thread_id, *req.refs])
            created = await q.insert_report(
                conn, tenant, report_id, worker_id, req.thread_id, req.summary, content_type, body,
                hashlib.sha256(body).digest(), _labels(req), h, expires_at,
            )
            if created:
                if req.refs:
                    await q.insert_refs(conn, tenant, report_id, req.refs)
                await q.append_event(conn, tenant, req.thread_id, "report_filed", req.summary, report_id)
            else:
                await self._existing_or_conflict(conn, tenant, "report", report_id, h)
            return _created(created, await self._view(conn, tenant, report_id, spill.DEFAULT_BUDGET, created=created),
                            f"/reports/{report_id}")

        path = f"/workers/{worker_id}/reports"
        return await self._write(cred, idempotency_key, _fingerprint("POST", path, req), operation)

    # ---- thread writes ---------------------------------------------------------------

    async def _locked_thread(self, conn: q.Conn, tenant: str, thread_id: str) -> None:
        """Take the thread's row lock (it serialises appends); 404 / 410 when it is missing / gone."""
        _expect("thread", thread_id)
        state = await q.lock_thread(conn, tenant, thread_id)
        if state is None:
            raise not_found(thread_id, "thread")
        if state:
            raise gone(thread_id)

    async def update_thread(self, cred: Credential, thread_id: str, req: UpdateThread) -> ThreadView:
        unset = msgspec.UNSET
        async with self.db.session(cred, "write") as (conn, tenant):
            await self._locked_thread(conn, tenant, thread_id)
            old, new = await q.update_thread(
                conn, tenant, thread_id,
                None if req.title is unset else req.title,
                None if req.summary is unset else req.summary,
                None if req.status is unset else req.status,
            )
            if old != new:
                await q.append_event(conn, tenant, thread_id, "status_changed", f"status: {old} -> {new}", None)
                await q.cap_expiry(conn, tenant, thread_id)  # closing may have started the retention clock
            return await self._view(conn, tenant, thread_id, spill.DEFAULT_BUDGET)

    async def add_note(self, cred: Credential, thread_id: str, req: CreateNote,
                       idempotency_key: str | None) -> Outcome:
        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            await self._locked_thread(conn, tenant, thread_id)
            if req.ref is not None:
                await self._require(conn, tenant, [req.ref])
            event = await q.append_event(conn, tenant, thread_id, "note", req.summary, req.ref)
            return Outcome(status=201, body=_json(event), object_id=thread_id, event_seq=event.seq)

        path = f"/threads/{thread_id}/events"
        return await self._write(cred, idempotency_key, _fingerprint("POST", path, req), operation)

    async def assign_owner(self, cred: Credential, thread_id: str, req: AssignOwner,
                           idempotency_key: str | None) -> Outcome:
        _body_id("worker_id", req.worker_id, "worker")

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
            return _created(created, await self._view(conn, tenant, thread_id, spill.DEFAULT_BUDGET, created=created),
                            f"/threads/{thread_id}")

        path = f"/threads/{thread_id}/owners"
        return await self._write(cred, idempotency_key, _fingerprint("POST", path, req), operation)

    # ---- deletion ----------------------------------------------------------------------

    async def delete(self, cred: Credential, kind: str, object_id: str) -> None:
        """Erase an object (and, for a thread, its log and what was filed on it); its ID is retired.

        Deleting something already gone erases again (a no-op, or the purge an expiry still owed).
        """
        async with self.db.session(cred, "write") as (conn, tenant):
            _expect(kind, object_id)
            if object_id not in await q.existing(conn, tenant, [object_id]):
                raise not_found(object_id, kind)
            await q.erase(conn, tenant, object_id)

    # ---- API keys (admin scope, within the caller's tenant) ---------------------------

    async def create_key(self, cred: Credential, req: CreateKey) -> NewKey:
        async with self.db.session(cred, "admin") as (conn, tenant):
            return await issue_key(conn, tenant, req.scope, req.label)

    async def list_keys(self, cred: Credential) -> KeyList:
        async with self.db.session(cred, "admin") as (conn, tenant):
            return KeyList(data=await q.list_keys(conn, tenant))

    async def revoke_key(self, cred: Credential, key_id: str) -> KeyView:
        async with self.db.session(cred, "admin") as (conn, tenant):
            revoked = await q.revoke_key(conn, key_id, tenant)
        if revoked is None:
            raise NotFound(f"No API key with ID {key_id} exists.", id=key_id)
        return revoked

    # ---- operations ----------------------------------------------------------------------

    async def ready(self) -> None:
        async with self.db.connection() as conn:
            await q.ping(conn)

    async def bench_pk(self, thread_id: str) -> dict[str, object]:
        async with self.db.connection() as conn:
            row = await q.bench_pk(conn, thread_id)
        if row is None:
            raise not_found(thread_id, "thread")
        return row

    async def sweep(self, batch: int = 500) -> int:
        """Purge expired objects in every tenant (recall_sweep runs as the owner), a batch per transaction."""
        async with self.db.connection() as conn:
            return await sweep_all(conn, batch)


async def issue_key(conn: q.Conn, tenant: str, scope: str, label: str) -> NewKey:
    """Create a key for a tenant; the returned NewKey is the only copy of its secret."""
    key_id, key, secret_sha256 = auth.generate()
    info = await q.insert_key(conn, key_id, tenant, scope, secret_sha256, label)
    return NewKey(id=info.id, tenant=info.tenant, scope=info.scope, label=info.label, created_at=info.created_at,
                  key=key)


# ---- operator operations (the CLI, on an owner connection) -----------------------------


async def create_tenant(conn: q.Conn, tenant: str) -> bool:
    """Create a tenant; False if it already existed."""
    return await q.create_tenant(conn, tenant)


async def set_retention(conn: q.Conn, tenant: str, days: float | None) -> None:
    if not await q.set_retention(conn, tenant, days):
        raise NotFound(f"No tenant named {tenant!r}.")


async def operator_issue_key(conn: q.Conn, tenant: str, scope: str, label: str) -> NewKey:
    if not await q.tenant_exists(conn, tenant):
        raise NotFound(f"No tenant named {tenant!r}; create it with `recall-server tenants create {tenant}`.")
    return await issue_key(conn, tenant, scope, label)


async def operator_list_keys(conn: q.Conn, tenant: str | None) -> list[KeyView]:
    return await q.list_keys(conn, tenant)


async def operator_revoke_key(conn: q.Conn, key_id: str) -> KeyView | None:
    return await q.revoke_key(conn, key_id, None)


async def sweep_all(conn: q.Conn, batch: int = 500) -> int:
    """Sweep until a batch comes back short; each call of recall_sweep is its own transaction."""
    purged = 0
    while (done := await q.sweep(conn, batch)) == batch:
        purged += done
    return purged + done


async def verify_erasure(conn: q.Conn, tenant: str, object_id: str) -> list[str]:
    """Where this ID's content could still be read (empty: erased). An ID still live says so."""
    state = (await q.existing(conn, tenant, [object_id])).get(object_id)
    if state is None:
        return [f"{object_id} never existed in tenant {tenant}"]
    findings = await q.erasure_findings(conn, tenant, object_id)
    return findings if state else [f"{object_id} is live (not deleted, not expired)", *findings]

