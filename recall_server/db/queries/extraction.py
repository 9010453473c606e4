"""Extraction: a thread's opt-in, the job queue (queueing, the claim, retries, the outcome), what a job reads,
the jobs of a thread as GET /threads/{id}/extractions shows them, and the queue's metrics."""

from __future__ import annotations

from datetime import datetime

import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed


class Job(msgspec.Struct):
    """A claimed job: its thread's seq range, the key that appended it, the attempt this claim is."""

    tenant_id: str
    thread_id: str
    from_seq: int
    to_seq: int
    key_id: str
    attempts: int
    queued_at: datetime


class JobMessage(msgspec.Struct):
    seq: int
    role: str
    at: datetime
    content_type: str
    bytes: int
    head: bytes  # the content's first bytes, at most what the model may be shown
    retracted: bool


class JobRow(msgspec.Struct):
    from_seq: int
    to_seq: int
    status: str
    attempts: int
    queued_at: datetime
    finished_at: datetime | None
    model: str | None
    error_class: str | None
    error: str | None
    memory_ids: list[str]


async def check_write_grant(conn: Conn, namespace: str) -> None:
    """Raise RG403 (a 403) unless the bound key may write `namespace` (recall_granted)."""
    await conn.fetchval("SELECT recall_granted($1, true)", namespace)


async def set_thread_extraction(conn: Conn, tenant: str, thread_id: str, namespace: str | None) -> None:
    """The thread's extraction namespace (None: off for it, whatever its tenant's default)."""
    await conn.execute(
        """INSERT INTO extraction_threads (tenant_id, thread_id, namespace) VALUES ($1, $2, $3)
           ON CONFLICT (tenant_id, thread_id) DO UPDATE SET namespace = excluded.namespace, updated_at = now()""",
        tenant, thread_id, namespace)


async def queue_extraction(conn: Conn, tenant: str, thread_id: str, key_id: str, from_seq: int,
                           to_seq: int, hold: float = 0.0) -> bool:
    """Queue the job of an appended seq range when the thread extracts, due in `hold` seconds; whether it was."""
    return await conn.fetchval(
        """INSERT INTO extraction_jobs (tenant_id, thread_id, from_seq, to_seq, key_id, not_before)
           SELECT $1, $2, $4, $5, $3, now() + $6 * interval '1 second' WHERE recall_extracts($1, $2)
           ON CONFLICT DO NOTHING RETURNING true""",
        tenant, thread_id, key_id, from_seq, to_seq, hold) is not None


async def claim_extraction(conn: Conn, after: str, lease: float) -> Job | None:
    """The next due job of the tenant after `after` that has one (tenants take turns), claimed for `lease` s."""
    row = await conn.fetchrow("SELECT * FROM recall_extraction_claim($1, $2)", after, lease)
    return None if row is None else Job(**dict(row))


async def claim_extraction_job(conn: Conn, tenant: str, thread_id: str, from_seq: int, lease: float) -> Job | None:
    """Claim this queued job (extract=sync, right after its append, which held it from the workers) for `lease`
    s; None when another has it."""
    row = await conn.fetchrow(
        """UPDATE extraction_jobs SET status = 'running', attempts = attempts + 1,
                  not_before = now() + $4 * interval '1 second'
            WHERE tenant_id = $1 AND thread_id = $2 AND from_seq = $3 AND status = 'queued'
        RETURNING tenant_id, thread_id, from_seq, to_seq, key_id, attempts, queued_at""",
        tenant, thread_id, from_seq, lease)
    return None if row is None else Job(**dict(row))


async def extraction_key(conn: Conn, tenant: str, key_id: str) -> tuple[str, str | None] | None:
    """The live key's access (as the key check binds it) and subject; None once it is revoked or read-only."""
    row = await conn.fetchrow("SELECT access, subject FROM recall_extraction_key($1, $2)", tenant, key_id)
    return None if row is None else (row[0], row[1])


async def extraction_target(conn: Conn, tenant: str, thread_id: str) -> tuple[bool, str | None, str | None]:
    """For the thread: whether it has its own setting, that namespace, and its tenant's default template."""
    row = await conn.fetchrow(
        """SELECT x.thread_id IS NOT NULL, x.namespace, n.extract_namespace
             FROM tenants n LEFT JOIN extraction_threads x ON x.tenant_id = $1 AND x.thread_id = $2
            WHERE n.id = $1""", tenant, thread_id)
    return (False, None, None) if row is None else (row[0], row[1], row[2])


async def job_messages(conn: Conn, tenant: str, thread_id: str, from_seq: int, to_seq: int,
                       head_bytes: int) -> list[JobMessage]:
    """The range's messages of a live thread, in order, each with at most `head_bytes` of its content."""
    rows = await conn.fetch(
        """SELECT m.seq, m.role, m.at, m.content_type, octet_length(m.content) AS bytes,
                  substring(m.content FROM 1 FOR $5) AS head,
                  recall_message_retracted(m.tenant_id, m.thread_id, m.seq) AS retracted
             FROM thread_messages m JOIN threads t ON t.tenant_id = $1 AND t.id = $2
            WHERE m.tenant_id = $1 AND m.thread_id = $2 AND m.seq BETWEEN $3 AND $4
              AND NOT recall_is_gone(t.deleted_at, t.expires_at)
            ORDER BY m.seq""", tenant, thread_id, from_seq, to_seq, head_bytes)
    return [JobMessage(**dict(r)) for r in rows]


