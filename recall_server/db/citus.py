"""Citus: whether a store is a Citus coordinator, and distributing the migrated schema by tenant_id.

Everything Citus-specific the schema needs is here (docs/scaling.md). `distribute()` runs after
schema.sql, on the coordinator, only when the citus extension exists; each step is skipped when it
is already done, so `recall-server migrate --citus` can be run again.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from recall_server.db.pool import Connection

# Replicated to every node: looked up before a tenant is known (a key, a hook), or referenced by
# every tenant table (tenants).
REFERENCE_TABLES = ("tenants", "api_keys", "hooks")

# Distributed by tenant_id, all co-located with threads; each after the tables its foreign keys name.
DISTRIBUTED_TABLES = (
    "threads", "workers", "triggers", "thread_owners", "trigger_neighbours", "reports", "report_refs",
    "thread_events", "idempotency_keys", "memories", "memory_sources", "hook_deliveries", "github_threads",
    "trace_reads", "embeddings", "embedding_queue", "checkpoint_threads", "checkpoints", "checkpoint_blobs",
    "checkpoint_writes", "thread_messages", "message_retractions",
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

# What the server's connections to a coordinator ask for at connect, beside pool.SESSION:
SESSION = {
    # asyncpg looks up each type it has no codec for (bigint[], timestamptz[]) once per connection, with a
    # query joining pg_type to pg_class. Citus hides shards from clients by filtering pg_class through a
    # function, row by row, which took that lookup from ~20 ms to 500-800 ms, inside a request's transaction:
    # a retraction's under its thread's row lock, so eight at once on fresh connections queued past the
    # statement timeout (tests/test_messages.py, concurrent pops). The server lists no tables: it sees shards.
    "citus.override_table_visibility": "off",
}


async def present(conn: asyncpg.Connection) -> bool:
    """Whether the store is a Citus coordinator (the citus extension exists in its database)."""
    return bool(await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"))


async def prepare(conn: asyncpg.Connection) -> None:
    """The settings schema.sql and distribute() need on a coordinator, for the migration's transaction."""
    # Without this, create_reference_table('tenants') turns every table with a foreign key to it into a
    # coordinator-local table, which then cannot be distributed.
    await conn.execute("SET LOCAL citus.enable_local_reference_table_foreign_keys = off")
    # Triggers on distributed tables: each reads and writes only its own row's tenant (thread_owners'
    # recall_owners_limit, the embedding queue's recall_queue_embedding), so on its own shard.
    await conn.execute("SET LOCAL citus.enable_unsafe_triggers = on")


_TABLE_READ = r"(FROM|JOIN)\s+(" + "|".join(DISTRIBUTED_TABLES) + r")\M"


