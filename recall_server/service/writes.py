"""The writes of the recall graph: creates, thread updates, notes, owners, deletion; and the public write steps
(one transaction at most once per Idempotency-Key, link checks, filing a trigger, changing a thread) that
memories and webhook deliveries compose."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import msgspec

from recall_server import ids, spill
from recall_server.auth import Credential
from recall_server.coalesce import Coalescer
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import Conflict, Unprocessable, not_found, require_live
from recall_server.ids import State
from recall_server.models import (
    MAX_LINKS,
    AssignOwner,
    CreateNote,
    CreateReport,
    CreateThread,
    CreateTrigger,
    CreateWorker,
    ExtractSetting,
    ThreadView,
    TriggerView,
    UpdateThread,
)
from recall_server.rows import Outcome, TriggerRow
from recall_server.service import idempotency
from recall_server.service.inputs import created, encode_content, expiry, json, labels, request_hash, stored_time
from recall_server.service.views import Views

Operation = Callable[[q.Conn, str], Awaitable[Outcome]]


class Writes:
    """The write operations, for one store; reads back through `views` what a write answers with."""

    def __init__(self, db: Database, views: Views, idempotency_ttl: int) -> None:
        """`idempotency_ttl`: how long an Idempotency-Key's outcome is kept (config.py)."""
        self.db = db
        self.views = views
        self.idempotency_ttl = idempotency_ttl
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

    # ---- the steps every write shares ----------------------------------------------------

    async def write(self, cred: Credential, idempotency_key: str | None, fingerprint: bytes,
                    operation: Operation) -> Outcome:
        """Run a write in one transaction bound to the key's tenant, at most once per Idempotency-Key."""
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):

            async def render(object_id: str) -> bytes:
                return json(await self.views.view(conn, cred, object_id, spill.DEFAULT_BUDGET))

            return await idempotency.once(conn, tenant, idempotency_key, fingerprint, self.idempotency_ttl,
                                          lambda: operation(conn, tenant), render, cred.key_id, cred.has_grants)

    async def require_links(self, conn: q.Conn, tenant: str, linked: list[str],
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

    async def existing_or_conflict(self, conn: q.Conn, tenant: str, kind: str, object_id: str, h: bytes) -> None:
        """A create that hit an existing ID: identical request is a retry, anything else a clash."""
        state, found = await q.request_hash(conn, tenant, kind, object_id)
        if state is State.GONE:
            raise Conflict(f"{object_id} was deleted or has expired; its ID is retired and is never reused.",
                           id=object_id)
        if found != h:
            raise Conflict(f"{object_id} already exists with a different body; IDs are never reassigned.",
                           id=object_id)

    # ---- creates ---------------------------------------------------------------------

    async def create_thread(self, cred: Credential, req: CreateThread, idempotency_key: str | None) -> Outcome:
        thread_id = req.id or ids.new("thread")
        expires_at = expiry(req)
        h = request_hash(msgspec.structs.replace(req, id=thread_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            made = await q.insert_thread(conn, tenant, thread_id, req.title, req.summary, req.status,
                                         labels(req), h, expires_at)
            if not made:
                await self.existing_or_conflict(conn, tenant, "thread", thread_id, h)
            elif req.extract is not msgspec.UNSET:
                await self.set_extraction(conn, tenant, thread_id, req.extract)
            return created(made, await self.views.view(conn, cred, thread_id, spill.DEFAULT_BUDGET, created=made),
                           f"/threads/{thread_id}")

        return await self.write(cred, idempotency_key, idempotency.fingerprint("POST", "/threads", req), operation)

    async def create_worker(self, cred: Credential, req: CreateWorker, idempotency_key: str | None) -> Outcome:
        worker_id = req.id or ids.new("worker")
        expires_at = expiry(req)
        h = request_hash(msgspec.structs.replace(req, id=worker_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            made = await q.insert_worker(conn, tenant, worker_id, req.name, req.summary, labels(req), h,
                                         expires_at)
            if not made:
                await self.existing_or_conflict(conn, tenant, "worker", worker_id, h)
            return created(made, await self.views.view(conn, cred, worker_id, spill.DEFAULT_BUDGET, created=made),
                           f"/workers/{worker_id}")

        return await self.write(cred, idempotency_key, idempotency.fingerprint("POST", "/workers", req), operation)

    async def create_trigger(self, cred: Credential, req: CreateTrigger, idempotency_key: str | None) -> Outcome:
        trigger_id = req.id or ids.new("trigger")
        if trigger_id in req.neighbours:
            raise Unprocessable("A trigger cannot be its own neighbour.", id=trigger_id)
        content_type, payload = encode_content("payload", req.payload, req.content_type)
        occurred_at = stored_time("occurred_at", req.occurred_at)
        expires_at = expiry(req)
        h = request_hash(msgspec.structs.replace(req, id=trigger_id))
        if req.external_id is not None and req.external_id.startswith("hk_"):
            raise Unprocessable("external_id values starting with hk_ name webhook deliveries (<hook id>/<GUID>) "
                                "and are reserved to them.", field="external_id")
        if idempotency_key is None and not req.neighbours and req.namespace is None:  # the plain case: one statement
            trigger = q.NewTrigger(trigger_id, req.source, req.summary, content_type, payload,
                                   hashlib.sha256(payload).digest(), h, occurred_at, req.app_id, req.agent_id,
                                   req.run_id, req.external_id, expires_at)
            # shared with the key's other plain triggers arriving meanwhile (on threads, or not)
            written = await (self.triggers.submit(cred, trigger) if req.thread_id is None
                             else self.filings.submit(cred, (req.thread_id, trigger)))
            if written is not None:
                return created(True, _new_trigger_view(trigger_id, req, content_type, payload, *written),
                               f"/triggers/{trigger_id}")

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            made, existing_id = await self.file_trigger(conn, tenant, trigger_id, req, content_type, payload,
                                                        occurred_at, expires_at, h)
            return created(made, await self.views.view(conn, cred, existing_id, spill.DEFAULT_BUDGET, created=made),
                           f"/triggers/{existing_id}")

        return await self.write(cred, idempotency_key, idempotency.fingerprint("POST", "/triggers", req), operation)

    async def file_trigger(self, conn: q.Conn, tenant: str, trigger_id: str, req: CreateTrigger, content_type: str,
                           payload: bytes, occurred_at: datetime | None, expires_at: datetime | None,
                           h: bytes, thread: State | None = None) -> tuple[bool, str]:
        """A trigger's write steps (POST /triggers and webhook deliveries): (created, its ID, which on a
        redelivery of the same (source, external_id) is the first delivery's trigger). `thread`: the
        state of req.thread_id when the caller holds its row lock already."""
        known: dict[str, State] = {}
        if req.thread_id:  # its row lock orders this filing against a concurrent delete or close
            known[req.thread_id] = thread if thread is not None else await q.lock_thread(conn, tenant, req.thread_id)
        await self.require_links(conn, tenant, [*known, *req.neighbours], known)
        made = await q.insert_trigger(  # with its trigger_filed event
            conn, tenant, trigger_id, req.source, req.thread_id, req.summary, content_type, payload,
            hashlib.sha256(payload).digest(), labels(req), h, occurred_at, req.external_id, expires_at,
        )
        if made:
            if req.neighbours:  # most triggers have none: no round trip for an empty insert
                await q.insert_neighbours(conn, tenant, trigger_id, list(dict.fromkeys(req.neighbours)))
            return True, trigger_id
        if req.external_id is not None and (
            first := await q.trigger_by_external_id(conn, tenant, req.source, req.external_id)
        ):
            return False, first  # a redelivery: the trigger made by the first delivery
        await self.existing_or_conflict(conn, tenant, "trigger", trigger_id, h)
        return False, trigger_id

    async def create_report(self, cred: Credential, worker_id: str, req: CreateReport,
                            idempotency_key: str | None) -> Outcome:
        report_id = req.id or ids.new("report")
        content_type, body = encode_content("body", req.body, req.content_type)
        expires_at = expiry(req)
        h = request_hash(msgspec.structs.replace(req, id=report_id))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            if ids.kind_of(worker_id) != "worker":
                raise not_found(worker_id, "worker")
            require_live(await q.state(conn, tenant, worker_id), worker_id, "worker")
            thread = await q.lock_thread(conn, tenant, req.thread_id)  # ordered against a concurrent delete or close
            await self.require_links(conn, tenant, [req.thread_id, *req.refs], {req.thread_id: thread})
            made = await q.insert_report(
                conn, tenant, report_id, worker_id, req.thread_id, req.summary, content_type, body,
                hashlib.sha256(body).digest(), labels(req), h, expires_at,
            )
            if made:
                if req.refs:
                    await q.insert_refs(conn, tenant, report_id, req.refs)
                await q.append_event(conn, tenant, req.thread_id, "report_filed", req.summary, report_id)
                await q.rebuild_worker_head(conn, tenant, worker_id)
            else:
                await self.existing_or_conflict(conn, tenant, "report", report_id, h)
            return created(made, await self.views.view(conn, cred, report_id, spill.DEFAULT_BUDGET, created=made),
                           f"/reports/{report_id}")

        path = f"/workers/{worker_id}/reports"
        return await self.write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    # ---- thread writes ---------------------------------------------------------------

    async def locked_thread(self, conn: q.Conn, tenant: str, thread_id: str) -> None:
        """Take the thread's row lock (it serialises appends); 404 / 410 when it is missing / gone."""
        if ids.kind_of(thread_id) != "thread":
            raise not_found(thread_id, "thread")
        require_live(await q.lock_thread(conn, tenant, thread_id), thread_id, "thread")

    async def update_thread(self, cred: Credential, thread_id: str, req: UpdateThread) -> ThreadView:
        unset = msgspec.UNSET
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            await self.locked_thread(conn, tenant, thread_id)
            await self.change_thread(
                conn, tenant, thread_id,
                None if req.title is unset else req.title,
                None if req.summary is unset else req.summary,
                None if req.status is unset else req.status,
            )
            if req.extract is not unset:
                await self.set_extraction(conn, tenant, thread_id, req.extract)
            return await self.views.view(conn, cred, thread_id, spill.DEFAULT_BUDGET)

    async def set_extraction(self, conn: q.Conn, tenant: str, thread_id: str, setting: ExtractSetting | None) -> None:
        """The thread's extraction namespace (None: off for it), under its row lock; 403 unless the key's grants
        let it write there (what it extracts is written with the grants of the key that appends)."""
        namespace = None if setting is None else "/".join(setting.namespace)
        if namespace is not None:
            await q.check_write_grant(conn, namespace)
        await q.set_thread_extraction(conn, tenant, thread_id, namespace)

    async def change_thread(self, conn: q.Conn, tenant: str, thread_id: str, title: str | None,
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
                return Outcome(status=201, body=json(written), object_id=thread_id, event_seq=written.seq)

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            await self.locked_thread(conn, tenant, thread_id)
            if req.ref is not None:
                await self.require_links(conn, tenant, [req.ref])
            event = await q.append_event(conn, tenant, thread_id, "note", req.summary, req.ref)
            return Outcome(status=201, body=json(event), object_id=thread_id, event_seq=event.seq)

        path = f"/threads/{thread_id}/events"
        return await self.write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    async def assign_owner(self, cred: Credential, thread_id: str, req: AssignOwner,
                           idempotency_key: str | None) -> Outcome:

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            # The thread's row lock serialises assignments, so the owner cap holds under concurrency.
            await self.locked_thread(conn, tenant, thread_id)
            await self.require_links(conn, tenant, [req.worker_id])
            made = await q.insert_owner(conn, tenant, thread_id, req.worker_id)
            if made:
                if await q.count_owners(conn, tenant, thread_id) > MAX_LINKS:
                    raise Unprocessable(f"A thread has at most {MAX_LINKS} owner workers.", id=thread_id)
                await q.append_event(conn, tenant, thread_id, "owner_assigned",
                                     f"owner assigned: {req.worker_id}", req.worker_id)
                await q.rebuild_head(conn, tenant, thread_id)  # the new owner, in the view's order
                await q.rebuild_worker_head(conn, tenant, req.worker_id)
            return created(made, await self.views.view(conn, cred, thread_id, spill.DEFAULT_BUDGET, created=made),
                           f"/threads/{thread_id}")

        path = f"/threads/{thread_id}/owners"
        return await self.write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    # ---- deletion ----------------------------------------------------------------------

    async def delete(self, cred: Credential, kind: str, object_id: str) -> None:
        """Erase an object (and, for a thread, its log and what was filed on it); its ID is retired.

        Deleting something already gone erases again (a no-op, or the purge an expiry still owed).
        """
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            if ids.kind_of(object_id) != kind or await q.state(conn, tenant, object_id) is State.MISSING:
                raise not_found(object_id, kind)
            await q.erase(conn, tenant, object_id)


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
