"""Erasure and expiry: erase one ID, sweep expired objects, and the verify-erasure findings."""

from __future__ import annotations

import msgspec

from recall_server.db.queries._common import Conn


class Derived(msgspec.Struct, frozen=True):
    """A memory version learned from an erased ID (verify-erasure): what its lineage recorded, and its state."""

    memory_id: str
    policy: str | None  # the policy applied; None: it cites an erased ID and its lineage was never followed
    erased: bool  # wiped: a tombstone
    flagged: bool  # shown with source_erased


async def erase(conn: Conn, tenant: str, object_id: str) -> None:
    """Delete: content wiped, copies scrubbed, the ID kept as a tombstone (see recall_erase); then the memories
    learned from what it erased, by the tenant's lineage policy (recall_erase_following)."""
    await conn.execute("SELECT recall_erase_following($1, $2)", tenant, object_id)


async def follow_retraction(conn: Conn, tenant: str, thread_id: str) -> None:
    """The memories learned from the thread's messages a retraction has taken out, by the tenant's lineage
    policy (as an erasure's)."""
    await conn.execute("SELECT recall_follow_lineage($1, recall_retracted_sources($1, $2))", tenant, thread_id)


async def sweep(conn: Conn, batch: int) -> int:
    """Purge up to `batch` expired objects, in every tenant; returns how many."""
    return await conn.fetchval("SELECT recall_sweep($1)", batch)


async def erasure_findings(conn: Conn, tenant: str, object_id: str) -> list[str]:
    """Every place where content of this ID could still be read; empty when it is fully erased."""
    rows = await conn.fetch(
        """
        SELECT place FROM (
          SELECT 'triggers: the trigger row still has content' AS place FROM triggers
           WHERE tenant_id = $1 AND id = $2 AND (summary <> '' OR octet_length(payload) > 0 OR external_id IS NOT NULL)
          UNION ALL SELECT 'reports: the report row still has content' FROM reports
           WHERE tenant_id = $1 AND id = $2 AND (summary <> '' OR octet_length(body) > 0)
          UNION ALL SELECT 'workers: the worker row still has content' FROM workers
           WHERE tenant_id = $1 AND id = $2 AND (name <> '' OR summary <> '')
          UNION ALL SELECT 'threads: the thread row still has content' FROM threads
           WHERE tenant_id = $1 AND id = $2 AND (title <> '' OR summary <> '')
          UNION ALL SELECT 'thread_events: summary copied into ' || thread_id || ' seq ' || seq FROM thread_events
           WHERE tenant_id = $1 AND ref = $2 AND type IN ('trigger_filed', 'report_filed') AND summary <> ''
          UNION ALL SELECT 'thread_events: the thread''s own event seq ' || seq FROM thread_events
           WHERE tenant_id = $1 AND thread_id = $2
          UNION ALL SELECT 'threads: the head of ' || id || ' still copies a summary of it' FROM threads
           WHERE tenant_id = $1 AND (
             jsonb_path_exists(head_events, '$[*] ? (@.ref == $id && @.summary != "" &&
                                                     (@.type == "trigger_filed" || @.type == "report_filed"))',
                               jsonb_build_object('id', $2))
             OR jsonb_path_exists(head_owners, '$[*] ? (@.id == $id && @.summary != "")', jsonb_build_object('id', $2)))
          UNION ALL SELECT 'threads: the erased thread''s head still shows its log' FROM threads
           WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NOT NULL AND (head_events <> '[]' OR head_owners <> '[]')
          UNION ALL SELECT 'triggers: ' || id || ' filed on the thread still has content' FROM triggers
           WHERE tenant_id = $1 AND thread_id = $2 AND (summary <> '' OR octet_length(payload) > 0)
          UNION ALL SELECT 'reports: ' || id || ' about the thread still has content' FROM reports
           WHERE tenant_id = $1 AND thread_id = $2 AND (summary <> '' OR octet_length(body) > 0)
          UNION ALL SELECT 'idempotency_keys: stored response of key ' || key || ' shows it' FROM idempotency_keys
           WHERE tenant_id = $1 AND body IS NOT NULL  -- its bytes, not only `shows`: what erasure looks up
             AND (shows @> ARRAY[$2] OR object_id = $2 OR position(convert_to('"' || $2 || '"', 'UTF8') in body) > 0)
          UNION ALL SELECT 'memories: gone version ' || v.id || ' of the pair still has content' FROM memories v
           WHERE v.tenant_id = $1 AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND recall_is_gone(v.deleted_at, v.expires_at)
             AND (v.namespace <> '' OR v.key <> '' OR v.summary <> '' OR octet_length(v.value) > 0 OR v.tags <> '{}'
                  OR v.app_id IS NOT NULL OR v.agent_id IS NOT NULL OR v.run_id IS NOT NULL)
          UNION ALL SELECT 'memory_sources: gone version ' || s.memory_id || ' still lists its sources'
            FROM memory_sources s JOIN memories v ON v.tenant_id = s.tenant_id AND v.id = s.memory_id
           WHERE s.tenant_id = $1 AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND recall_is_gone(v.deleted_at, v.expires_at)
          UNION ALL SELECT 'idempotency_keys: stored response of key ' || k.key || ' shows gone version ' || v.id
            FROM memories v JOIN idempotency_keys k ON k.tenant_id = v.tenant_id AND k.body IS NOT NULL
                 AND (k.shows @> ARRAY[v.id] OR position(convert_to('"' || v.id || '"', 'UTF8') in k.body) > 0)
           WHERE v.tenant_id = $1 AND v.id <> $2
             AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND recall_is_gone(v.deleted_at, v.expires_at)
          UNION ALL SELECT 'request_audit: request ' || coalesce(a.request_id, a.tick::text) || ' keeps the namespace of '
                           || v.id
            FROM memories v JOIN request_audit a ON a.tenant_id = v.tenant_id AND a.object_ids @> ARRAY[v.id]
           WHERE v.tenant_id = $1 AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND v.deleted_at IS NOT NULL AND a.namespace IS NOT NULL
        ) found ORDER BY place
        """,
        tenant, object_id,
    )
    return [r[0] for r in rows]