# schema.sql functions a coordinator defines differently, at the point schema.sql defines them (so the
# statements after it that call one call this version): name -> its definition on Citus.
OVERRIDES = {
    # The tenant policy of the tables whose rows have a namespace (and trace_reads, `via`) without the
    # InitPlans schema.sql's has: Citus refuses a policy with a subquery on a distributed table. The same
    # test, as a call per row (recall_granted) and an inline comparison.
    "recall_isolate": r"""CREATE OR REPLACE FUNCTION recall_isolate(tbl text, forced boolean DEFAULT true,
                                          granted boolean DEFAULT false, via text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $citus$
DECLARE
    mine constant text := 'tenant_id = current_setting(''app.tenant_id'', true)';
    ungranted constant text := 'strpos(coalesce(current_setting(''app.access'', true), ''''), E''\n'') = 0';
    tombstones constant boolean := EXISTS (SELECT 1 FROM pg_attribute
                                            WHERE attrelid = tbl::regclass AND attname = 'deleted_at');
BEGIN
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', tbl);
    EXECUTE format('ALTER TABLE %I %s ROW LEVEL SECURITY', tbl, CASE WHEN forced THEN 'FORCE' ELSE 'NO FORCE' END);
    EXECUTE format('DROP POLICY IF EXISTS tenant_isolation ON %I', tbl);
    EXECUTE format('DROP POLICY IF EXISTS owner_maintenance ON %I', tbl);
    EXECUTE format('CREATE POLICY owner_maintenance ON %I TO %I USING (true) WITH CHECK (true)', tbl, current_user);
    EXECUTE format('CREATE POLICY tenant_isolation ON %I TO recall_app USING (%s) WITH CHECK (%s)', tbl,
                   mine || CASE WHEN granted THEN ' AND recall_granted(namespace, false)'
                                WHEN via IS NOT NULL THEN ' AND (' || ungranted || ' OR ' || via || ')' ELSE '' END,
                   mine || CASE WHEN granted AND tombstones THEN ' AND (recall_granted(namespace, true)'
                                                  ' OR (deleted_at IS NOT NULL AND namespace = ''''))'
                                WHEN granted THEN ' AND recall_granted(namespace, true)' ELSE '' END);
END
$citus$""",
    # The indexer's store and its failures, a statement per tenant (a batch holds few tenants; Citus routes a
    # statement that names its tenant as a value to one shard). schema.sql's forms do all of a batch's tenants
    # in one statement each, which Citus cannot route.
    "recall_embedding_store": r"""CREATE OR REPLACE FUNCTION recall_embedding_store(p_tenants text[], p_ids text[], p_kinds text[], p_vectors text[],
    p_model text, p_dims integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $citus$
DECLARE
    v_tenant text;
    k record;
    held_o text[]; live boolean[];
    o2 text[]; l2 boolean[];
BEGIN
    -- Tenant by tenant, each statement naming its tenant as a value (a batch holds few tenants; on Citus each
    -- statement is then one shard's)
    FOR v_tenant IN SELECT DISTINCT u FROM unnest(p_tenants) u LOOP
        held_o := '{}'; live := '{}';
        FOR k IN SELECT * FROM (VALUES ('threads', 'thread', 'true'), ('workers', 'worker', 'true'),
                                       ('triggers', 'trigger', 'true'), ('reports', 'report', 'true'),
                                       ('memories', 'memory', 'x.current')) AS v(tbl, kind, current) LOOP
            EXECUTE format('SELECT coalesce(array_agg(h.o), ''{}''), coalesce(array_agg(h.live), ''{}'')
                              FROM (SELECT x.id AS o, %s AND NOT recall_is_gone(x.deleted_at, x.expires_at) AS live
                                      FROM %I x JOIN unnest($2, $3, $4) AS v(t, o, k)
                                        ON v.k = %L AND v.t = $1 AND x.id = v.o
                                     WHERE x.tenant_id = $1
                                       FOR SHARE OF x SKIP LOCKED) h', k.current, k.tbl, k.kind)
            INTO o2, l2 USING v_tenant, p_tenants, p_ids, p_kinds;
            held_o := held_o || o2; live := live || l2;
        END LOOP;
        -- messages: their rows share-locked the same way (an erasure deletes them), live while their thread is
        SELECT coalesce(array_agg(h.o), '{}'), coalesce(array_agg(h.live), '{}') INTO o2, l2
          FROM (SELECT recall_message_ref(x.thread_id, x.seq) AS o, NOT recall_is_gone(th.deleted_at, th.expires_at) AS live
                  FROM thread_messages x JOIN threads th ON th.tenant_id = x.tenant_id AND th.id = x.thread_id
                  JOIN unnest(p_tenants, p_ids, p_kinds) AS v(t, o, k)
                    ON v.k = 'message' AND v.t = v_tenant AND recall_message_ref(x.thread_id, x.seq) = v.o
                 WHERE x.tenant_id = v_tenant AND th.tenant_id = v_tenant
                   FOR SHARE OF x SKIP LOCKED) h;
        held_o := held_o || o2; live := live || l2;
        EXECUTE 'INSERT INTO embeddings (tenant_id, object_id, kind, model, dims, embedding)
                 SELECT $1, v.o, v.k, $5, $6, v.e::vector FROM unnest($2, $3, $4, $7) AS v(t, o, k, e)
                   JOIN unnest($8, $9) AS h(o, live) ON h.o = v.o
                  WHERE v.t = $1 AND v.e IS NOT NULL AND h.live
                 ON CONFLICT (tenant_id, model, object_id)
                 DO UPDATE SET embedding = excluded.embedding, dims = excluded.dims, embedded_at = excluded.embedded_at'
        USING v_tenant, p_tenants, p_ids, p_kinds, p_model, p_dims, p_vectors, held_o, live;
        DELETE FROM embedding_queue q WHERE q.tenant_id = v_tenant AND q.object_id = ANY(held_o);
        -- the rest, held by a writer: a moment later (the IDs as an array, so both key columns probe the index)
        UPDATE embedding_queue q SET not_before = now() + interval '1 second'
         WHERE q.tenant_id = v_tenant
           AND q.object_id = ANY(ARRAY(SELECT v.o FROM unnest(p_tenants, p_ids) AS v(t, o) WHERE v.t = v_tenant));
    END LOOP;
END
$citus$""",
    "recall_embedding_failed": r"""CREATE OR REPLACE FUNCTION recall_embedding_failed(p_tenants text[], p_ids text[], p_error text, p_permanent boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $citus$
DECLARE v_tenant text;
BEGIN
    FOR v_tenant IN SELECT DISTINCT u FROM unnest(p_tenants) u LOOP  -- a statement per tenant, as recall_embedding_store
        UPDATE embedding_queue q
           SET attempts = q.attempts + 1, last_error = left(p_error, 500),
               not_before = CASE WHEN p_permanent THEN 'infinity'::timestamptz
                                 ELSE now() + least(3600, 30 * 2 ^ least(q.attempts, 12)) * interval '1 second' END
         WHERE q.tenant_id = v_tenant
           AND q.object_id = ANY(ARRAY(SELECT v.o FROM unnest(p_tenants, p_ids) AS v(t, o) WHERE v.t = v_tenant));
    END LOOP;
END
$citus$""",
}

_DEFINES = re.compile(r"^\s*(?:--[^\n]*\n\s*)*CREATE OR REPLACE FUNCTION (\w+)\(")

# In a function reading recall_searchable, a filter on one of the view's constant columns (an object's
# kind; a status, which only threads have, NULL in the other arms) goes through recall_opaque. With the
# parameter's value known, PostgreSQL folds the filter to false (or NULL) in the arms it excludes and
# drops them before Citus sees their tenant_id filters; Citus then sends the statement to every shard
# instead of the tenant's one, and such a statement, run nested from a shard query, fails ("the backend
# has already been assigned a transaction id"). recall_opaque (CITUS_FUNCTIONS) is the identity,
# PL/pgSQL, so never folded: every arm stays, each with its tenant, and the filter runs on its rows.
_CONSTANT_COLUMN_FILTERS = (
    (re.compile(r"\b(\w+)\.kind = ANY\(p_kinds\)"), r"\1.kind = ANY(recall_opaque(p_kinds))"),
    (re.compile(r"\b(\w+)\.status = p_status\b"), r"recall_opaque(\1.status) = p_status"),
    # the semantic arm's one kind, written into its statement as a literal
    (re.compile(r"format\('(\w+)\.kind = %L', p_kinds\[1\]\)"), r"format('\1.kind = recall_opaque(%L::text)', p_kinds[1])"),
)


# The semantic arm's settings for its HNSW walk (pgvector's iterative scan, no sort) as SET LOCAL on a
# coordinator: the walk runs on a worker, which a SET LOCAL reaches (citus.propagate_set_commands = 'local',
# tenancy.py) and a set_config does not (tests/test_citus.py); a function that runs SET is VOLATILE.
_SETTINGS_TO_WORKERS = {"recall_semantic_hits"}
_SET_CONFIG = re.compile(r"PERFORM set_config\('([\w.]+)', (.*?), true\);", re.S)


