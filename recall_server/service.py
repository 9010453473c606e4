"""One async function per operation: validates links, owns transactions, renders views."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import msgspec

from recall_server import auth, ids, spill
from recall_server.auth import Credential
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db.pool import Database
from recall_server.errors import (
    BadRequest,
    Conflict,
    NotFound,
    Unprocessable,
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
    Event,
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


def _expect(kind: str, value: str) -> None:
    """A path ID of the wrong shape or kind is a miss, decided without touching the database."""
    if ids.kind_of(value) != kind:
        raise not_found(value, kind)


def _body_id(field: str, value: str, kind: str) -> None:
    if ids.kind_of(value) != kind:
        raise Unprocessable(
            f"{field} must be a {kind} ID ({ids.PREFIX[kind]}_...), got {value!r}.", field=field, id=value
        )


def _labels(req: CreateThread | CreateWorker | CreateTrigger | CreateReport) -> Labels:
    return Labels(app_id=req.app_id, agent_id=req.agent_id, run_id=req.run_id)


def _hash(req: Request) -> bytes:
    return hashlib.sha256(msgspec.json.encode(req)).digest()


def _encode_content(field: str, value: object, content_type: str | None) -> tuple[str, bytes]:
    """The exact bytes to store and serve: JSON text for JSON types, the string's UTF-8 otherwise."""
    if content_type is None:
        content_type = "text/plain" if isinstance(value, str) else "application/json"
    content_type = content_type.lower()
    if spill.is_json(content_type):
        return content_type, msgspec.json.encode(value)
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
    return parsed