async def search_index_findings(conn: Conn, tenant: str, object_id: str) -> list[str]:
    """Places where the search index still holds terms of this ID's content, or of what was filed on it
    (verify-erasure), and vectors of it. An erased row's generated tsvector is empty; erasing deletes its vectors."""
    rows = await conn.fetch(
        """
        SELECT place FROM (
          SELECT 'triggers: the search index still has terms of ' || id AS place FROM triggers
           WHERE tenant_id = $1 AND (id = $2 OR thread_id = $2) AND search <> ''::tsvector
          UNION ALL SELECT 'reports: the search index still has terms of ' || id FROM reports
           WHERE tenant_id = $1 AND (id = $2 OR thread_id = $2) AND search <> ''::tsvector
          UNION ALL SELECT 'workers: the search index still has terms of ' || id FROM workers
           WHERE tenant_id = $1 AND id = $2 AND search <> ''::tsvector
          UNION ALL SELECT 'threads: the search index still has terms of ' || id FROM threads
           WHERE tenant_id = $1 AND id = $2 AND search <> ''::tsvector
          UNION ALL SELECT 'memories: the search index still has terms of ' || id FROM memories
           WHERE tenant_id = $1 AND search <> ''::tsvector
             AND (id = $2 OR (pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
                              AND recall_is_gone(deleted_at, expires_at)))
          UNION ALL SELECT DISTINCT 'embeddings: a vector of ' || e.object_id || ' still exists' FROM embeddings e
           WHERE e.tenant_id = $1 AND (e.object_id = $2
                 OR e.object_id IN (SELECT id FROM triggers WHERE tenant_id = $1 AND thread_id = $2
                                    UNION ALL SELECT id FROM reports WHERE tenant_id = $1 AND thread_id = $2
                                    UNION ALL SELECT v.id FROM memories v
                                     WHERE v.tenant_id = $1 AND recall_is_gone(v.deleted_at, v.expires_at)
                                       AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)))
          UNION ALL SELECT 'request_audit: request ' || coalesce(a.request_id, a.tick::text) || ' keeps the namespace of '
                           || v.id
            FROM memories v JOIN request_audit a ON a.tenant_id = v.tenant_id AND a.object_ids @> ARRAY[v.id]
           WHERE v.tenant_id = $1 AND v.pair = (SELECT pair FROM memories WHERE tenant_id = $1 AND id = $2)
             AND v.deleted_at IS NOT NULL AND a.namespace IS NOT NULL
        ) found ORDER BY place
        """,
        tenant, object_id,
    )
    return [r[0] for r in rows]


async def derived_memories(conn: Conn, tenant: str, object_id: str) -> list[Derived]:
    """The memory versions learned from what erasing this ID erased, directly or through other memories (the
    lineage recorded, followed through the pairs it erased), and those citing it whose lineage was never
    followed."""
    rows = await conn.fetch(
        """
        WITH RECURSIVE roots AS (  -- an erased thread's messages: those its lineage recorded too (their
                                   -- memories may be erased since, and their sources with them)
            SELECT unnest(recall_erased_with($1, $2)) AS id
            UNION SELECT source_id FROM memory_lineage
             WHERE tenant_id = $1 AND left($2, 4) = 'thr_' AND left(source_id, length($2) + 1) = $2 || '/'),
        lineage(memory_id, policy) AS (
            SELECT l.memory_id, l.policy FROM memory_lineage l
             WHERE l.tenant_id = $1 AND l.source_id IN (SELECT id FROM roots)
            UNION
            SELECT l.memory_id, l.policy FROM lineage d
              JOIN memories m ON m.tenant_id = $1 AND m.id = d.memory_id
              JOIN memories v ON v.tenant_id = $1 AND v.pair = m.pair
              JOIN memory_lineage l ON l.tenant_id = $1 AND l.source_id = v.id
        ), found AS (
            SELECT memory_id, policy FROM lineage
            UNION
            SELECT s.memory_id, NULL FROM memory_sources s
              JOIN memories m ON m.tenant_id = s.tenant_id AND m.id = s.memory_id AND m.deleted_at IS NULL
             WHERE s.tenant_id = $1 AND s.source_id IN (SELECT id FROM roots)
               AND NOT EXISTS (SELECT 1 FROM memory_lineage l
                                WHERE l.tenant_id = $1 AND l.memory_id = s.memory_id AND l.source_id = s.source_id))
        SELECT f.memory_id, f.policy,
               m.deleted_at IS NOT NULL AND m.namespace = '' AND octet_length(m.value) = 0 AS erased,
               EXISTS (SELECT 1 FROM memory_lineage l
                        WHERE l.tenant_id = $1 AND l.memory_id = f.memory_id AND l.policy = 'flag') AS flagged
          FROM found f JOIN memories m ON m.tenant_id = $1 AND m.id = f.memory_id
         ORDER BY f.memory_id, f.policy
        """,
        tenant, object_id,
    )
    return [Derived(r["memory_id"], r["policy"], r["erased"], r["flagged"]) for r in rows]