def _settings_to_workers(statement: str) -> str:
    statement = _SET_CONFIG.sub(r"EXECUTE format('SET LOCAL \1 = %L', \2);", statement)
    return statement.replace("LANGUAGE plpgsql STABLE ", "LANGUAGE plpgsql VOLATILE ", 1)


# schema.sql's SQL functions that write, as PL/pgSQL on a coordinator: Citus plans no statement of a SQL
# function with parameters ("parameters in SQL functions"). The same statement, its last SELECT's value
# returned (_as_plpgsql). adapt() does the same for the functions that only read, after schema.sql.
_WRITERS_AS_PLPGSQL = {"recall_prune_checkpoints"}
_SQL_BODY = re.compile(r"RETURNS (\w+) LANGUAGE sql (.*?)AS \$\$(.*)\$\$\s*;?\s*$", re.S)


def _as_plpgsql(statement: str) -> str:
    """A `CREATE FUNCTION ... RETURNS <scalar> LANGUAGE sql` of one statement ending in a SELECT of one value,
    as PL/pgSQL: that statement with the value selected INTO the result, which it returns."""
    found = _SQL_BODY.search(statement)
    if found is None:
        raise ValueError("not a SQL function of one statement returning a value")
    returns, options, body = found.groups()
    before, last = body.rstrip().rsplit("SELECT ", 1)
    selected, rest = last.split(" FROM ", 1)
    return (f"{statement[:found.start()]}RETURNS {returns} LANGUAGE plpgsql {options}AS $citus$\n"
            f"DECLARE result {returns};\nBEGIN\n{before}SELECT {selected} INTO result FROM {rest}\n;\n"
            f"RETURN result;\nEND\n$citus$")


def replacement(statement: str) -> str:
    """The statement of schema.sql to send to a coordinator: itself, the Citus definition of the function
    it defines (OVERRIDES, _WRITERS_AS_PLPGSQL), or, for a function reading recall_searchable, itself with
    the filters on the view's constant columns made opaque (_CONSTANT_COLUMN_FILTERS)."""
    defined = _DEFINES.match(statement)
    if not defined:
        return statement
    if "recall_searchable" in statement:
        for pattern, opaque in _CONSTANT_COLUMN_FILTERS:
            statement = pattern.sub(opaque, statement)
    if defined.group(1) in _WRITERS_AS_PLPGSQL:
        return _as_plpgsql(statement)
    if defined.group(1) in _SETTINGS_TO_WORKERS:
        statement = _settings_to_workers(statement)
    return OVERRIDES.get(defined.group(1), statement)


async def adapt(conn: asyncpg.Connection) -> list[str]:
    """After schema.sql, on a coordinator: each SQL-language function that reads a tenant table again as
    PL/pgSQL, same body (its value, or its rows with RETURN QUERY). Citus plans the statements of a SQL function with parameters
    on no distributed table ("parameters in SQL functions"); a PL/pgSQL function's are planned with its
    arguments bound. (schema.sql keeps them SQL: on one node PostgreSQL inlines them into their callers.)"""
    readers = await conn.fetch(
        """SELECT p.proname, pg_get_function_arguments(p.oid) AS args, pg_get_function_result(p.oid) AS result,
                  p.prosrc, p.provolatile
             FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
            WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'sql'
              AND p.provolatile <> 'v' AND p.proconfig IS NULL AND p.prosrc ~ $1""", _TABLE_READ)
    for r in readers:
        volatility = "IMMUTABLE" if r["provolatile"] == "i" else "STABLE"
        body = r["prosrc"].strip().rstrip(";")
        returns = f"RETURN QUERY {body};" if r["result"].startswith("SETOF ") else f"RETURN ({body});"
        await conn.execute(
            f"CREATE OR REPLACE FUNCTION {r['proname']}({r['args']}) RETURNS {r['result']} LANGUAGE plpgsql"
            f" {volatility} PARALLEL SAFE AS $citus$\n#variable_conflict use_column\n"
            f"BEGIN\n    {returns}\nEND\n$citus$")
    for body in (*CITUS_TYPES, *CITUS_FUNCTIONS):
        await conn.execute(body)
    return [f"{r['proname']} as PL/pgSQL" for r in readers]


# Row types a coordinator reads from a worker by name: Citus passes a shard query's rows to the coordinator as
# text, and an anonymous ROW(...) has no input function there ("input of anonymous composite types is not
# implemented"). FORMS casts the ROW(...)s of the checkpoint reads to these.
# Each is made again when its number of fields is not the ROW's it names (the reads change; nothing stores them).
CITUS_TYPES = tuple(
    f"""DO $citus$ BEGIN
    IF (SELECT count(*) FROM pg_attribute a JOIN pg_type t ON a.attrelid = t.typrelid
         WHERE t.oid = to_regtype('{name}') AND a.attnum > 0 AND NOT a.attisdropped) <> {fields.count(",") + 1} THEN
        DROP TYPE IF EXISTS {name};
        CREATE TYPE {name} AS ({fields});
    END IF;
END $citus$""" for name, fields in (
        ("recall_checkpoint_value", "channel text, type text, blob bytea, size integer, version text"),
        ("recall_checkpoint_write", "task_id text, channel text, type text, blob bytea, task_path text, idx integer,"
                                    " size integer")))


