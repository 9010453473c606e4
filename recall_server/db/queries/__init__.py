"""Every SQL statement the server runs, one module per aggregate: one function each, connection first,
$n parameters only.

The caller owns the transaction. Reads that serve a GET are single statements (one round
trip) behind the key check (db/tenancy.py): they name the tenant `auth.tenant`, take their own
parameters from $3, and return the key's tenant with what they found. Linked summaries and
recent events arrive as JSON arrays in the same row. Writes run in a session that tenancy
opened, for the `tenant` it bound. Gone (deleted or expired) objects come back flagged, never
filtered silently: the service answers 410 for them; links and events to gone objects render through
recall_link/recall_event.

Callers use the package (`from recall_server.db import queries as q; q.fetch_thread(...)`): every
function name is unique across the aggregates and says what it does, so the call sites read the same
whichever module holds the statement, and this file is the table of contents.
"""

from recall_server.db.queries._common import HEAD_SIZE, Conn
# threads.py: the view (from its head or its log), the list, creating, updating, owners, the row lock.
from recall_server.db.queries.threads import (
    fetch_thread, list_threads, insert_thread, update_thread, insert_owner, lock_thread, ensure_thread,
    count_owners, rebuild_head, rebuild_owner_heads, cap_expiry
)
# events.py: a page of the log, appending one, appending many notes at once, one by seq.
from recall_server.db.queries.events import list_events, append_event, NewNote, note_many, event_at
# messages.py: a conversation's messages: appending, a page of the replay, retracting, content, erasure findings.
from recall_server.db.queries.messages import (
    NewMessageRow, MessageRow, append_messages, append_messages_keyed, list_messages, messages_at, live_message_seqs, message_seqs,
    count_live_messages_through, retract_messages, fetch_message_content, message_findings
)
# workers.py: the view (from its head or from the tables), creating one, rebuilding its head.
from recall_server.db.queries.workers import fetch_worker, insert_worker, rebuild_worker_head
# triggers.py: the view, filing one (with its event on its thread), filing many at once, neighbours.
from recall_server.db.queries.triggers import (
    fetch_trigger, trigger_by_external_id, payload_sha, insert_neighbours, insert_trigger, NewTrigger,
    file_on_threads, ingest_many
)
# reports.py: the view, a worker's list, filing one with its refs.
from recall_server.db.queries.reports import fetch_report, list_reports, insert_report, insert_refs
# memories.py: the view by ID or (namespace, key), the lists (memories, versions, namespaces), writing a version,
# refreshing expiries.
from recall_server.db.queries.memories import (
    fetch_memory, fetch_current_memory, fetch_memory_as_of, memory_pair_existed, list_memories, list_memory_versions,
    list_memory_namespaces, lock_memory_pair, insert_memory, insert_memory_sources, keep_memory_ttl, refresh_memories
)
# objects.py: its content, what it resolves to, its state, the hash of the request that made it.
from recall_server.db.queries.objects import fetch_content, resolve, states, state, request_hash
# search.py: full-text search and backlinks.
from recall_server.db.queries.search import (
    SEARCH_PREFIX, search, search_ranked, search_memories_as_of, sources_erased, BACKLINK_RELATIONS, backlinks,
)
# trace.py: recording read batches, purging retained rows, a run's and an object's reads.
from recall_server.db.queries.trace import record_reads, purge_retained, ReadPosition, run_reads, object_reads
# audit.py: recording request batches, purging retained rows, a page of requests, one request.
from recall_server.db.queries.audit import (
    record_requests, purge_audit, RequestFilter, RequestPosition, list_requests, requests_by_id
)
# idempotency.py: the per-key lock, the stored response, recording one.
from recall_server.db.queries.idempotency import idempotency_lock, idempotency_get, idempotency_put
# erasure.py: erase one ID, sweep expired objects, and the verify-erasure findings.
from recall_server.db.queries.erasure import (
    erase, follow_retraction, sweep, erasure_findings, search_index_findings, derived_memories,
)
# embeddings.py: the indexer's queue, reindexing, the vector index, whether vectors are available.
from recall_server.db.queries.embeddings import (
    Queued, QueueStats, vectors_available, embedding_batch, store_embeddings, embeddings_failed,
    embedding_queue_stats, queue_reindex, IndexPlan, vector_index_plan, hold_index_build, run_index_statement
)
# keys.py: create, list, change grants, revoke (operator CLI as the owner; admin endpoints within a tenant), a
# key's own row, when keys were last used.
from recall_server.db.queries.keys import (insert_key, key_subject, list_keys, own_key, record_key_use, revoke_key,
                                           set_grants)
