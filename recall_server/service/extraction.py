"""Memories extracted from conversations: the worker that drains the extraction queue (schema.sql,
extraction), a job run at once for extract=sync, and a thread's jobs.

An append to a thread that extracts queues one job for its seq range in the append's own statement, so the
append is acknowledged without waiting for any model, and a crash loses no job. Each of the worker's loops
(RECALL_EXTRACT_CONCURRENCY) claims one due job at a time, the tenants with jobs due taking turns
(recall_extraction_claim), for a lease; reads the range's
messages; asks the model (extractors.py) with no transaction open; then, in one transaction bound to the
tenant with the grants of the key that appended the messages, checks the claim is still its own, writes the
memories (each a new version of its key, with the messages as its sources) and marks the job done. A model
that is unavailable leaves the job queued for a retry after a backoff; an answer that is not the schema fails
the job with nothing written; a key revoked since, or grants that do not cover the namespace, fail it too.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
import unicodedata
from datetime import datetime, timezone
from typing import Any

import asyncpg
import msgspec

from recall_server import ids, text
from recall_server.auth import Credential
from recall_server.config import Settings
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import BadRequest, Unavailable, require_live
from recall_server.extractors import ExtractRejected, ExtractUnavailable, Extracted, Extractor, Shown
from recall_server.ids import State
from recall_server.models import MAX_SOURCES, ExtractedMemory, Extraction, ExtractionPage
from recall_server.observability import EXTRACT_LAG, EXTRACT_QUEUE, EXTRACT_SECONDS, EXTRACTED, EXTRACTIONS
from recall_server.rows import Labels
from recall_server.service.memories import memory_key, namespace_param, pair_hash
from recall_server.service.views import Views

log = logging.getLogger("recall_server.extraction")

IDLE_POLL, IDLE_MAX = 0.05, 1.0  # seconds between looks at an empty queue, doubling while it stays empty
STATS_EVERY = 5.0
_KEY_CHARS = re.compile(r"[^\w]+")


def normalise_key(kind: str, proposed: str) -> str:
    """The stored key of a proposed one: NFKC, lower case, every run of other characters one '-', at most 64
    characters; so `Seat preference`, `seat_preference` and `SEAT-PREFERENCE` are one key (one chain)."""
    flat = unicodedata.normalize("NFKC", proposed).casefold().replace("_", "-")
    slug = _KEY_CHARS.sub("-", flat).strip("-")[:64].strip("-")
    return memory_key(slug or kind)


def resolve_namespace(template: str, subject: str | None) -> str:
    """A tenant's template for the appending key: `{subject}` (and `{subject_id}`) the subject's ID,
    `{subject_kind}` its kind. ValueError when it names a subject the key has none of, or is no namespace."""
    if "{" in template:
        if not subject:
            raise ValueError("the tenant's extraction namespace names the key's subject, and the key has none")
        kind, _, subject_id = subject.partition(":")
        template = (template.replace("{subject_id}", subject_id).replace("{subject}", subject_id)
                    .replace("{subject_kind}", kind))
    try:
        return namespace_param("namespace", template) or ""
    except BadRequest as exc:
        raise ValueError(exc.detail) from None


def _tag(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9._:/@+-]", "-", value)[:24]


class _Failed(Exception):
    """A job that fails with nothing written: its error class and message."""

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(message)
        self.error_class = error_class


class Extractions:
    """The extraction queue's worker and a thread's extraction settings and jobs, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec, views: Views, settings: Settings,
                 extractor: Extractor | None = None) -> None:
        self.db = db
        self.cursors = cursors
        self.views = views
        self.settings = settings
        self.extractor = extractor
        self._turn = ""  # the tenant of the last job claimed: the next claim starts after it

    # ---- settings and visibility ---------------------------------------------------------

    async def list_jobs(self, cred: Credential, thread_id: str, cursor: str | None, limit: int) -> ExtractionPage:
        """A page of the thread's jobs, newest first, and where its memories go."""
        await self.views.authenticated_miss(cred, "thread", thread_id)
        pager = self.cursors.pager(cursor, tuple[int], "extractions", thread_id)
        before = pager.after[0] if pager.after else 2**62
        async with self.db.connection() as conn:
            tenant, found = await q.list_extractions(conn, cred, thread_id, before, limit + 1)
        require_live(State.MISSING if found is None else State.of(found.gone), thread_id, "thread")
        assert found is not None
        jobs = [_job_view(j) for j in found.jobs]
        shown, next_cursor, has_more = pager.page(tenant, jobs, limit, lambda j: [j.from_seq])
        return ExtractionPage(enabled=found.namespace is not None if found.own else found.template is not None,
                              namespace=found.namespace.split("/") if found.namespace else None,
                              tenant_default=found.template, data=shown, next_cursor=next_cursor, has_more=has_more)

    # ---- the worker -------------------------------------------------------------------------

    async def run_forever(self) -> None:
        """Drain the queue while the server runs; publish its depth and lag. Nothing to do without an extractor:
        jobs stay queued for a server that has one."""
        if self.extractor is None:
            return
        await asyncio.gather(*(self._drain_forever(stats=n == 0) for n in range(self.settings.extract_concurrency)))

    async def _drain_forever(self, stats: bool) -> None:
        """One of the worker's loops: several run at once, since a job mostly waits for its model's answer."""
        last_stats, idle = 0.0, IDLE_POLL
        while True:
            try:
                done = await self.run_once()
                if stats and time.monotonic() - last_stats > STATS_EVERY:
                    await self.publish_stats()
                    last_stats = time.monotonic()
            except asyncio.CancelledError:
                raise
            except (Unavailable, OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
                log.warning("extraction paused, the database is unavailable: %s", type(exc).__name__)
                done = False
            except Exception:
                log.warning("extraction failed; will retry", exc_info=True)
                done = False
            if done:
                idle = IDLE_POLL
            else:
                await asyncio.sleep(idle)
                idle = min(idle * 2, IDLE_MAX)

    async def run_once(self) -> bool:
        """Claim and run one due job; whether there was one."""
        async with self.db.connection() as conn:
            job = await q.claim_extraction(conn, self._turn, self.settings.extract_lease)
        if job is None:
            return False
        self._turn = job.tenant_id
        await self.run(job)
        return True

    def hold(self, extract: str) -> float:
        """Seconds a new job is kept from the workers: extract=sync holds it for a lease, so the request runs it
        (or, if it stops, a worker does once the lease ends); async, none."""
        return self.settings.extract_lease if extract == "sync" and self.extractor is not None else 0.0

    async def run_claimed(self, cred: Credential, thread_id: str, from_seq: int) -> Extraction | None:
        """extract=sync: claim this job as the key that just queued it, and run it here; its outcome, with the
        memories. None without an extractor, or when a worker claimed it first (it shows as queued)."""
        if self.extractor is None:
            return None
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            job = await q.claim_extraction_job(conn, tenant, thread_id, from_seq, self.settings.extract_lease)
        if job is None:
            return None
        return await self.run(job)

    async def run(self, job: q.Job) -> Extraction:
        """One claimed job, start to outcome (which it records); the job as it ended."""
        assert self.extractor is not None
        tenant = job.tenant_id
        memories: list[ExtractedMemory] = []
        try:
            async with self.db.connection() as conn:
                key = await q.extraction_key(conn, tenant, job.key_id)
            if key is None:
                raise _Failed("KeyRevoked", "the key that appended the messages was revoked (or may not write)")
            access, subject = key
            async with tenancy.key_session(self.db, tenant, access) as conn:
                own, own_ns, template = await q.extraction_target(conn, tenant, job.thread_id)
                messages = await q.job_messages(conn, tenant, job.thread_id, job.from_seq, job.to_seq,
                                                self.settings.extract_max_chars * 4)
            namespace = own_ns if own else template and self._namespace(template, subject)
            shown = self._shown(messages)
            if namespace is None or not shown:  # opted out since, erased, retracted, or nothing to show
                return await self._finish(job, "done", [], None, None)
            extracted = await self.extractor.extract(shown)
            memories = await self._write(job, access, namespace, extracted)
        except ExtractUnavailable as exc:
            return await self._retry_or_fail(job, "ExtractUnavailable", str(exc))
        except ExtractRejected as exc:
            return await self._finish(job, "failed", [], "ExtractRejected", str(exc))
        except _Failed as exc:
            return await self._finish(job, "failed", [], exc.error_class, str(exc))
        except _Lost:  # another worker holds the job now: its outcome is that worker's to record
            return _outcome(job, "running", [], None, None, None)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == "RG403":
                return await self._finish(job, "failed", [], "Forbidden", exc.args[0] if exc.args else "forbidden")
            return await self._retry_or_fail(job, type(exc).__name__, "the database refused the write")
        except (asyncio.CancelledError, Unavailable, OSError, asyncpg.InterfaceError):
            raise  # the server stops, or the database is away: the lease ends and the job is claimed again
        except Exception as exc:  # a fault of its own: said with its traceback, and retried like an outage
            log.warning("an extraction job failed unexpectedly", exc_info=True)
            return await self._retry_or_fail(job, type(exc).__name__, "unexpected failure")
        view = _outcome(job, "done", [m.id for m in memories], self.extractor.model, None, None)
        view.memories = memories
        EXTRACTIONS.labels("done", "").inc()
        EXTRACT_SECONDS.observe(max(0.0, (view.finished_at or job.queued_at).timestamp() - job.queued_at.timestamp()))
        return view

    def _namespace(self, template: str, subject: str | None) -> str:
        try:
            return resolve_namespace(template, subject)
        except ValueError as exc:
            raise _Failed("NoNamespace", str(exc)) from None

    def _shown(self, messages: list[q.JobMessage]) -> list[Shown]:
        """What the model is shown: retracted messages never; tool results and oversized messages as configured."""
        limit, shown = self.settings.extract_max_chars, []
        for m in messages:
            if m.retracted or (m.role == "tool" and self.settings.extract_tool_messages == "skip"):
                continue
            content = m.head.decode(errors="ignore")
            if m.content_type == "application/json":
                content = _json_text(m.head, content)
            cut = len(content) > limit or m.bytes > len(m.head)
            if cut and self.settings.extract_oversized == "skip":
                continue
            shown.append(Shown(seq=m.seq, role=m.role, at=m.at.isoformat(), content=content[:limit], truncated=cut))
        return shown

    async def _write(self, job: q.Job, access: str, namespace: str, extracted: list[Extracted]
                     ) -> list[ExtractedMemory]:
        """The memories and the job's outcome in one transaction, as the appending key; none if the claim is lost."""
        assert self.extractor is not None
        model = self.extractor.model
        tags = msgspec.json.encode({"origin": "extracted", "model": _tag(model)}).decode()
        written: list[ExtractedMemory] = []
        started = time.perf_counter()
        async with tenancy.key_session(self.db, job.tenant_id, access) as conn:
            if not await q.lock_claimed_job(conn, job.tenant_id, job.thread_id, job.from_seq, job.attempts):
                raise _Lost()
            if await q.extraction_key(conn, job.tenant_id, job.key_id) is None:  # revoked while the model answered
                raise _Failed("KeyRevoked", "the key that appended the messages was revoked")
            await q.check_write_grant(conn, namespace)
            for memory in extracted:
                written.append(await self._one(conn, job, namespace, memory, tags))
            await q.finish_extraction(conn, job.tenant_id, job.thread_id, job.from_seq, "done", model,
                                      [m.id for m in written], None, None)
        EXTRACTED.inc(len(written))
        log.debug("extraction wrote %d memories in %.3f s", len(written), time.perf_counter() - started)
        return written

    async def _one(self, conn: q.Conn, job: q.Job, namespace: str, memory: Extracted, tags: str) -> ExtractedMemory:
        """One memory: a new version of its normalised key, unless the current one says the same."""
        key = normalise_key(memory.kind, memory.key)
        value = {"statement": memory.statement, **({"date": memory.date} if memory.date else {})}
        data = msgspec.json.encode(value)
        sha = hashlib.sha256(data).digest()
        summary = text.one_line(memory.summary, 200)
        await q.lock_memory_pair(conn, job.tenant_id, namespace, key)
        current = await q.current_memory_sha(conn, job.tenant_id, namespace, key)
        if current is not None and current[1] == sha and current[0] == memory.kind:
            memory_id = current[2]
        else:
            memory_id = ids.new("memory")
            h = hashlib.sha256(f"{job.thread_id}\0{job.from_seq}\0{key}".encode() + data).digest()
            await q.insert_memory(conn, job.tenant_id, memory_id, namespace, key, pair_hash(namespace, key),
                                  memory.kind, summary, "application/json", data, sha, tags, "unconfirmed",
                                  _NO_LABELS, h, None)
            sources = list(dict.fromkeys(f"{job.thread_id}/{s}" for s in sorted(memory.sources)))[:MAX_SOURCES]
            await q.insert_memory_sources(conn, job.tenant_id, memory_id, sources)
        return ExtractedMemory(id=memory_id, namespace=namespace.split("/"), key=key, kind=memory.kind,
                               summary=summary, href=f"/memories/{memory_id}")

    async def _retry_or_fail(self, job: q.Job, error_class: str, message: str) -> Extraction:
        if job.attempts >= self.settings.extract_attempts:
            return await self._finish(job, "failed", [], error_class, message)
        delay = min(3600.0, self.settings.extract_backoff * 2 ** (job.attempts - 1))
        async with tenancy.key_session(self.db, job.tenant_id, "write") as conn:
            await q.retry_extraction(conn, job.tenant_id, job.thread_id, job.from_seq, job.attempts, delay,
                                     error_class, message)
        EXTRACTIONS.labels("retried", error_class).inc()
        log.warning("extraction of a job will be retried in %.1f s: %s", delay, error_class)
        return _outcome(job, "queued", [], None, error_class, message)

    async def _finish(self, job: q.Job, status: str, memory_ids: list[str], error_class: str | None,
                      error: str | None) -> Extraction:
        """Record an outcome with nothing written (the bookkeeping write runs with the tenant alone bound)."""
        model = self.extractor.model if self.extractor else None
        async with tenancy.key_session(self.db, job.tenant_id, "write") as conn:
            if await q.lock_claimed_job(conn, job.tenant_id, job.thread_id, job.from_seq, job.attempts):
                await q.finish_extraction(conn, job.tenant_id, job.thread_id, job.from_seq, status, model,
                                          memory_ids, error_class, error)
        EXTRACTIONS.labels(status, error_class or "").inc()
        if status == "failed":
            log.warning("an extraction job failed: %s", error_class)
        return _outcome(job, status, memory_ids, model, error_class, error)

    async def publish_stats(self) -> None:
        async with self.db.connection() as conn:
            due, waiting, failed, oldest = await q.extraction_stats(conn)
        EXTRACT_QUEUE.labels("due").set(due)
        EXTRACT_QUEUE.labels("waiting").set(waiting)
        EXTRACT_QUEUE.labels("failed").set(failed)
        EXTRACT_LAG.set(oldest)

    async def aclose(self) -> None:
        if self.extractor is not None:
            await self.extractor.aclose()


class _Lost(Exception):
    """The claim's lease ran out and another worker took the job: this one writes nothing."""


def _json_text(head: bytes, fallback: str) -> str:
    """A JSON message's text parts (as its preview shows them), else its JSON."""
    try:
        parsed: Any = msgspec.json.decode(head)
    except msgspec.DecodeError:  # cut short: its JSON as it starts
        return fallback
    return text.message_text(parsed)


_NO_LABELS = Labels(app_id=None, agent_id=None, run_id=None)


def _job_view(j: q.JobRow) -> Extraction:
    return Extraction(from_seq=j.from_seq, to_seq=j.to_seq, status=j.status, attempts=j.attempts,  # type: ignore[arg-type]
                      queued_at=j.queued_at, memory_ids=j.memory_ids, finished_at=j.finished_at, model=j.model,
                      error_class=j.error_class, error=j.error)


def _outcome(job: q.Job, status: str, memory_ids: list[str], model: str | None, error_class: str | None,
             error: str | None) -> Extraction:
    return Extraction(from_seq=job.from_seq, to_seq=job.to_seq, status=status, attempts=job.attempts,  # type: ignore[arg-type]
                      queued_at=job.queued_at, memory_ids=memory_ids, model=model, error_class=error_class,
                      error=error, finished_at=None if status == "queued" else datetime.now(timezone.utc))