# Functions a coordinator gets beside or in place of schema.sql's, each with why.
CITUS_FUNCTIONS = (
    # Its argument, as a value the planner cannot fold into a filter (_CONSTANT_COLUMN_FILTERS).
    """CREATE OR REPLACE FUNCTION recall_opaque(v anyelement) RETURNS anyelement
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $citus$ BEGIN RETURN v; END $citus$""",
    # Checkpoint retention tenant by tenant (Citus pushes down no LIMIT in a lateral subquery that reads
    # the tenants reference table): the same rule, one query per tenant with a policy.
    """CREATE OR REPLACE FUNCTION recall_checkpoint_retention(batch integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $citus$
DECLARE p record; v_threads text[]; n integer := 0;
BEGIN
    FOR p IN SELECT id, checkpoint_keep_latest AS keep, checkpoint_max_age AS age FROM tenants
              WHERE checkpoint_keep_latest IS NOT NULL OR checkpoint_max_age IS NOT NULL
    LOOP
        SELECT array_agg(DISTINCT c.thread_id) INTO v_threads FROM (
            SELECT x.thread_id FROM checkpoints x
             WHERE x.tenant_id = p.id
             GROUP BY x.tenant_id, x.thread_id, x.checkpoint_ns
            HAVING count(*) > coalesce(p.keep, 2147483647)
                OR (p.age IS NOT NULL AND count(*) > 1 AND min(x.created_at) < now() - p.age)
             LIMIT batch) c;
        IF v_threads IS NOT NULL THEN
            n := n + recall_prune_checkpoints(p.id, v_threads, coalesce(p.keep, 2147483647), p.age);
        END IF;
    END LOOP;
    RETURN n;
END
$citus$""",
    # The indexer's batch tenant by tenant (Citus locks rows FOR UPDATE in a one-shard statement only): the
    # tenant of the oldest due entry not yet visited (one index probe a shard), then its due entries, oldest
    # first, up to what the batch still wants; at most 8 tenants a batch.
    """CREATE OR REPLACE FUNCTION recall_embedding_batch(n integer)
RETURNS TABLE (tenant_id text, object_id text, kind text, queued_at timestamptz, text text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $citus$
#variable_conflict use_column
DECLARE v_tenant text; seen text[] := '{}'; got bigint := 0; r record;
BEGIN
    FOR i IN 1..8 LOOP
        SELECT q.tenant_id INTO v_tenant FROM embedding_queue q
         WHERE q.not_before <= now() AND q.tenant_id <> ALL(seen) ORDER BY q.not_before, q.queued_at LIMIT 1;
        EXIT WHEN v_tenant IS NULL;
        seen := seen || v_tenant;
        -- the entries locked first, their texts read after (a shard query runs no distributed query)
        FOR r IN SELECT e.tenant_id, e.object_id, e.kind, e.queued_at FROM embedding_queue e
                  WHERE e.tenant_id = v_tenant AND e.not_before <= now()
                  ORDER BY e.not_before, e.queued_at LIMIT n - got FOR UPDATE SKIP LOCKED LOOP
            tenant_id := r.tenant_id; object_id := r.object_id; kind := r.kind; queued_at := r.queued_at;
            text := recall_embedding_text(r.tenant_id, r.object_id, r.kind);
            got := got + 1;
            RETURN NEXT;
        END LOOP;
        EXIT WHEN got >= n;
    END LOOP;
END
$citus$""",
    # The trace flush and retention, each statement one Citus plans: a read filed row by row (an
    # INSERT ... SELECT from no distributed table is sent as a COPY, which row-level security refuses),
    # and each table's expired rows deleted in one statement per table, not in batches (Citus refuses a
    # DELETE by ctid across shards; the sweep calls it until it comes back short, as before).
    """CREATE OR REPLACE FUNCTION recall_record_reads(batch jsonb, accept interval) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $citus$
DECLARE v record; n integer := 0;
BEGIN
    FOR v IN
        SELECT k.tenant_id, x.* FROM (
            SELECT e->>0 AS key_id, decode(e->>1, 'base64') AS sha, (e->>2)::bigint AS tick, e->>3 AS run,
                   timestamptz 'epoch' + (e->>4)::bigint * interval '1 microsecond' AS at, e->>5 AS obj,
                   e->>6 AS route, (e->>7)::integer AS status, (e->>8)::bigint AS size, e->>9 AS rid
              FROM jsonb_array_elements(batch) e) x
          JOIN api_keys k ON k.id = x.key_id AND k.secret_sha256 = x.sha
                         AND (k.revoked_at IS NULL OR k.revoked_at > x.at)
    LOOP
        INSERT INTO trace_reads (tenant_id, tick, run_id, at, pos, object_id, route, status, bytes, key_id, request_id)
        VALUES (v.tenant_id, v.tick, v.run, v.at, greatest(v.at, clock_timestamp() - accept), v.obj, v.route, v.status,
                v.size, v.key_id, v.rid)
        ON CONFLICT DO NOTHING;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$citus$""",
    """CREATE OR REPLACE FUNCTION recall_purge_retained(reads_keep interval, deliveries_keep interval, batch integer)
RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $citus$
DECLARE v_reads timestamptz := now() - reads_keep; v_deliveries timestamptz := now() - deliveries_keep;
    reads integer; deliveries integer;
BEGIN
    DELETE FROM trace_reads WHERE at < v_reads;
    GET DIAGNOSTICS reads = ROW_COUNT;
    DELETE FROM hook_deliveries WHERE received_at < v_deliveries;
    GET DIAGNOSTICS deliveries = ROW_COUNT;
    RETURN greatest(reads, deliveries);
END
$citus$""",
)


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


