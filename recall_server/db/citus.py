"""What `recall-server migrate --citus` does on a Citus coordinator: schema.sql one statement at a time, the
tables and functions distributed by tenant_id, then citus.sql (docs/scaling.md).

Each step is skipped when it is already done, so the command can be run again. The statements that run
differently on Citus live with their one-node forms (db/tenancy.py, db/queries/*); the function definitions
that differ, in citus.sql.
"""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg

# Replicated to every node: looked up before a tenant is known (a key, a hook), or referenced by
# every tenant table (tenants).
REFERENCE_TABLES = ("tenants", "api_keys", "hooks")

# Distributed by tenant_id, all co-located with threads; each after the tables its foreign keys name.
DISTRIBUTED_TABLES = (
    "threads", "workers", "triggers", "thread_owners", "trigger_neighbours", "reports", "report_refs",
    "thread_events", "idempotency_keys", "memories", "memory_sources", "hook_deliveries", "github_threads",
    "trace_reads", "embeddings", "embedding_queue", "checkpoint_threads", "checkpoints", "checkpoint_blobs",
    "checkpoint_writes", "thread_messages", "message_retractions", "request_audit", "memory_lineage",
    "extraction_threads", "extraction_jobs",
)

# Functions whose first argument is the tenant. Created on every node, not delegated to the tenant's node
# (no distribution argument): the server calls them inside its request's transaction, after the binding
# and other statements, and a delegated call there failed ("the backend has already been assigned a
# transaction id"). Run on the coordinator, each of their statements names the tenant, so goes to its
# shard. Signatures as regprocedure spells them.
TENANT_FUNCTIONS = (
    "recall_erase(text,text)",
    "recall_namespace_of(text,text)",
    "recall_lock_erasure(text,text)",
    "recall_lock_memory_pair(text,text,text)",
    "recall_cap_expiry(text,text)",
    "recall_lookup(text,text)",
    "recall_expiry(text,text)",
    "recall_link_of(text,text)",
    "recall_erase_memory_version(text,text)",
    "recall_wipe_memory(text,text,timestamp with time zone)",
    "recall_scrub_audit(text,text)",
    "recall_erased_with(text,text)",
    "recall_retracted_sources(text,text)",
    "recall_follow_lineage(text,text[])",
    "recall_erase_following(text,text)",
    "recall_head_events(text,text)",
    "recall_head_owners(text,text)",
    "recall_rebuild_head(text,text)",
    "recall_rebuild_heads_showing(text,text)",
    "recall_worker_head_threads(text,text)",
    "recall_worker_head_reports(text,text)",
    "recall_rebuild_worker_head(text,text)",
    "recall_rebuild_owner_heads(text,text)",
    "recall_embedding_text(text,text,text)",
    "recall_memory_scopes(text,text[])",
    "recall_prune_checkpoints(text,text[],integer,interval)",
    "recall_message_retracted(text,text,bigint)",
    "recall_extracts(text,text)",
    "recall_extraction_key(text,text)",
    "recall_append_events(text,text,text[],text[],text[],timestamp with time zone[],boolean)",
    "recall_append_notes(text,text[],text[],text[])",
    "recall_file_on_threads(text,text[],text[],text[],text[],text[],bytea[],bytea[],bytea[],"
    "timestamp with time zone[],text[],text[],text[],text[],timestamp with time zone[])",
)

# Functions a shard query or a trigger on a shard calls: created on every node, not delegated.
SHARD_FUNCTIONS = (
    "recall_is_gone(timestamp with time zone,timestamp with time zone)",
    "recall_scoped(text,text,tsvector)",
    "recall_scoped(text,tsvector)",
    "recall_scoped(text,tsquery)",
    "recall_scoped(text[],tsquery)",
    "recall_search_text(text,bytea,integer)",
    "recall_link(text,text,boolean)",
    "recall_event(bigint,text,timestamp with time zone,text,text,timestamp with time zone)",
    "recall_head_size()",
    "recall_head_event(bigint,text,timestamp with time zone,text,text,timestamp with time zone)",
    "recall_head_with(jsonb,jsonb)",
    "recall_owners_limit()",
    "recall_queue_embedding()",
    "recall_search_must(text,text)",
    "recall_message_ref(text,bigint)",
    "recall_queue_message_embedding()",
    "recall_forget_message_embedding()",
)