# hooks.py: hooks (operator CLI as the owner; admin endpoints within a tenant), deliveries, GitHub thread states.
from recall_server.db.queries.hooks import (
    insert_hook, list_hooks, revoke_hook, claim_delivery, finish_delivery, delivery_outcome, advance_github_thread
)
# checkpoints.py: LangGraph checkpoints: a tuple, a page, a put (with its values), writes, erasing a
# thread, deleting runs, copying a thread, pruning and retention (and the writes without their checkpoint), the
# verify-erasure findings.
from recall_server.db.queries.checkpoints import (
    fetch_channel_value, fetch_write_value, fetch_checkpoint, list_checkpoints, checkpoint_thread_gone, make_checkpoint_thread, lock_checkpoint_threads,
    put_checkpoint, put_checkpoint_writes, erase_checkpoint_thread,
    checkpoint_threads_of_runs, delete_checkpoint_runs, copy_checkpoint_thread, prune_checkpoints,
    checkpoint_retention, checkpoint_orphans, set_checkpoint_retention, checkpoint_thread_state, checkpoint_erasure_findings
)
# extraction.py: a thread's opt-in, the job queue (queueing, the claim, retries, outcomes), a job's messages, a
# thread's jobs, the queue's metrics.
from recall_server.db.queries.extraction import (
    Job, JobMessage, JobRow, ThreadJobs, check_write_grant, set_thread_extraction, queue_extraction, claim_extraction,
    claim_extraction_job,
    extraction_key, extraction_target, job_messages, lock_claimed_job, current_memory_sha, finish_extraction,
    retry_extraction, extraction_stats, list_extractions
)

# tenants.py: Tenants and their settings (operator CLI, as the owner); the server's own rows.
from recall_server.db.queries.tenants import (
    create_tenant, tenant_exists, tenant_names, set_retention, set_audit_retention, set_audit_queries,
    set_lineage_policy, set_memory_ttl, set_extract_namespace, cursor_secret, ping,
)

__all__ = [
    "Conn", "HEAD_SIZE", "fetch_thread", "list_threads", "insert_thread", "update_thread", "insert_owner",
    "lock_thread", "ensure_thread", "count_owners", "rebuild_head", "rebuild_owner_heads", "cap_expiry",
    "list_events", "append_event", "NewNote", "note_many", "event_at", "fetch_worker", "insert_worker",
    "rebuild_worker_head", "fetch_trigger", "payload_sha", "trigger_by_external_id", "insert_neighbours", "insert_trigger",
    "NewTrigger", "file_on_threads", "ingest_many", "fetch_report", "list_reports", "insert_report",
    "insert_refs", "fetch_memory", "fetch_current_memory", "fetch_memory_as_of", "memory_pair_existed", "list_memories",
    "list_memory_versions", "list_memory_namespaces", "lock_memory_pair", "insert_memory",
    "insert_memory_sources", "keep_memory_ttl", "refresh_memories", "fetch_content", "resolve", "states", "state",
    "request_hash", "SEARCH_PREFIX", "search", "search_ranked", "search_memories_as_of", "sources_erased",
    "BACKLINK_RELATIONS", "backlinks", "record_reads", "record_requests", "purge_audit", "RequestFilter",
    "RequestPosition", "list_requests", "requests_by_id", "purge_retained", "ReadPosition",
    "run_reads",
    "object_reads", "idempotency_lock", "idempotency_get", "idempotency_put", "erase", "follow_retraction", "derived_memories", "sweep",
    "erasure_findings", "search_index_findings", "Queued", "QueueStats", "vectors_available", "embedding_batch",
    "store_embeddings", "embeddings_failed", "embedding_queue_stats", "queue_reindex", "IndexPlan",
    "vector_index_plan", "hold_index_build", "run_index_statement",
    "insert_key", "key_subject", "list_keys", "own_key", "record_key_use", "revoke_key", "set_grants",
    "insert_hook", "list_hooks", "revoke_hook", "claim_delivery", "finish_delivery", "delivery_outcome",
    "advance_github_thread", "create_tenant", "tenant_exists", "tenant_names", "set_retention", "set_audit_retention",
    "set_audit_queries", "set_lineage_policy", "set_memory_ttl", "cursor_secret",
    "ping", "fetch_channel_value", "fetch_write_value", "fetch_checkpoint", "list_checkpoints", "checkpoint_thread_gone", "make_checkpoint_thread",
    "lock_checkpoint_threads", "put_checkpoint",
    "put_checkpoint_writes", "erase_checkpoint_thread", "checkpoint_threads_of_runs", "delete_checkpoint_runs",
    "copy_checkpoint_thread", "prune_checkpoints", "checkpoint_retention", "checkpoint_orphans",
    "set_checkpoint_retention",
    "checkpoint_thread_state", "checkpoint_erasure_findings", "NewMessageRow", "MessageRow", "append_messages", "append_messages_keyed",
    "list_messages", "messages_at", "live_message_seqs", "message_seqs", "count_live_messages_through",
    "retract_messages", "fetch_message_content", "message_findings", "Job", "JobMessage", "JobRow", "ThreadJobs",
    "check_write_grant", "set_thread_extraction", "queue_extraction", "claim_extraction", "claim_extraction_job", "extraction_key",
    "extraction_target", "job_messages", "lock_claimed_job", "current_memory_sha", "finish_extraction",
    "retry_extraction", "extraction_stats", "list_extractions", "set_extract_namespace"
]