class CitusConnection(Connection):
    """A pool connection to a Citus coordinator. The statements Citus's planner refuses (a STABLE function of
    a column, or any non-IMMUTABLE function in a CASE or COALESCE, in an UPDATE; a subquery in an INSERT's
    VALUES; a data-modifying CTE in front of an INSERT; a correlated subquery over a CTE) run as their
    steps instead (_steps): the same effect and result, each step a statement Citus routes to the tenant's
    shard. A few reads run in a Citus form of their text (_forms). Every other statement runs as it is."""

    citus = True

    async def execute(self, query: str, *args: object, **kw: Any) -> str:
        if args and (step := _steps().get(query)) is not None:
            await step(self, *args)
            return ""
        return await super().execute(query, *args, **kw)

    async def fetch(self, query: str, *args: object, **kw: Any) -> list[Any]:
        if (step := _steps().get(query)) is not None:
            found = await step(self, *args)
            return found if isinstance(found, list) else [] if found is None else [found]
        return await super().fetch(_forms().get(query, query), *args, **kw)

    async def fetchrow(self, query: str, *args: object, **kw: Any) -> Any:
        if (step := _steps().get(query)) is not None:
            return await step(self, *args)
        return await super().fetchrow(query, *args, **kw)

    async def fetchval(self, query: str, *args: object, column: int = 0, **kw: Any) -> Any:
        if (step := _steps().get(query)) is not None:
            found = await step(self, *args)
            return None if found is None else found[column]
        return await super().fetchval(query, *args, column=column, **kw)


Step = Callable[..., Awaitable[Any]]