async def lock_claimed_job(conn: Conn, tenant: str, thread_id: str, from_seq: int, attempts: int) -> bool:
    """Lock the job for the outcome's transaction; whether it is still this claim's (running, same attempt)."""
    return await conn.fetchval(
        """SELECT true FROM extraction_jobs
            WHERE tenant_id = $1 AND thread_id = $2 AND from_seq = $3 AND status = 'running' AND attempts = $4
              FOR UPDATE""", tenant, thread_id, from_seq, attempts) is not None


async def current_memory_sha(conn: Conn, tenant: str, namespace: str, key: str) -> tuple[str, bytes, str] | None:
    """The pair's live current version's kind, value hash and ID (an unchanged memory is not written again)."""
    row = await conn.fetchrow(
        """SELECT kind, value_sha256, id FROM memories
            WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND current
              AND NOT recall_is_gone(deleted_at, expires_at)""", tenant, namespace, key)
    return None if row is None else (row[0], row[1], row[2])


async def finish_extraction(conn: Conn, tenant: str, thread_id: str, from_seq: int, status: str, model: str | None,
                            memory_ids: list[str], error_class: str | None, error: str | None) -> None:
    """The job's outcome: done with the memories it wrote, or failed with its error's class."""
    await conn.execute(
        """UPDATE extraction_jobs SET status = $4, finished_at = now(), model = $5, memory_ids = $6,
                  error_class = $7, error = left($8, 500)
            WHERE tenant_id = $1 AND thread_id = $2 AND from_seq = $3""",
        tenant, thread_id, from_seq, status, model, memory_ids, error_class, error)


async def retry_extraction(conn: Conn, tenant: str, thread_id: str, from_seq: int, attempts: int, delay: float,
                           error_class: str, error: str) -> bool:
    """Queue the claimed job again in `delay` seconds, with what failed; whether it was still this claim's."""
    return await conn.fetchval(
        """UPDATE extraction_jobs SET status = 'queued', not_before = now() + $5 * interval '1 second',
                  error_class = $6, error = left($7, 500)
            WHERE tenant_id = $1 AND thread_id = $2 AND from_seq = $3 AND status = 'running' AND attempts = $4
        RETURNING true""", tenant, thread_id, from_seq, attempts, delay, error_class, error) is not None


async def extraction_stats(conn: Conn) -> tuple[int, int, int, float]:
    """(due, waiting on a retry or a lease, failed, the oldest unfinished job's age in seconds)."""
    row = await conn.fetchrow("SELECT * FROM recall_extraction_stats()")
    return row[0], row[1], row[2], row[3]


_JOB_JSON = """json_build_object('from_seq', j.from_seq, 'to_seq', j.to_seq, 'status', j.status,
    'attempts', j.attempts, 'queued_at', j.queued_at, 'finished_at', j.finished_at, 'model', j.model,
    'error_class', j.error_class, 'error', j.error, 'memory_ids', j.memory_ids)"""

# A page of a thread's jobs, newest first, before seq $4, and its extraction setting, for the key: the thread's
# gone-ness first (its policy applies the key's grants: a thread it cannot see is a miss).
_JOBS = keyed(f"""
    SELECT recall_is_gone(t.deleted_at, t.expires_at) AS gone,
           (SELECT x.thread_id IS NOT NULL FROM extraction_threads x
             WHERE x.tenant_id = auth.tenant AND x.thread_id = $3) AS own,
           (SELECT x.namespace FROM extraction_threads x WHERE x.tenant_id = auth.tenant AND x.thread_id = $3) AS ns,
           (SELECT n.extract_namespace FROM tenants n WHERE n.id = auth.tenant) AS template,
           (SELECT coalesce(json_agg({_JOB_JSON} ORDER BY j.from_seq DESC), '[]')::text FROM (
               SELECT * FROM extraction_jobs j WHERE j.tenant_id = auth.tenant AND j.thread_id = $3 AND j.from_seq < $4
                ORDER BY j.from_seq DESC LIMIT $5) j) AS jobs
      FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
""")

_jobs = msgspec.json.Decoder(list[JobRow])


class ThreadJobs(msgspec.Struct):
    gone: bool
    own: bool
    namespace: str | None
    template: str | None
    jobs: list[JobRow]


async def list_extractions(conn: Conn, cred: Credential, thread_id: str, before: int, limit: int
                           ) -> tuple[str, ThreadJobs | None]:
    """The thread's setting and a page of its jobs for the key: (tenant, None when it sees no such thread)."""
    tenant, row = await tenancy.fetch(conn, cred, _JOBS, thread_id, before, limit)
    if row is None:
        return tenant, None
    return tenant, ThreadJobs(gone=row["gone"], own=bool(row["own"]), namespace=row["ns"], template=row["template"],
                              jobs=_jobs.decode(row["jobs"]))
