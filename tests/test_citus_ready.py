"""The schema and the queries obey the rules a Citus deployment distributing every tenant table by tenant_id needs.

On one PostgreSQL server, no Citus needed: this reads the live schema from PostgreSQL's catalog after
migration (and the SQL in recall_server/db/queries/) and checks the rules themselves, so a change that
would break the distribution fails here, in every run. tests/test_citus.py and the Citus tier
(RECALL_TEST_CITUS_URL, tests/conftest.py) run the store on a real cluster.

- every tenant table has a text tenant_id, and all of them are co-located on it;
- every primary key and unique constraint or index of a tenant table includes tenant_id;
- every foreign key between tenant tables includes tenant_id, matched to tenant_id; tenant tables
  point otherwise only at reference tables, and nothing else points at a tenant table;
- the tables without a tenant distribution are exactly the ones named below, each with its role, and
  `migrate --citus` (recall_server/db/citus.py) distributes exactly the tenant tables, each after
  the tables it references;
- no statement in db/queries/ touches two tenants (each tenant table it reads or writes is pinned
  to the one tenant parameter $1, or joined on tenant_id to a pinned row), except the operator
  statements listed in ALL_TENANTS, which say why.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import inspect
import itertools
import pkgutil
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import asyncpg
import pytest
from helpers import run_script, run_sql, with_database

from recall_server.db import citus, queries, tenancy
from recall_server.db.migrate import migrate, schema_path

# Not distributed by tenant_id. Reference tables are replicated to every node; coordinator tables
# stay local to the coordinator (only the coordinator reads them).
REFERENCE_TABLES = {
    "tenants": "every tenant table's tenant_id references it",
    "api_keys": "a key is looked up by its ID before its tenant is known (recall_authenticate)",
    "hooks": "a webhook is looked up by its ID before its tenant is known (recall_hook_verify)",
}
COORDINATOR_TABLES = {
    "schema_migrations": "the schema version; migrations run on the coordinator",
    "schema_applied": "which schema.sql was applied (by SHA-256), read by a starting server",
    "server_secrets": "the cursor signing key, read once per server process",
}

# Statements that span tenants on purpose: operator work, run as the owner (never for a request).
# SQL functions that work across tenants on purpose (run on the coordinator under Citus), and why.
SPANNING_FUNCTIONS = {
    "recall_sweep": "purges what expired in every tenant",
    "recall_record_reads": "a trace flush: one process's buffered reads, each filed in the tenant of its verified key",
    "recall_record_requests": "an audit flush: one process's buffered requests, each filed in the tenant of its verified key",
    "recall_purge_audit": "retention: drops audited requests past each tenant's audit retention, in every tenant",
    "recall_purge_retained": "retention: drops trace reads and webhook deliveries past their TTLs in every tenant",
    "recall_embedding_batch": "the indexer: the embedding queue's due entries, whatever their tenant",
    "recall_embedding_store": "the indexer: each entry's vector stored in its own tenant",
    "recall_embedding_failed": "the indexer: a failed batch's entries marked for a retry, each in its own tenant",
    "recall_embedding_queue_stats": "the indexer's metrics: the whole queue's depth and lag",
    "recall_extraction_claim": "the extraction worker: the next due job, whatever its tenant (tenants take turns)",
    "recall_extraction_stats": "the extraction worker's metrics: the whole queue's depth and lag",
    "recall_embedding_reindex": "`recall-server reindex`: every tenant's objects queued",
    "recall_embedding_index_plan": "the indexer: counts a model's vectors over every tenant to decide on its HNSW index",
    "recall_checkpoint_retention": "the sweep: each tenant's LangGraph checkpoint retention, in every tenant",
    "recall_checkpoint_orphans": "the sweep: LangGraph pending writes whose checkpoint is gone, in every tenant",
}
ALL_TENANTS = {
    "sweep": "recall_sweep purges what expired in every tenant (the sweep, as the owner)",
    "list_keys": "`recall-server keys list` without --tenant lists every tenant's keys (reference table)",
    "revoke_key": "`recall-server keys revoke ID` finds the key in whichever tenant has it (reference table)",
    "key_subject": "`recall-server keys grant ID` finds the key in whichever tenant has it (reference table)",
    "set_grants": "`recall-server keys grant ID` changes the key in whichever tenant has it (reference table)",
    "record_reads": "a trace flush writes each read to its own key's tenant (recall_record_reads)",
    "record_requests": "an audit flush writes each request to its own key's tenant (recall_record_requests)",
    "purge_audit": "audit retention, for every tenant (recall_purge_audit)",
    "purge_retained": "trace and webhook retention, for every tenant (recall_purge_retained)",
    "list_hooks": "`recall-server hooks list` without --tenant lists every tenant's hooks (reference table)",
    "revoke_hook": "`recall-server hooks revoke ID` finds the hook in whichever tenant has it (reference table)",
    "embedding_batch": "the indexer's batch, from every tenant (recall_embedding_batch)",
    "claim_extraction": "the extraction worker's next job, from every tenant (recall_extraction_claim)",
    "extraction_stats": "the extraction worker's metrics over every tenant (recall_extraction_stats)",
    "store_embeddings": "the indexer stores a batch's vectors, each in its own tenant (recall_embedding_store)",
    "embeddings_failed": "the indexer marks a failed batch for a retry (recall_embedding_failed)",
    "embedding_queue_stats": "the queue's metrics, over every tenant (recall_embedding_queue_stats)",
    "queue_reindex": "`recall-server reindex` queues every tenant's objects (recall_embedding_reindex)",
    "vector_index_plan": "the indexer's HNSW index, once a model's vectors in every tenant need it",
    "checkpoint_retention": "the sweep applies every tenant's checkpoint retention (recall_checkpoint_retention)",
    "checkpoint_orphans": "the sweep deletes every tenant's writes whose checkpoint is gone (recall_checkpoint_orphans)",
}


@pytest.fixture(scope="module")
def store(database_url: str) -> Iterator[str]:
    name = f"recall_citus_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        asyncio.run(migrate(url))
        yield url
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


def tables(store: str) -> set[str]:
    return {r[0] for r in run_sql(store, "SELECT relname FROM pg_class WHERE relkind IN ('r', 'p') "
                                         "AND relnamespace = 'public'::regnamespace")}


def tenant_tables(store: str) -> set[str]:
    rows = run_sql(store, "SELECT table_name FROM information_schema.columns "
                          "WHERE table_schema = 'public' AND column_name = 'tenant_id'")
    return ({r[0] for r in rows} & tables(store)) - set(REFERENCE_TABLES)  # not the views


def test_the_tables_outside_the_distribution_are_exactly_the_reference_and_coordinator_ones(store: str) -> None:
    assert tables(store) - tenant_tables(store) == set(REFERENCE_TABLES) | set(COORDINATOR_TABLES)
    assert tenant_tables(store) == {"threads", "workers", "thread_owners", "triggers", "trigger_neighbours",
                                    "reports", "report_refs", "thread_events", "idempotency_keys", "memories",
                                    "memory_sources", "hook_deliveries", "github_threads", "trace_reads", "embeddings",
                                    "embedding_queue", "checkpoint_threads", "checkpoints", "checkpoint_blobs",
                                    "checkpoint_writes", "thread_messages", "message_retractions", "request_audit",
                                    "memory_lineage", "extraction_threads", "extraction_jobs"}


def test_every_tenant_id_is_text_not_null_so_the_tables_can_be_colocated(store: str) -> None:
    rows = run_sql(store, "SELECT table_name, data_type, is_nullable FROM information_schema.columns "
                          "WHERE table_schema = 'public' AND column_name = 'tenant_id'")
    assert {(r[0], r[1], r[2]) for r in rows if r[0] in tenant_tables(store)} == {
        (t, "text", "NO") for t in tenant_tables(store)}


def test_every_primary_key_and_unique_index_of_a_tenant_table_includes_tenant_id(store: str) -> None:
    rows = run_sql(store, """
        SELECT c.relname, i.relname AS index, EXISTS (
                 SELECT 1 FROM unnest(x.indkey) k JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k
                  WHERE a.attname = 'tenant_id') AS has_tenant
          FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid JOIN pg_class i ON i.oid = x.indexrelid
         WHERE x.indisunique AND c.relnamespace = 'public'::regnamespace
    """)
    unique = [r for r in rows if r["relname"] in tenant_tables(store)]
    assert len(unique) >= len(tenant_tables(store))  # at least every primary key was seen
    assert [r["index"] for r in unique if not r["has_tenant"]] == []
    # and no exclusion constraint (Citus would need tenant_id in it too)
    assert not run_sql(store, "SELECT 1 FROM pg_constraint WHERE contype = 'x'")


def test_every_foreign_key_between_tenant_tables_matches_tenant_id_to_tenant_id(store: str) -> None:
    rows = run_sql(store, """
        SELECT c.conname, src.relname AS source, dst.relname AS target,
               array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i)
                     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i)::text[] AS cols,
               array(SELECT a.attname FROM unnest(c.confkey) WITH ORDINALITY k(n, i)
                     JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.n ORDER BY k.i)::text[] AS refs
          FROM pg_constraint c JOIN pg_class src ON src.oid = c.conrelid JOIN pg_class dst ON dst.oid = c.confrelid
         WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace
    """)
    distributed = tenant_tables(store)
    broken = []
    for r in rows:
        if r["source"] in distributed and r["target"] in distributed:
            if ("tenant_id", "tenant_id") not in zip(r["cols"], r["refs"]):
                broken.append(f"{r['conname']}: {r['source']}{r['cols']} -> {r['target']}{r['refs']} skips tenant_id")
        elif r["source"] in distributed and r["target"] not in REFERENCE_TABLES:
            broken.append(f"{r['conname']}: {r['source']} -> {r['target']}, which is not a reference table")
        elif r["source"] not in distributed and r["target"] in distributed:
            broken.append(f"{r['conname']}: {r['source']} (not distributed) -> {r['target']} (distributed)")
    assert broken == []
    assert any(r["source"] in distributed and r["target"] in distributed for r in rows)  # the check saw some


# ---- the statements in db/queries/ -------------------------------------------------------

_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE)\b")
_KEYWORDS = ("WHERE", "ON", "JOIN", "SET", "USING", "LEFT", "ORDER", "GROUP", "LIMIT", "VALUES", "RETURNING",
             "UNION", "OFFSET", "FOR", "CROSS", "INNER", "AS", "SELECT", "WITH", "DEFAULT")


def statements() -> dict[str, list[str]]:
    """Function name in db/queries/ -> the SQL it runs: its string literals (f-string holes kept as {}),
    plus the module-level templates it names (by their runtime values)."""
    found: dict[str, list[str]] = {}
    for info in pkgutil.iter_modules(queries.__path__):
        found.update(_statements(importlib.import_module(f"{queries.__name__}.{info.name}")))
    return found


def _statements(module: ModuleType) -> dict[str, list[str]]:
    tree = ast.parse(Path(module.__file__ or "").read_text())
    found: dict[str, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        docstring = ast.get_docstring(node, clean=False)
        texts = []
        for sub in ast.walk(node):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value != docstring:
                texts.append(sub.value)
            elif isinstance(sub, ast.JoinedStr):
                texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}" for v in sub.values))
            elif isinstance(sub, ast.Name) and isinstance(template := getattr(module, sub.id, None),
                                                          (str, dict, tenancy.Keyed)):
                for t in template.values() if isinstance(template, dict) else [template]:
                    texts += [t] if isinstance(t, str) else [f for f in t[:3] if f] if isinstance(t, tenancy.Keyed) else []
        sql = [t for t in texts if _SQL.search(t)]
        if sql:
            found[node.name] = sql
    return found


_BOUND_TENANT = re.compile(r"(\w+) text := current_setting\('app\.tenant_id', true\).*"
                           r"IF coalesce\(\1, ''\) = '' THEN[^;]*RETURN;.*tenant_id = \1\b", re.S)


def cross_tenant_functions(store: str, distributed: set[str]) -> set[str]:
    """SQL functions that touch tenant tables without being pinned to a tenant argument (or a trigger's NEW.tenant_id
    or OLD.tenant_id)."""
    rows = run_sql(store, """
        SELECT p.proname, p.prosrc, p.proargnames FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
    """)
    spanning = set()
    for r in rows:
        touches = re.search(rf"\b(FROM|JOIN|INTO|UPDATE)\s+({'|'.join(distributed)})\b", r["prosrc"], re.I)
        pinned = any(re.search(rf"tenant_id\s*=\s*{re.escape(arg)}\b", r["prosrc"])  # compared, or inserted as the tenant
                     or re.search(rf"INTO\s+\w+\s*\(\s*tenant_id\b[^)]*\)\s*SELECT\s+{re.escape(arg)}\b", r["prosrc"], re.I)
                     for arg in (r["proargnames"] or [])[:1]) or "NEW.tenant_id" in r["prosrc"] \
            or re.search(r"tenant_id\s*=\s*OLD\.tenant_id\b", r["prosrc"]) \
            or _BOUND_TENANT.search(r["prosrc"])  # the tenant the key check bound, and nothing without one
        if touches and not pinned:
            spanning.add(r["proname"])
    return spanning


def spans_tenants(sql: str, distributed: set[str], spanning_functions: set[str]) -> list[str]:
    """Why this statement may touch more than one tenant (empty: it touches one)."""
    why = []
    references = list(re.finditer(rf"\b(FROM|JOIN|INTO|UPDATE)\s+({'|'.join(distributed)})\b(?:\s+(\w+))?", sql, re.I))
    for m in references:
        verb, table, alias = m.group(1).upper(), m.group(2), m.group(3)
        if alias and alias.upper() in _KEYWORDS:
            alias = None
        name = alias or table
        # $1 (a bound session's tenant), auth.tenant (the key's tenant, db/tenancy.keyed), gate.tenant (the
        # same, for a key with the write's scope, db/tenancy.keyed_write), a literal, a join
        pinned = r"(\$1\b|auth\.tenant\b|gate\.tenant\b|'[a-z0-9_-]+'|\w+\.tenant_id\b)"
        if verb == "INTO" and re.match(r"\s*(AS\s+\w+\s*)?\(\s*tenant_id\b", sql[m.end(2):], re.I):
            continue  # an INSERT names tenant_id first; its value is checked with the other comparisons
        if re.search(rf"\b{name}\.tenant_id\s*=\s*{pinned}", sql) or re.search(rf"{pinned}\s*=\s*{name}\.tenant_id\b", sql):
            continue
        if (alias is None or len(references) == 1) and re.search(rf"(?<![.\w])tenant_id\s*=\s*{pinned}", sql):
            continue
        why.append(f"{table} {alias or ''} is not pinned to one tenant")
    if references and (others := set(re.findall(r"tenant_id\s*=\s*\$(\d+)", sql)) - {"1"}):
        why.append(f"tenant_id compared with ${', $'.join(sorted(others))} as well as $1")
    if re.search(r"IS NULL OR\s+(\w+\.)?tenant_id\s*=", sql):
        why.append("an optional tenant (NULL: every tenant)")
    why += [f"calls {f}(), which spans tenants" for f in spanning_functions if re.search(rf"\b{f}\s*\(", sql)]
    return why


def test_no_statement_touches_two_tenants_except_the_operator_ones(store: str) -> None:
    distributed = tenant_tables(store)
    spanning = cross_tenant_functions(store, distributed)
    assert spanning == set(SPANNING_FUNCTIONS), "a new SQL function spans tenants: make it take the tenant, or list it"
    found = statements()
    assert {"fetch_thread", "append_event", "erase", "sweep"} <= set(found)  # the parser sees the SQL
    flagged = {}
    for function, sqls in found.items():
        reasons = [why for sql in sqls for why in spans_tenants(sql, distributed, spanning)]
        if reasons:
            flagged[function] = reasons
    assert sorted(set(flagged) - set(ALL_TENANTS)) == [], flagged
    assert sorted(set(ALL_TENANTS) - set(flagged)) == [], "ALL_TENANTS lists a statement that no longer spans tenants"


def test_the_static_check_catches_a_statement_without_its_tenant() -> None:
    """The checker itself: a read that forgets tenant_id, or pins it to a second parameter, is flagged."""
    distributed = {"threads", "thread_events"}
    assert spans_tenants("SELECT t.id FROM threads t WHERE t.tenant_id = $1 AND t.id = $2", distributed, set()) == []
    assert spans_tenants("SELECT id FROM threads WHERE id = $2", distributed, set())
    assert spans_tenants("SELECT t.id FROM threads t JOIN thread_events e ON e.thread_id = t.id "
                         "WHERE t.tenant_id = $1", distributed, set())
    assert spans_tenants("SELECT id FROM threads WHERE tenant_id = $1 OR tenant_id = $2", distributed, set())
    assert spans_tenants("SELECT recall_sweep($1)", distributed, {"recall_sweep"})
    assert spans_tenants("SELECT id FROM api_keys WHERE $1::text IS NULL OR tenant_id = $1", distributed, set())


def test_migrate_citus_distributes_exactly_the_tenant_tables_and_every_tenant_function(store: str) -> None:
    assert set(citus.REFERENCE_TABLES) == set(REFERENCE_TABLES)
    assert set(citus.DISTRIBUTED_TABLES) == tenant_tables(store)
    functions = {r[0] for r in run_sql(store, """
        SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace
           AND p.prokind = 'f' AND (p.proargnames)[1] IN ('t', 'p_tenant')""")}  # p_tenant: plpgsql, where `t` is an alias
    assert functions == set(citus.TENANT_FUNCTIONS)
    assert {r[0] for r in run_sql(store, "SELECT to_regprocedure(f)::text FROM unnest($1::text[]) f",
                                  list(citus.SHARD_FUNCTIONS))} == set(citus.SHARD_FUNCTIONS)  # all exist


def test_each_table_is_distributed_after_the_tables_it_references(store: str) -> None:
    order = {table: n for n, table in enumerate(citus.DISTRIBUTED_TABLES)}
    rows = run_sql(store, """
        SELECT src.relname AS source, dst.relname AS target FROM pg_constraint c
          JOIN pg_class src ON src.oid = c.conrelid JOIN pg_class dst ON dst.oid = c.confrelid
         WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace""")
    pairs = [(r["source"], r["target"]) for r in rows if r["source"] in order and r["target"] in order]
    assert pairs and [p for p in pairs if p[0] != p[1] and order[p[1]] > order[p[0]]] == []


def test_schema_sql_splits_into_its_statements_at_semicolons_outside_quotes_and_bodies() -> None:
    """A coordinator gets schema.sql one statement at a time (citus.statements)."""
    sql = schema_path().read_text()
    parts = citus.statements(sql)
    assert "".join(parts).strip() == sql.strip()
    assert all(p.count("$$") % 2 == 0 for p in parts)  # no function body cut in two
    assert len([p for p in parts if "CREATE OR REPLACE FUNCTION" in p]) == sql.count("CREATE OR REPLACE FUNCTION")
    assert citus.statements("SELECT ';'; -- a; comment\nSELECT $x$ ; $x$;") == [
        "SELECT ';';", " -- a; comment\nSELECT $x$ ; $x$;"]


def test_migrate_citus_is_refused_where_citus_is_not_installed(store: str) -> None:
    with pytest.raises(RuntimeError, match="citus extension"):
        asyncio.run(migrate(store, citus=True))


def test_the_searches_filter_the_views_constant_columns_through_recall_opaque() -> None:
    """A kind or status filter the planner could fold would drop arms of recall_searchable on a coordinator, and
    with them the tenant filters Citus routes by: every such filter goes through recall_opaque, which one node
    inlines (schema.sql, SQL) and a coordinator cannot fold (citus.sql, PL/pgSQL)."""
    readers = {re.search(r"FUNCTION (\w+)\(", s).group(1): s for s in citus.statements(schema_path().read_text())
               if "CREATE OR REPLACE FUNCTION" in s and re.search(r"FROM recall_searchable\b", s)}
    assert {"recall_search_hits", "recall_lexical_hits", "recall_semantic_hits"} <= set(readers)
    foldable = [n for n, body in readers.items()
                if re.search(r"\.kind = ANY\(p_kinds\)|\.status = p_status\b|\.kind = %L", body)]
    assert foldable == []
    (opaque,) = [s for s in citus.statements(citus.definitions()) if "FUNCTION recall_opaque(" in s]
    assert "LANGUAGE plpgsql" in opaque


def _keyed_statements() -> Iterator[tuple[str, tenancy.Keyed]]:
    """Every statement behind the key check that the queries modules hold, by name: module constants, tables of
    them, and what each cached builder of flags makes for every combination of its flags."""
    for info in pkgutil.iter_modules(queries.__path__):
        module = importlib.import_module(f"recall_server.db.queries.{info.name}")
        for name, value in vars(module).items():
            if isinstance(value, tenancy.Keyed):
                yield f"{info.name}.{name}", value
            elif isinstance(value, dict):
                yield from ((f"{info.name}.{name}[{k}]", v) for k, v in value.items() if isinstance(v, tenancy.Keyed))
            elif callable(value) and hasattr(value, "cache_info") and value.__module__ == module.__name__:
                flags = [p.annotation for p in inspect.signature(value).parameters.values()]
                sizes = [1 if f in (bool, "bool") else 3 if "tuple[bool, bool, bool]" in str(f) else 0 for f in flags]
                if flags and all(sizes):
                    for bits in itertools.product((False, True), repeat=sum(sizes)):
                        args, at = [], 0
                        for size in sizes:
                            args.append(bits[at] if size == 1 else tuple(bits[at:at + size]))
                            at += size
                        made = value(*args)
                        if isinstance(made, tenancy.Keyed):
                            yield f"{info.name}.{name}{tuple(args)}", made


def _parameters(sql: str) -> set[int]:
    return {int(n) for n in re.findall(r"\$(\d+)", sql)}


def test_every_keyed_statement_has_a_sharded_form_naming_its_tenant_as_a_value() -> None:
    """Each statement's coordinator form (tenancy.Keyed.sharded) is built with it: the same parameters from $3 on,
    the tenant as $1 wherever a table's tenant_id is compared, never the key check's row (Citus routes a statement
    to the tenant's shard only when each table's tenant is a value). A write without one has its steps, or says
    that the caller's transaction writes it."""
    found = dict(_keyed_statements())
    assert len(found) > 60, sorted(found)
    for name, stmt in found.items():
        if stmt.sharded is None:
            assert stmt.scopes, f"{name}: a read without a form for a coordinator"
            continue
        assert _parameters(stmt.sharded) - {1, 2} == _parameters(stmt.single) - {1, 2}, name
        assert "auth." not in stmt.sharded and "gate.tenant" not in stmt.sharded, name
        compared = re.findall(r"\btenant_id = ([^\s)]+)", stmt.sharded)
        assert compared and set(compared) <= {"$1::text", "$1"}, (name, set(compared))


def test_every_sharded_form_returns_the_columns_of_its_one_node_form(store: str) -> None:
    """Prepared on one node (with the row types citus.sql makes), each statement's coordinator form has the same
    result columns, by name and order, as its one-node form."""
    named_rows = [s for s in citus.statements(citus.definitions()) if "CREATE TYPE" in s]

    async def compare() -> list[str]:
        conn = await asyncpg.connect(store)
        differ = []
        try:
            async with conn.transaction():
                for statement in named_rows:
                    await conn.execute(statement)
                for name, stmt in _keyed_statements():
                    if stmt.sharded is None:
                        continue
                    single = [a.name for a in (await conn.prepare(stmt.single)).get_attributes()]
                    sharded = [a.name for a in (await conn.prepare(stmt.sharded)).get_attributes()]
                    if single != sharded:
                        differ.append(f"{name}: {single} != {sharded}")
                raise _RolledBack(differ)
        except _RolledBack as done:
            return done.args[0]
        finally:
            await conn.close()

    assert asyncio.run(compare()) == []


class _RolledBack(Exception):
    """Leaves a transaction, rolling it back, with what it found."""