def _cast_row(sql: str, opening: str, type_name: str) -> str:
    """`sql` with each ROW(...) that starts with `opening` cast to `type_name`."""
    at = 0
    while (start := sql.find(opening, at)) >= 0:
        depth, end = 0, start + len("ROW")
        for end in range(end, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            if depth == 0:
                break
        sql = f"{sql[:end + 1]}::{type_name}{sql[end + 1:]}"
        at = end
    return sql


@functools.cache
def _forms() -> dict[str, str]:
    """Statement text -> the text a coordinator runs instead, with the same parameters and rows: the checkpoint
    reads (as tenancy shapes them for Citus) with their channel values and writes as named rows (CITUS_TYPES)."""
    from recall_server.db import tenancy
    from recall_server.db.queries import checkpoints

    def typed(sql: str) -> str:
        sql = _cast_row(sql, "ROW(b.channel, b.type,", "recall_checkpoint_value")
        return _cast_row(sql, "ROW(w.task_id, w.channel,", "recall_checkpoint_write")

    return {read: typed(read) for read in (tenancy._citus_shape(sql)[1]
                                           for sql in (checkpoints._TUPLE, checkpoints._LIST))}


@functools.cache
def _steps() -> dict[str, Step]:
    """Statement text -> its steps on Citus (imported here, once: the statements live with their aggregates)."""
    from recall_server.db import tenancy
    from recall_server.db.queries import checkpoints, events, memories, messages, reports, threads, triggers

    return {tenancy._citus_shape(checkpoints._PUT)[1]: _put_checkpoint,
            messages._APPEND: _append_messages, messages._RETRACT: _retract_messages,
            tenancy._citus_shape(checkpoints._PUT_WRITES)[1]: _put_checkpoint_writes,
            memories._LOCK_PAIR: _lock_memory_pair, events._APPEND: _append_event, threads._UPDATE_THREAD: _update_thread,
            reports._INSERT_REPORT: _insert_report,
            triggers._FILE_TRIGGER: _file_trigger, memories._INSERT_MEMORY: _insert_memory,
            reports._INSERT_REFS: _positions("report_refs", "report_id", "trigger_id"),
            triggers._INSERT_NEIGHBOURS: _positions("trigger_neighbours", "trigger_id", "neighbour_id"),
            memories._INSERT_SOURCES: _positions("memory_sources", "memory_id", "source_id"),
            checkpoints._CLAIM_THREAD: _claim_checkpoint_thread, checkpoints._COPY_THREAD: _copy_checkpoint_thread}


def _positions(table: str, owner: str, item: str) -> Step:
    """An INSERT ... SELECT FROM unnest($3) WITH ORDINALITY of (tenant, owner, position, item) rows, as rows
    of VALUES: Citus sends an INSERT ... SELECT from no distributed table as a COPY, which row-level
    security refuses."""
    sql = f"INSERT INTO {table} (tenant_id, {owner}, position, {item}) VALUES ($1, $2, $3, $4)"

    async def insert(conn: asyncpg.Connection, tenant: str, owner_id: str, items: list[str]) -> None:
        await conn.executemany(sql, [(tenant, owner_id, n, x) for n, x in enumerate(items, 1)])

    return insert


_UNSET: Any = object()


async def _append_event(conn: asyncpg.Connection, tenant: str, thread_id: str, type_: str, summary: str,
                        ref: str | None, gone_at: Any = _UNSET) -> Any:
    """events._APPEND: the thread's next seq under its row lock, its head, the event."""
    row = await conn.fetchrow("SELECT last_seq, clock_timestamp() AS at, head_events::text AS head FROM threads"
                              " WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE", tenant, thread_id)
    if row is None:
        return None
    if gone_at is _UNSET:
        gone_at = None if ref is None else await conn.fetchval("SELECT recall_expiry($1, $2)", tenant, ref)
    seq = row["last_seq"] + 1
    head = await conn.fetchval("SELECT recall_head_with(jsonb_build_array(recall_head_event($1, $2, $3, $4, $5, $6)),"
                               " $7::jsonb)::text", seq, type_, row["at"], summary, ref, gone_at, row["head"])
    await conn.execute("UPDATE threads SET last_seq = $3, updated_at = $4, head_events = $5::jsonb"
                       " WHERE tenant_id = $1 AND id = $2", tenant, thread_id, seq, row["at"], head)
    return await conn.fetchrow(
        "INSERT INTO thread_events (tenant_id, thread_id, seq, type, at, summary, ref, ref_gone_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING seq, type, at, summary, ref",
        tenant, thread_id, seq, type_, row["at"], summary, ref, gone_at)


async def _append_events(conn: asyncpg.Connection, tenant: str, thread_id: str, type_: str, summaries: list[str]
                         ) -> tuple[list[int], Any] | None:
    """recall_append_events for events of one thread without refs: under the thread's row lock, its next seqs,
    one time for all, the events prepended to its head, the events; (seqs, at), or None when the thread is
    missing or gone."""
    row = await conn.fetchrow(
        "SELECT last_seq, clock_timestamp() AS at, head_events::text AS head FROM threads"
        " WHERE tenant_id = $1 AND id = $2 AND NOT recall_is_gone(deleted_at, expires_at) FOR NO KEY UPDATE",
        tenant, thread_id)
    if row is None:
        return None
    seqs = [row["last_seq"] + n for n in range(1, len(summaries) + 1)]
    head = await conn.fetchval(
        "SELECT recall_head_with((SELECT jsonb_agg(recall_head_event($1 + u.i, $2, $3, u.s, NULL::text,"
        " NULL::timestamptz) ORDER BY u.i DESC) FROM unnest($4::text[]) WITH ORDINALITY u(s, i)), $5::jsonb)::text",
        row["last_seq"], type_, row["at"], summaries, row["head"])
    await conn.execute("UPDATE threads SET last_seq = $3, updated_at = $4, head_events = $5::jsonb"
                       " WHERE tenant_id = $1 AND id = $2", tenant, thread_id, seqs[-1], row["at"], head)
    await conn.executemany(
        "INSERT INTO thread_events (tenant_id, thread_id, seq, type, at, summary) VALUES ($1, $2, $3, $4, $5, $6)",
        [(tenant, thread_id, seq, type_, row["at"], summary) for seq, summary in zip(seqs, summaries, strict=True)])
    return seqs, row["at"]


async def _append_messages(conn: asyncpg.Connection, tenant: str, thread_id: str, _threads: list[str],
                           summaries: list[str], _refs: list[None], _gone_ats: list[None], roles: list[str],
                           names: list[Any], calls: list[Any], ats: list[Any], content_types: list[str],
                           contents: list[bytes], metadata: list[str]) -> list[tuple[int, Any]]:
    """messages._APPEND: each message's event (_append_events), then its row under the event's seq; each one's
    (seq, at), in order."""
    appended = await _append_events(conn, tenant, thread_id, "message", summaries)
    if appended is None:
        return []
    seqs, event_at = appended
    rows = [(tenant, thread_id, seq, role, name, call, event_at if at is None else at, content_type, content, meta)
            for seq, role, name, call, at, content_type, content, meta
            in zip(seqs, roles, names, calls, ats, content_types, contents, metadata, strict=True)]
    await conn.executemany(
        "INSERT INTO thread_messages (tenant_id, thread_id, seq, role, name, tool_call_id, at, content_type, content,"
        " content_sha256, metadata) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, sha256($9), $10::jsonb)", rows)
    return [(r[2], r[6]) for r in rows]


async def _retract_messages(conn: asyncpg.Connection, tenant: str, thread_id: str, summary: str,
                            firsts: list[int], lasts: list[int]) -> Any:
    """messages._RETRACT: the retraction's event (_append_events), then its ranges; (seq, at)."""
    appended = await _append_events(conn, tenant, thread_id, "messages_retracted", [summary])
    if appended is None:
        return None
    (seq,), at = appended
    await conn.executemany(
        "INSERT INTO message_retractions (tenant_id, thread_id, by_seq, from_seq, to_seq) VALUES ($1, $2, $3, $4, $5)",
        [(tenant, thread_id, seq, first, last) for first, last in zip(firsts, lasts, strict=True)])
    return (seq, at)


async def _lock_memory_pair(conn: asyncpg.Connection, tenant: str, namespace: str, key: str) -> None:
    """memories._LOCK_PAIR: the pair's lock, on the coordinator as every writer and delete takes it, by a
    transaction that has read the pair on the tenant's worker first. That read makes it a distributed
    transaction: Citus's deadlock detection counts every waiting process that is not in one as one and the
    same process, so writers queued on the lock (each waiting for those ahead of it) made a cycle, and one
    was cancelled (a 503; tests/test_memories.py, twenty concurrent writers). A delete reads the memory
    before it takes the lock (recall_erase)."""
    await conn.fetchval("SELECT 1 FROM memories WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND current",
                        tenant, namespace, key)
    await asyncpg.Connection.execute(conn, "SELECT recall_lock_memory_pair($1, $2, $3)", tenant, namespace, key)


def _least(*times: Any) -> Any:
    """least() as PostgreSQL has it: NULLs ignored."""
    given = [t for t in times if t is not None]
    return min(given) if given else None


async def _thread_expiry(conn: asyncpg.Connection, tenant: str, thread_id: str | None) -> Any:
    if thread_id is None:
        return None
    return await conn.fetchval("SELECT expires_at FROM threads WHERE tenant_id = $1 AND id = $2", tenant, thread_id)


async def _insert_report(conn: asyncpg.Connection, tenant: str, report_id: str, worker_id: str, thread_id: str,
                         *rest: Any) -> Any:
    """reports._INSERT_REPORT: the report (its expiry capped by its thread's), counted on its worker."""
    *columns, expires_at, namespace = rest
    expires_at = _least(expires_at, await _thread_expiry(conn, tenant, thread_id))
    made = await conn.fetchval(
        "INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256,"
        " request_hash, app_id, agent_id, run_id, expires_at, namespace)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) ON CONFLICT DO NOTHING RETURNING true",
        tenant, report_id, worker_id, thread_id, *columns, expires_at, namespace)
    if made is None:
        return None
    return await conn.fetchrow("UPDATE workers SET reports_total = reports_total + 1"
                               " WHERE tenant_id = $1 AND id = $2 RETURNING true", tenant, worker_id)


async def _file_trigger(conn: asyncpg.Connection, tenant: str, trigger_id: str, source: str, thread_id: str | None,
                        summary: str, content_type: str, payload: bytes, sha: bytes, req_hash: bytes,
                        occurred_at: Any, app_id: Any, agent_id: Any, run_id: Any, external_id: Any,
                        expires_at: Any, namespace: str) -> Any:
    """triggers._FILE_TRIGGER: the trigger (its expiry capped by its thread's), and on its thread the
    trigger_filed event; nothing when the ID or the delivery is taken."""
    expires_at = _least(expires_at, await _thread_expiry(conn, tenant, thread_id))
    made = await conn.fetchrow(
        "INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,"
        " request_hash, occurred_at, app_id, agent_id, run_id, external_id, expires_at, namespace)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, coalesce($10, clock_timestamp()), $11, $12, $13, $14, $15, $16)"
        " ON CONFLICT DO NOTHING RETURNING expires_at",
        tenant, trigger_id, source, thread_id, summary, content_type, payload, sha, req_hash, occurred_at,
        app_id, agent_id, run_id, external_id, expires_at, namespace)
    if made is None:
        return None
    if thread_id is not None:
        await _append_event(conn, tenant, thread_id, "trigger_filed", summary, trigger_id, made["expires_at"])
    return (True,)


async def _insert_memory(conn: asyncpg.Connection, tenant: str, memory_id: str, namespace: str, key: str,
                         pair: bytes, kind: str, summary: str, content_type: str, value: bytes, sha: bytes,
                         tags: str, confirmed: str, app_id: Any, agent_id: Any, run_id: Any, req_hash: bytes,
                         expires_at: Any, embed: bool) -> Any:
    """memories._INSERT_MEMORY: the pair's current version closed (superseded unless gone), the new one."""
    old = await conn.fetchrow(
        "SELECT id, chain, version, recall_is_gone(deleted_at, expires_at) AS gone FROM memories"
        " WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND current", tenant, namespace, key)
    if old is not None:
        await conn.execute("UPDATE memories SET current = false, superseded_by = $3 WHERE tenant_id = $1 AND id = $2",
                           tenant, old["id"], None if old["gone"] else memory_id)
    prev = None if old is None or old["gone"] else old
    if expires_at is None:
        expires_at = await conn.fetchval(
            "SELECT clock_timestamp() + CASE $2 WHEN 'scratchpad' THEN memory_scratchpad_ttl"
            " WHEN 'state' THEN memory_state_ttl END FROM tenants WHERE id = $1", tenant, kind)
    return await conn.fetchrow(
        "INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value, value_sha256,"
        " tags, confirmed, app_id, agent_id, run_id, request_hash, chain, version, current, supersedes, expires_at,"
        " embed) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16, $17, $18, true,"
        " $19, $20, $21) RETURNING version",
        tenant, memory_id, namespace, key, pair, kind, summary, content_type, value, sha, tags, confirmed,
        app_id, agent_id, run_id, req_hash, memory_id if prev is None else prev["chain"],
        1 if prev is None else prev["version"] + 1, None if prev is None else prev["id"], expires_at, embed)


async def _update_thread(conn: asyncpg.Connection, tenant: str, thread_id: str, title: str | None,
                         summary: str | None, status: str | None) -> Any:
    """threads._UPDATE_THREAD: the given fields under the row lock, updated_at only on a real change, and a
    close or merge starting the tenant's closed-thread retention; (old status, new status)."""
    old = await conn.fetchrow("SELECT title, summary, status, expires_at, clock_timestamp() AS at FROM threads"
                              " WHERE tenant_id = $1 AND id = $2 FOR NO KEY UPDATE", tenant, thread_id)
    if old is None:
        return None
    new = (old["title"] if title is None else title, old["summary"] if summary is None else summary,
           old["status"] if status is None else status)
    if new == (old["title"], old["summary"], old["status"]):
        return (old["status"], old["status"])
    expires_at = old["expires_at"]
    if new[2] in ("closed", "merged") and old["status"] not in ("closed", "merged"):
        capped = await conn.fetchrow(
            "SELECT least(coalesce($2::timestamptz, 'infinity'), $3::timestamptz + closed_thread_retention)"
            " FROM tenants"
            " WHERE id = $1 AND closed_thread_retention IS NOT NULL", tenant, expires_at, old["at"])
        if capped is not None:
            expires_at = capped[0]
    await conn.execute("UPDATE threads SET title = $3, summary = $4, status = $5, updated_at = $6, expires_at = $7"
                       " WHERE tenant_id = $1 AND id = $2", tenant, thread_id, *new, old["at"], expires_at)
    return (old["status"], new[2])


async def _langgraph_thread(conn: asyncpg.Connection, tenant: str, thread_id: str, namespace: str) -> Any:
    """checkpoints._THREAD_SHARED: the thread's row, made if new (in `namespace`), else locked FOR SHARE when the
    key's grants cover it; its (deleted_at, namespace), or None when the key cannot see it."""
    made = await conn.fetchrow(
        "INSERT INTO checkpoint_threads (tenant_id, thread_id, namespace) VALUES ($1, $2, $3)"
        " ON CONFLICT (tenant_id, thread_id) DO NOTHING RETURNING deleted_at, namespace", tenant, thread_id, namespace)
    if made is not None:
        return made
    return await conn.fetchrow(
        "SELECT deleted_at, namespace FROM checkpoint_threads"
        " WHERE tenant_id = $1 AND thread_id = $2 AND recall_granted(namespace, true) FOR SHARE", tenant, thread_id)


async def _put_checkpoint(conn: asyncpg.Connection, tenant: str, scope: str, thread_id: str, checkpoint_ns: str,
                          checkpoint_id: str, parent_id: Any, type_: str, checkpoint: bytes, channel_versions: str,
                          metadata: str, request_hash: bytes, channels: list[str], versions: list[str],
                          types: list[str], blobs: list[bytes], namespace: str) -> Any:
    """checkpoints._PUT as Citus runs it (tenancy): the thread's row, then unless it was erased each channel value
    new in it and the checkpoint unless its ID is taken; (tenant, scope, gone, made, stored, blobs)."""
    thread = await _langgraph_thread(conn, tenant, thread_id, namespace)
    if thread is None:
        return None
    stored, written = None, 0
    if thread["deleted_at"] is None:
        for channel, version, type_of, blob in zip(channels, versions, types, blobs, strict=True):
            written += await conn.fetchval(
                "INSERT INTO checkpoint_blobs (tenant_id, thread_id, checkpoint_ns, channel, version, type, blob,"
                " namespace) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING RETURNING 1",
                tenant, thread_id, checkpoint_ns, channel, version, type_of, blob, thread["namespace"]) or 0
        stored = await conn.fetchval(
            "INSERT INTO checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint,"
            " channel_versions, metadata, request_hash, namespace)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::jsonb, $10, $11)"
            " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id) DO NOTHING RETURNING request_hash",
            tenant, thread_id, checkpoint_ns, checkpoint_id, parent_id, type_, checkpoint, channel_versions, metadata,
            request_hash, thread["namespace"])
    return await conn.fetchrow(
        "SELECT $1::text AS bound_tenant, $2::text AS bound_scope, $3::boolean AS gone, $4::boolean AS made,"
        " coalesce($5::bytea, (SELECT request_hash FROM checkpoints WHERE tenant_id = $1 AND thread_id = $6"
        " AND checkpoint_ns = $7 AND checkpoint_id = $8)) AS stored, $9::bigint AS blobs",
        tenant, scope, thread["deleted_at"] is not None, stored is not None, stored, thread_id, checkpoint_ns,
        checkpoint_id, written)


async def _put_checkpoint_writes(conn: asyncpg.Connection, tenant: str, scope: str, thread_id: str,
                                 checkpoint_ns: str, checkpoint_id: str, task_id: str, task_path: str,
                                 idxs: list[int], channels: list[str], types: list[str], blobs: list[bytes],
                                 namespace: str) -> Any:
    """checkpoints._PUT_WRITES as Citus runs it (tenancy): the thread's row, then unless it was erased each write
    once per (task, idx), a special channel's (idx < 0) replacing the stored one; (tenant, scope, gone, written)."""
    thread = await _langgraph_thread(conn, tenant, thread_id, namespace)
    if thread is None:
        return None
    written = 0
    if thread["deleted_at"] is None:
        for idx, channel, type_of, blob in zip(idxs, channels, types, blobs, strict=True):
            written += await conn.fetchval(
                "INSERT INTO checkpoint_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,"
                " idx, channel, type, blob, namespace) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                " ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)"
                " DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob,"
                " task_path = EXCLUDED.task_path WHERE EXCLUDED.idx < 0 RETURNING 1",
                tenant, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type_of, blob,
                thread["namespace"]) or 0
    return await conn.fetchrow(
        "SELECT $1::text AS bound_tenant, $2::text AS bound_scope, $3::boolean AS gone, $4::bigint AS written",
        tenant, scope, thread["deleted_at"] is not None, written)