def _events_for(budget: int) -> int:
    return max(8, min(500, budget // 64))


class Recall:
    """The operations behind the HTTP API, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec) -> None:
        self.db = db
        self.cursors = cursors

    async def _require(self, conn: q.Conn, tenant: str, linked: list[str]) -> None:
        """No dangling edges: every linked ID must exist in the caller's tenant."""
        if not linked:
            return
        found = await q.existing(conn, tenant, linked)
        missing = [i for i in dict.fromkeys(linked) if i not in found]
        if missing:
            raise Unprocessable(f"Linked IDs do not exist: {', '.join(missing)}.", missing=missing)

    async def _existing_or_conflict(self, conn: q.Conn, tenant: str, kind: str, object_id: str, h: bytes) -> None:
        """A create that hit an existing ID: identical request is a retry, anything else a clash."""
        if await q.request_hash(conn, tenant, kind, object_id) != h:
            raise Conflict(
                f"{object_id} already exists with a different body; IDs are never reassigned.", id=object_id
            )

    # ---- threads ---------------------------------------------------------------------

    async def get_thread(self, cred: Credential, thread_id: str, budget: int) -> ThreadView:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("thread", thread_id)
            row = await q.fetch_thread(conn, tenant, thread_id, _events_for(budget))
        if row is None:
            raise not_found(thread_id, "thread")
        return spill.thread_view(row, budget)

    async def create_thread(self, cred: Credential, req: CreateThread) -> tuple[bool, ThreadView]:
        thread_id = req.id or ids.new("thread")
        _body_id("id", thread_id, "thread")
        h = _hash(msgspec.structs.replace(req, id=thread_id))
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            created = await q.insert_thread(conn, tenant, thread_id, req.title, req.summary, req.status, _labels(req), h)
            if not created:
                await self._existing_or_conflict(conn, tenant, "thread", thread_id, h)
            row = await q.fetch_thread(conn, tenant, thread_id, _events_for(spill.DEFAULT_BUDGET))
        return created, spill.thread_view(row, spill.DEFAULT_BUDGET)

    async def update_thread(self, cred: Credential, thread_id: str, req: UpdateThread) -> ThreadView:
        unset = msgspec.UNSET
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            _expect("thread", thread_id)
            changed = await q.update_thread(
                conn, tenant, thread_id,
                None if req.title is unset else req.title,
                None if req.summary is unset else req.summary,
                None if req.status is unset else req.status,
            )
            if changed is None:
                raise not_found(thread_id, "thread")
            old, new = changed
            if old != new:
                await q.append_event(conn, tenant, thread_id, "status_changed", f"status: {old} -> {new}", None)
            row = await q.fetch_thread(conn, tenant, thread_id, _events_for(spill.DEFAULT_BUDGET))
        return spill.thread_view(row, spill.DEFAULT_BUDGET)

    async def list_threads(self, cred: Credential, status: str | None, owner: str | None, labels: Labels,
                           cursor: str | None, limit: int) -> ThreadPage:
        async with self.db.session(cred, "read") as (conn, tenant):
            scope = f"{tenant}\0threads\0{status}\0{owner}\0{labels.key()}"
            after = self.cursors.decode(scope, cursor, tuple[datetime, str]) if cursor else None
            rows = await q.list_threads(conn, tenant, status, owner, labels, after, limit + 1)
        return ThreadPage(*self._keyset_page(scope, rows, limit))

    def _keyset_page(self, scope: str, rows: list[tuple[Any, datetime]], limit: int) -> tuple[list[Any], str | None, bool]:
        """(entries, next cursor, has_more) from rows fetched with limit + 1, newest first."""
        has_more = len(rows) > limit
        rows = rows[:limit]
        next_cursor = None
        if has_more:
            last, created_at = rows[-1]
            next_cursor = self.cursors.encode(scope, [created_at, last.id])
        return [entry for entry, _ in rows], next_cursor, has_more

    async def list_events(self, cred: Credential, thread_id: str, cursor: str | None, limit: int) -> EventPage:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("thread", thread_id)
            scope = f"{tenant}\0events\0{thread_id}"
            after = self.cursors.decode(scope, cursor, tuple[int]) if cursor else (0,)
            events = await q.list_events(conn, tenant, thread_id, after[0], limit + 1)
        if events is None:
            raise not_found(thread_id, "thread")
        has_more = len(events) > limit
        events = events[:limit]
        # Always hand back a position: a caller tailing a live thread polls with it for new events.
        position = events[-1].seq if events else after[0]
        return EventPage(data=events, next_cursor=self.cursors.encode(scope, [position]), has_more=has_more)

    async def add_note(self, cred: Credential, thread_id: str, req: CreateNote) -> Event:
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            _expect("thread", thread_id)
            if req.ref is not None:
                await self._require(conn, tenant, [req.ref])
            event = await q.append_event(conn, tenant, thread_id, "note", req.summary, req.ref)
        if event is None:
            raise not_found(thread_id, "thread")
        return event

    async def assign_owner(self, cred: Credential, thread_id: str, req: AssignOwner) -> tuple[bool, ThreadView]:
        _body_id("worker_id", req.worker_id, "worker")
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            _expect("thread", thread_id)
            # The thread's row lock serialises assignments, so the owner cap holds under concurrency.
            if not await q.lock_thread(conn, tenant, thread_id):
                raise not_found(thread_id, "thread")
            await self._require(conn, tenant, [req.worker_id])
            created = await q.insert_owner(conn, tenant, thread_id, req.worker_id)
            if created:
                if await q.count_owners(conn, tenant, thread_id) > MAX_LINKS:
                    raise Unprocessable(f"A thread has at most {MAX_LINKS} owner workers.", id=thread_id)
                await q.append_event(conn, tenant, thread_id, "owner_assigned",
                                     f"owner assigned: {req.worker_id}", req.worker_id)
            row = await q.fetch_thread(conn, tenant, thread_id, _events_for(spill.DEFAULT_BUDGET))
        return created, spill.thread_view(row, spill.DEFAULT_BUDGET)

    # ---- workers and reports ---------------------------------------------------------

    async def get_worker(self, cred: Credential, worker_id: str, budget: int) -> WorkerView:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("worker", worker_id)
            row = await q.fetch_worker(conn, tenant, worker_id, _events_for(budget))
        if row is None:
            raise not_found(worker_id, "worker")
        return spill.worker_view(row, budget)

    async def create_worker(self, cred: Credential, req: CreateWorker) -> tuple[bool, WorkerView]:
        worker_id = req.id or ids.new("worker")
        _body_id("id", worker_id, "worker")
        h = _hash(msgspec.structs.replace(req, id=worker_id))
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            created = await q.insert_worker(conn, tenant, worker_id, req.name, req.summary, _labels(req), h)
            if not created:
                await self._existing_or_conflict(conn, tenant, "worker", worker_id, h)
            row = await q.fetch_worker(conn, tenant, worker_id, _events_for(spill.DEFAULT_BUDGET))
        return created, spill.worker_view(row, spill.DEFAULT_BUDGET)

    async def list_reports(self, cred: Credential, worker_id: str, labels: Labels, cursor: str | None,
                           limit: int) -> ReportPage:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("worker", worker_id)
            scope = f"{tenant}\0reports\0{worker_id}\0{labels.key()}"
            after = self.cursors.decode(scope, cursor, tuple[datetime, str]) if cursor else None
            rows = await q.list_reports(conn, tenant, worker_id, labels, after, limit + 1)
        if rows is None:
            raise not_found(worker_id, "worker")
        return ReportPage(*self._keyset_page(scope, rows, limit))

    async def create_report(self, cred: Credential, worker_id: str, req: CreateReport) -> tuple[bool, ReportView]:
        report_id = req.id or ids.new("report")
        _body_id("id", report_id, "report")
        _body_id("thread_id", req.thread_id, "thread")
        for ref in req.refs:
            _body_id("refs", ref, "trigger")
        content_type, body = _encode_content("body", req.body, req.content_type)
        h = _hash(msgspec.structs.replace(req, id=report_id))
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            _expect("worker", worker_id)
            if not await q.existing(conn, tenant, [worker_id]):
                raise not_found(worker_id, "worker")
            await self._require(conn, tenant, [req.thread_id, *req.refs])
            created = await q.insert_report(
                conn, tenant, report_id, worker_id, req.thread_id, req.summary, content_type, body,
                hashlib.sha256(body).digest(), _labels(req), h,
            )
            if created:
                await q.insert_refs(conn, tenant, report_id, req.refs)
                await q.append_event(conn, tenant, req.thread_id, "report_filed", req.summary, report_id)
            else:
                await self._existing_or_conflict(conn, tenant, "report", report_id, h)
            row = await q.fetch_report(conn, tenant, report_id, spill.DEFAULT_BUDGET, spill.PREVIEW_BYTES)
        return created, spill.report_view(row, spill.DEFAULT_BUDGET)

    async def get_report(self, cred: Credential, report_id: str, budget: int) -> ReportView:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("report", report_id)
            row = await q.fetch_report(conn, tenant, report_id, budget, spill.PREVIEW_BYTES)
        if row is None:
            raise not_found(report_id, "report")
        return spill.report_view(row, budget)

    async def get_body(self, cred: Credential, report_id: str) -> Content:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("report", report_id)
            content = await q.fetch_body(conn, tenant, report_id)
        if content is None:
            raise not_found(report_id, "report")
        return content

    # ---- triggers --------------------------------------------------------------------

    async def create_trigger(self, cred: Credential, req: CreateTrigger) -> tuple[bool, TriggerView]:
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
        h = _hash(msgspec.structs.replace(req, id=trigger_id))
        linked = [*([req.thread_id] if req.thread_id else []), *req.neighbours]
        async with self.db.session(cred, "write") as (conn, tenant), conn.transaction():
            await self._require(conn, tenant, linked)
            created = await q.insert_trigger(
                conn, tenant, trigger_id, req.source, req.thread_id, req.summary, content_type, payload,
                hashlib.sha256(payload).digest(), _labels(req), h, occurred_at,
            )
            if created:
                await q.insert_neighbours(conn, tenant, trigger_id, list(dict.fromkeys(req.neighbours)))
                if req.thread_id:
                    await q.append_event(conn, tenant, req.thread_id, "trigger_filed", req.summary, trigger_id)
            else:
                await self._existing_or_conflict(conn, tenant, "trigger", trigger_id, h)
            row = await q.fetch_trigger(conn, tenant, trigger_id, spill.DEFAULT_BUDGET, spill.PREVIEW_BYTES)
        return created, spill.trigger_view(row, spill.DEFAULT_BUDGET)

    async def get_trigger(self, cred: Credential, trigger_id: str, budget: int) -> TriggerView:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("trigger", trigger_id)
            row = await q.fetch_trigger(conn, tenant, trigger_id, budget, spill.PREVIEW_BYTES)
        if row is None:
            raise not_found(trigger_id, "trigger")
        return spill.trigger_view(row, budget)

    async def get_payload(self, cred: Credential, trigger_id: str) -> Content:
        async with self.db.session(cred, "read") as (conn, tenant):
            _expect("trigger", trigger_id)
            content = await q.fetch_payload(conn, tenant, trigger_id)
        if content is None:
            raise not_found(trigger_id, "trigger")
        return content

    # ---- any ID ----------------------------------------------------------------------

    async def resolve(self, cred: Credential, value: str) -> Resolved:
        kind = ids.kind_of(value)
        if kind is None:
            raise not_found(value, "recall")
        async with self.db.session(cred, "read") as (conn, tenant):
            resolved = await q.resolve(conn, tenant, kind, value, ids.href(value))
        if resolved is None:
            raise not_found(value, kind)
        return resolved

    async def ready(self) -> None:
        async with self.db.connection() as conn:
            await q.ping(conn)

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


async def operator_issue_key(conn: q.Conn, tenant: str, scope: str, label: str) -> NewKey:
    if not await q.tenant_exists(conn, tenant):
        raise NotFound(f"No tenant named {tenant!r}; create it with `recall-server tenants create {tenant}`.")
    return await issue_key(conn, tenant, scope, label)


async def operator_list_keys(conn: q.Conn, tenant: str | None) -> list[KeyView]:
    return await q.list_keys(conn, tenant)


async def operator_revoke_key(conn: q.Conn, key_id: str) -> KeyView | None:
    return await q.revoke_key(conn, key_id, None)