# recall_app's settings in the store's database (Citus passes them to every node):
ROLE_SETTINGS = (
    # Writing api_keys (a reference table pointing at tenants) makes Citus lock the tenants table's shards
    # on every node, which it allows only to a role that may write tenants; recall_app may not, and needs
    # only to skip that permission check (the lock is taken either way).
    "citus.skip_advisory_lock_permission_checks",
    # A shard query that calls a function reading tenant tables (recall_link_of, recall_lookup: a memory's
    # links, a thread's owners) runs that function's statements on the worker. Each names the same
    # tenant as the query, so they go to a co-located shard on the same node, which is the case Citus's
    # default refuses for fear it is not.
    "citus.allow_nested_distributed_execution",
)

async def prepare(conn: asyncpg.Connection) -> None:
    """The settings schema.sql and distribute() need on a coordinator, for the migration's transaction."""
    # Without this, create_reference_table('tenants') turns every table with a foreign key to it into a
    # coordinator-local table, which then cannot be distributed.
    await conn.execute("SET LOCAL citus.enable_local_reference_table_foreign_keys = off")
    # Triggers on distributed tables: each reads and writes only its own row's tenant (thread_owners'
    # recall_owners_limit, the embedding queue's recall_queue_embedding), so on its own shard.
    await conn.execute("SET LOCAL citus.enable_unsafe_triggers = on")


async def distribute(conn: asyncpg.Connection) -> list[str]:
    """Make the reference tables, distribute the tenant tables by tenant_id co-located with threads, and
    distribute the functions; return what it did (nothing when all of it was done before)."""
    done: list[str] = []
    placed = {r[0]: r[1] for r in await conn.fetch(
        "SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition")}
    for table in REFERENCE_TABLES:
        if table not in placed:
            await conn.execute("SELECT create_reference_table($1)", table)
            done.append(f"reference table {table}")
    new = [table for table in DISTRIBUTED_TABLES if table not in placed]
    # A populated store (one that served on one node): distributing copies each table's rows into its new
    # shards, where its triggers would run (the embedding queue's, before embedding_queue is distributed:
    # "relation does not exist"). Its rows were written and queued already, so no trigger runs while they
    # move; the copies left on the coordinator go after.
    for table in new:
        await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        await conn.execute("SELECT create_distributed_table($1, 'tenant_id', colocate_with => $2)",
                           table, "default" if table == "threads" else "threads")
        await conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        done.append(f"distributed table {table}")
    for table in new:  # once every table is distributed
        await conn.execute("SELECT truncate_local_data_after_distributing_table($1)", table)
    database = await conn.fetchval("SELECT quote_ident(current_database())")
    for setting in ROLE_SETTINGS:
        if not await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_db_role_setting WHERE setrole = 'recall_app'::regrole"
                " AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND $1 = ANY (setconfig))", f"{setting}=on"):
            await conn.execute(f"ALTER ROLE recall_app IN DATABASE {database} SET {setting} = on")
            done.append(f"recall_app: {setting}")
    distributed = {r[0]: r[1] for r in await conn.fetch(
        "SELECT objid::regprocedure::text, distribution_argument_index FROM pg_dist_object"
        " WHERE classid = 'pg_proc'::regclass")}
    for signature in (*TENANT_FUNCTIONS, *SHARD_FUNCTIONS):
        if signature not in distributed and await _exists(conn, signature):
            await conn.execute("SELECT create_distributed_function($1)", signature)
            done.append(f"function {signature} on every node")
    return done


async def _exists(conn: asyncpg.Connection, signature: str) -> bool:
    return await conn.fetchval("SELECT to_regprocedure($1) IS NOT NULL", signature)


_TOKEN = re.compile(r"--[^\n]*|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(\$[A-Za-z_]*\$)|;")


def statements(script: str) -> list[str]:
    """schema.sql as its statements, one by one. A Citus coordinator passes some DDL (ALTER INDEX ... SET,
    DROP POLICY, ALTER TABLE ... ENABLE ROW LEVEL SECURITY) to the workers as the text of the query it
    came in: a script sent whole reaches them as several commands, which they refuse. Splits at the
    semicolons outside comments, quotes and dollar quotes."""
    found, start, at = [], 0, 0
    while (m := _TOKEN.search(script, at)) is not None:
        at = m.end()
        if m.group(1):  # a dollar quote: skip to its end
            at = script.index(m.group(1), at) + len(m.group(1))
        elif m.group(0) == ";":
            found.append(script[start:at])
            start = at
    found.append(script[start:])
    return [s for s in found if _TOKEN.sub(lambda t: "" if t.group(0).startswith("--") else t.group(0), s).strip()]


def definitions() -> str:
    """citus.sql: the functions and types a coordinator defines after schema.sql."""
    return (Path(__file__).parent / "citus.sql").read_text()