async def _namespace_of(conn: asyncpg.Connection, tenant: str, thread_id: str) -> Any:
    return await conn.fetchval("SELECT namespace FROM checkpoint_threads WHERE tenant_id = $1 AND thread_id = $2",
                               tenant, thread_id)


async def _claim_checkpoint_thread(conn: asyncpg.Connection, tenant: str, thread_id: str, like: str) -> Any:
    """checkpoints._CLAIM_THREAD: the namespace of thread `like` read first (Citus refuses a subquery in an
    INSERT's VALUES), then the thread's row made or locked; (deleted_at,)."""
    return await conn.fetchrow(
        "INSERT INTO checkpoint_threads (tenant_id, thread_id, namespace) VALUES ($1, $2, $3)"
        " ON CONFLICT (tenant_id, thread_id) DO UPDATE SET thread_id = EXCLUDED.thread_id RETURNING deleted_at",
        tenant, thread_id, await _namespace_of(conn, tenant, like))


_COPY_INTO = (
    "INSERT INTO checkpoints (tenant_id, thread_id, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint,"
    " channel_versions, metadata, request_hash, namespace)"
    " SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, parent_id, type, checkpoint, channel_versions, metadata,"
    " request_hash, $4 FROM checkpoints WHERE tenant_id = $1 AND thread_id = $2 ON CONFLICT DO NOTHING",
    "INSERT INTO checkpoint_blobs (tenant_id, thread_id, checkpoint_ns, channel, version, type, blob, namespace)"
    " SELECT tenant_id, $3, checkpoint_ns, channel, version, type, blob, $4"
    " FROM checkpoint_blobs WHERE tenant_id = $1 AND thread_id = $2 ON CONFLICT DO NOTHING",
    "INSERT INTO checkpoint_writes (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type,"
    " blob, task_path, namespace)"
    " SELECT tenant_id, $3, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob, task_path, $4"
    " FROM checkpoint_writes WHERE tenant_id = $1 AND thread_id = $2 ON CONFLICT DO NOTHING",
)


async def _copy_checkpoint_thread(conn: asyncpg.Connection, tenant: str, source: str, target: str) -> Any:
    """checkpoints._COPY_THREAD: the target's namespace read first (Citus refuses data-modifying CTEs in front
    of an INSERT ... SELECT with a subquery), then each table's rows copied by an INSERT ... SELECT Citus runs
    on the tenant's shard; (checkpoints copied,)."""
    namespace = await _namespace_of(conn, tenant, target)
    copied = [await asyncpg.Connection.execute(conn, sql, tenant, source, target, namespace) for sql in _COPY_INTO]
    return (int(copied[0].rsplit(" ", 1)[1]),)
