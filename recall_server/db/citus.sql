-- What a Citus coordinator defines in place of or beside schema.sql, applied after it (and after the tables
-- are distributed) by `recall-server migrate --citus` (recall_server/db/citus.py; docs/scaling.md). Every
-- definition here has the name and signature of its one-node form, or exists on Citus alone, and says why.

-- ---- planner: values Citus must see ----------------------------------------------------------------------
-- Its argument, as a value the planner cannot fold into a filter. With the kinds or the status of a search
-- known, PostgreSQL folds their filter to false in the arms of recall_searchable they exclude and drops them
-- before Citus sees their tenant_id filters; Citus then sends the statement to every shard instead of the
-- tenant's one, and such a statement, run nested from a shard query, fails ("the backend has already been
-- assigned a transaction id"). PL/pgSQL is never folded: every arm stays, each with its tenant.
CREATE OR REPLACE FUNCTION recall_opaque(v anyelement) RETURNS anyelement
LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$ BEGIN RETURN v; END $$;

-- Row types a coordinator reads from a worker by name: Citus passes a shard query's rows to the coordinator as
-- text, and an anonymous ROW(...) has no input function there ("input of anonymous composite types is not
-- implemented"). The checkpoint reads cast their values and writes to these (db/queries/checkpoints.py).
-- Each is made again when its number of fields is not the read's (nothing stores them).
DO $$ BEGIN
    IF (SELECT count(*) FROM pg_attribute a JOIN pg_type t ON a.attrelid = t.typrelid
         WHERE t.oid = to_regtype('recall_checkpoint_value') AND a.attnum > 0 AND NOT a.attisdropped) <> 5 THEN
        DROP TYPE IF EXISTS recall_checkpoint_value;
        CREATE TYPE recall_checkpoint_value AS (channel text, type text, blob bytea, size integer, version text);
    END IF;
END $$;
DO $$ BEGIN
    IF (SELECT count(*) FROM pg_attribute a JOIN pg_type t ON a.attrelid = t.typrelid
         WHERE t.oid = to_regtype('recall_checkpoint_write') AND a.attnum > 0 AND NOT a.attisdropped) <> 7 THEN
        DROP TYPE IF EXISTS recall_checkpoint_write;
        CREATE TYPE recall_checkpoint_write AS (task_id text, channel text, type text, blob bytea, task_path text, idx integer, size integer);
    END IF;
END $$;

-- ---- writes: a statement per tenant, each one Citus routes to a shard -------------------------------------
-- The indexer's store and its failures, a statement per tenant (a batch holds few tenants; Citus routes a
-- statement that names its tenant as a value to one shard). schema.sql's forms do all of a batch's tenants
-- in one statement each, which Citus cannot route.
CREATE OR REPLACE FUNCTION recall_embedding_store(p_tenants text[], p_ids text[], p_kinds text[], p_vectors text[],
    p_model text, p_dims integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
$$;

CREATE OR REPLACE FUNCTION recall_embedding_failed(p_tenants text[], p_ids text[], p_error text, p_permanent boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
$$;

-- Checkpoint retention tenant by tenant (Citus pushes down no LIMIT in a lateral subquery that reads
-- the tenants reference table): the same rule, one query per tenant with a policy.
CREATE OR REPLACE FUNCTION recall_checkpoint_retention(batch integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
$$;

-- The indexer's batch tenant by tenant (Citus locks rows FOR UPDATE in a one-shard statement only), shared
-- between tenants as schema.sql's: the tenants with an entry due, stepped through in order after p_after and
-- round to it (the next tenant: a probe of each shard's index; whether it has an entry due: one of its shard's),
-- at most n; each one's oldest due entries up to its share of the batch, then what the shares left, tenant by
-- tenant in the same order (schema.sql gives it to the oldest entries of any tenant: here that would lock rows
-- in a statement over every shard). The entries are locked first, their texts read after (a shard query runs
-- no distributed query), and the rows come in the tenants' order, as schema.sql's.
DROP FUNCTION IF EXISTS recall_embedding_batch(integer);
CREATE OR REPLACE FUNCTION recall_embedding_batch(n integer, p_after text DEFAULT '')
RETURNS TABLE (tenant_id text, object_id text, kind text, queued_at timestamptz, text text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_tenant text := p_after; lap integer := 1; due text[] := '{}'; share integer; got integer := 0; r record;
    b_turn integer[] := '{}'; b_t text[] := '{}'; b_o text[] := '{}'; b_k text[] := '{}';
    b_at timestamptz[] := '{}'; b_text text[] := '{}'; mine text[];
BEGIN
    WHILE cardinality(due) < n LOOP
        SELECT min(q.tenant_id) INTO v_tenant FROM embedding_queue q WHERE q.tenant_id > v_tenant;
        IF v_tenant IS NULL THEN  -- past the last tenant: round from the first, up to p_after
            EXIT WHEN lap = 2;
            lap := 2; v_tenant := '';
            CONTINUE;
        END IF;
        EXIT WHEN lap = 2 AND v_tenant > p_after;
        IF EXISTS (SELECT 1 FROM embedding_queue q WHERE q.tenant_id = v_tenant AND q.not_before <= now()) THEN
            due := due || v_tenant;
        END IF;
    END LOOP;
    share := greatest(1, n / greatest(cardinality(due), 1));
    FOR pass IN 1..2 LOOP
        FOR turn IN 1..cardinality(due) LOOP
            EXIT WHEN got >= n;
            v_tenant := due[turn];
            mine := ARRAY(SELECT u.o FROM unnest(b_t, b_o) AS u(t, o) WHERE u.t = v_tenant);  -- taken in pass 1
            FOR r IN SELECT e.tenant_id, e.object_id, e.kind, e.queued_at FROM embedding_queue e
                      WHERE e.tenant_id = v_tenant AND e.not_before <= now()
                        AND e.object_id <> ALL(mine)
                      ORDER BY e.not_before, e.queued_at LIMIT CASE pass WHEN 1 THEN least(share, n - got) ELSE n - got END
                        FOR UPDATE SKIP LOCKED LOOP
                b_turn := b_turn || turn; b_t := b_t || r.tenant_id; b_o := b_o || r.object_id; b_k := b_k || r.kind;
                b_at := b_at || r.queued_at; b_text := b_text || recall_embedding_text(r.tenant_id, r.object_id, r.kind);
                got := got + 1;
            END LOOP;
        END LOOP;
    END LOOP;
    RETURN QUERY SELECT u.t, u.o, u.k, u.at, u.x
                   FROM unnest(b_turn, b_t, b_o, b_k, b_at, b_text) WITH ORDINALITY AS u(turn, t, o, k, at, x, i)
                  ORDER BY u.turn, u.i;
END
$$;

-- The trace flush, a read filed row by row: an INSERT ... SELECT from no distributed table is sent as a COPY,
-- which row-level security refuses.
CREATE OR REPLACE FUNCTION recall_record_reads(batch jsonb, accept interval) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
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
         ORDER BY x.tick
    LOOP
        INSERT INTO trace_reads (tenant_id, tick, run_id, at, pos, object_id, route, status, bytes, key_id, request_id)
        VALUES (v.tenant_id, v.tick, v.run, v.at, greatest(v.at, clock_timestamp() - accept), v.obj, v.route, v.status,
                v.size, v.key_id, v.rid)
        ON CONFLICT DO NOTHING;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- The audit flush, filed row by row for the same reason.
CREATE OR REPLACE FUNCTION recall_record_requests(batch jsonb, accept interval) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE v record; n integer := 0;
BEGIN
    FOR v IN
        SELECT k.tenant_id, k.subject, t.audit_queries, x.* FROM (
            SELECT e->>0 AS key_id, decode(e->>1, 'base64') AS sha, (e->>2)::bigint AS tick, e->>3 AS run,
                   timestamptz 'epoch' + (e->>4)::bigint * interval '1 microsecond' AS at, e->>5 AS method,
                   e->>6 AS route, (e->>7)::integer AS status,
                   ARRAY(SELECT jsonb_array_elements_text(e->8)) AS object_ids, e->>9 AS namespace,
                   nullif(e->10, 'null'::jsonb) AS params,
                   CASE WHEN jsonb_typeof(e->11) = 'array' THEN ARRAY(SELECT jsonb_array_elements_text(e->11)) END
                       AS returned,
                   e->>12 AS rid
              FROM jsonb_array_elements(batch) e) x
          JOIN api_keys k ON k.id = x.key_id AND k.secret_sha256 = x.sha
                         AND (k.revoked_at IS NULL OR k.revoked_at > x.at)
          JOIN tenants t ON t.id = k.tenant_id
         ORDER BY x.tick
    LOOP
        INSERT INTO request_audit (tenant_id, tick, at, pos, request_id, key_id, subject, run_id, method, route, status,
                                   object_ids, namespace, params, returned)
        VALUES (v.tenant_id, v.tick, v.at, greatest(v.at, clock_timestamp() - accept), v.rid, v.key_id, v.subject, v.run,
                v.method, v.route, v.status, v.object_ids,
                CASE WHEN NOT EXISTS (SELECT 1 FROM memories m WHERE m.tenant_id = v.tenant_id
                                         AND m.id = ANY (v.object_ids) AND m.deleted_at IS NOT NULL)
                     THEN v.namespace END,  -- as schema.sql's form
                CASE WHEN v.audit_queries THEN v.params ELSE v.params - 'q' END, v.returned)
        ON CONFLICT DO NOTHING;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

-- The audit's retention, tenant by tenant: one DELETE each, which names its tenant.
CREATE OR REPLACE FUNCTION recall_purge_audit(default_keep interval, batch integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE t record; gone integer; n integer := 0;
BEGIN
    FOR t IN SELECT id, now() - coalesce(audit_retention, default_keep) AS before FROM tenants LOOP
        DELETE FROM request_audit WHERE tenant_id = t.id AND at < t.before;
        GET DIAGNOSTICS gone = ROW_COUNT;
        n := n + gone;
    END LOOP;
    RETURN n;
END
$$;

-- Retention: each table's expired rows deleted in one statement per table, not in batches (Citus refuses a
-- DELETE by ctid across shards; the sweep calls it until it comes back short).
CREATE OR REPLACE FUNCTION recall_purge_retained(reads_keep interval, deliveries_keep interval, batch integer)
RETURNS integer LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE v_reads timestamptz := now() - reads_keep; v_deliveries timestamptz := now() - deliveries_keep;
    reads integer; deliveries integer;
BEGIN
    DELETE FROM trace_reads WHERE at < v_reads;
    GET DIAGNOSTICS reads = ROW_COUNT;
    DELETE FROM hook_deliveries WHERE received_at < v_deliveries;
    GET DIAGNOSTICS deliveries = ROW_COUNT;
    RETURN greatest(reads, deliveries);
END
$$;

-- ---- readers: PL/pgSQL, planned with their arguments bound --------------------------------------------------
-- Each SQL-language function that reads a distributed table, again as PL/pgSQL with the same body (its value,
-- or its rows with RETURN QUERY): Citus plans no statement of a SQL function with parameters on a distributed
-- table ("parameters in SQL functions"). schema.sql keeps them SQL: one node inlines them into their callers.
DO $$
DECLARE
    r record;
    body text;
BEGIN
    FOR r IN SELECT p.proname, pg_get_function_arguments(p.oid) AS args, pg_get_function_result(p.oid) AS result,
                    p.prosrc, p.provolatile
               FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
              WHERE p.pronamespace = 'public'::regnamespace AND l.lanname = 'sql'
                AND p.provolatile <> 'v' AND p.proconfig IS NULL
                AND p.prosrc ~ ('(FROM|JOIN)\s+(' || (SELECT string_agg(logicalrelid::regclass::text, '|')
                                                        FROM pg_dist_partition WHERE partmethod = 'h') || ')\M')
    LOOP
        body := rtrim(btrim(r.prosrc, E' \n\t\r'), ';');
        EXECUTE format(E'CREATE OR REPLACE FUNCTION %I(%s) RETURNS %s LANGUAGE plpgsql %s PARALLEL SAFE AS $f$\n'
                       || E'#variable_conflict use_column\nBEGIN\n    %s\nEND\n$f$',
            r.proname, r.args, r.result, CASE WHEN r.provolatile = 'i' THEN 'IMMUTABLE' ELSE 'STABLE' END,
            CASE WHEN r.result LIKE 'SETOF %' THEN 'RETURN QUERY ' || body || ';' ELSE 'RETURN (' || body || ');' END);
    END LOOP;
END
$$;
