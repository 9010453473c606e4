"""On a real Citus cluster (a coordinator with two workers): the store is distributed by tenant_id, stays so
across migrations, spreads tenants over the workers, and binds each request's tenant on the worker that runs
its shard query.

The cluster is RECALL_TEST_CITUS_URL's, else a throwaway one started from the Citus this machine has
(helpers.citus_binaries); with neither these tests are skipped. The rest of the suite runs on such a cluster
with RECALL_TEST_CITUS=1 or RECALL_TEST_CITUS_URL (conftest.CITUS_TIER).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
import helpers
from helpers import (
    Graph,
    ServerProcess,
    ThrowawayCitus,
    assert_an_upgrade_adds_a_column_with_its_check,
    citus_binaries,
    citus_database,
    cli,
    create_key,
    drop_citus_database,
    uid,
)

from recall_server.db import citus
from recall_server.db.pool import Database, as_app_role

pytestmark = pytest.mark.slow  # a cluster, a distributed store and a server of its own


@pytest.fixture(scope="module")
def coordinator() -> Iterator[str]:
    """The tier's coordinator, or a throwaway cluster's."""
    if helpers.CITUS_URL:
        yield helpers.CITUS_URL
        return
    if (bindir := citus_binaries()) is None:
        pytest.skip("needs Citus: no RECALL_TEST_CITUS_URL, and no PostgreSQL with citus.so on this machine")
    cluster = ThrowawayCitus(bindir)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def database_url(coordinator: str) -> Iterator[str]:
    name = f"recall_citus_{uid('t')[-12:].lower()}"
    yield citus_database(coordinator, name)
    drop_citus_database(coordinator, name)


@pytest.fixture(scope="module")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("citus") / "server.log",
                         RECALL_SWEEP_INTERVAL="0").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def base_url(server: ServerProcess) -> str:
    return server.url


@pytest.fixture(scope="module")
def api_key(server: ServerProcess, database_url: str) -> str:
    return create_key(database_url, "default", "write")


@pytest.fixture()
def client(base_url: str, api_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
        yield c


def query(dsn: str, sql: str, *args: object, tenant: str | None = None) -> list[asyncpg.Record]:
    """One statement in its own transaction, with the tenant bound as tenancy.py binds it on Citus."""
    async def go() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                if tenant is not None:
                    await conn.execute(f"SET LOCAL citus.propagate_set_commands = 'local';"
                                       f" SET LOCAL app.tenant_id = '{tenant}'")
                return await conn.fetch(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


def test_every_tenant_table_is_distributed_by_tenant_id_and_colocated_with_threads(database_url: str) -> None:
    placed = {r["table"]: r for r in query(database_url, """
        SELECT table_name::text AS table, citus_table_type AS type, distribution_column AS column,
               colocation_id FROM citus_tables""")}
    assert {t for t, r in placed.items() if r["type"] == "reference"} == set(citus.REFERENCE_TABLES)
    distributed = {t for t, r in placed.items() if r["type"] == "distributed"}
    assert distributed == set(citus.DISTRIBUTED_TABLES)
    assert {placed[t]["column"] for t in distributed} == {"tenant_id"}
    assert {placed[t]["colocation_id"] for t in distributed} == {placed["threads"]["colocation_id"]}


def test_the_functions_are_on_every_node_and_none_is_delegated(database_url: str) -> None:
    rows = query(database_url, """
        SELECT objid::regprocedure::text AS function, distribution_argument_index AS argument
          FROM pg_dist_object WHERE classid = 'pg_proc'::regclass""")
    assert set(citus.TENANT_FUNCTIONS) | set(citus.SHARD_FUNCTIONS) <= {r["function"] for r in rows}
    assert [r["function"] for r in rows if r["argument"] is not None] == []


def test_migrate_and_migrate_citus_run_again_on_a_distributed_store(database_url: str) -> None:
    before = query(database_url, "SELECT count(*) FROM pg_dist_shard")[0][0]
    assert "schema version" in cli(database_url, "migrate")
    assert "schema version" in cli(database_url, "migrate", "--citus")
    assert query(database_url, "SELECT count(*) FROM pg_dist_shard")[0][0] == before  # nothing distributed twice


def test_an_upgrade_adding_a_column_with_a_check_runs_on_a_distributed_store(coordinator: str) -> None:
    """Citus refuses ADD COLUMN with a CHECK on a distributed or reference table; schema.sql adds the column,
    then the CHECK as a named constraint, which it takes (on every node: tenants is a reference table)."""
    name = f"recall_check_{uid('t')[-12:].lower()}"
    url = citus_database(coordinator, name)
    try:
        assert_an_upgrade_adds_a_column_with_its_check(url, "--citus")
    finally:
        drop_citus_database(coordinator, name)


def test_a_store_that_served_on_one_node_distributes_and_answers_as_before(coordinator: str, tmp_path: Path) -> None:
    """Outgrowing one PostgreSQL: a store made by plain `migrate` on the coordinator, written to by a server,
    then `migrate --citus`. Its rows move to the workers (no trigger runs as they move: the embedding
    queue's would, before its own table is distributed), every read answers as before, the coordinator
    keeps no copy, and new writes run the triggers again."""
    name = f"recall_grow_{uid('t')[-12:].lower()}"
    url = citus_database(coordinator, name, distributed=False)
    try:
        key = create_key(url, "grown", "write")
        headers = {"Authorization": f"Bearer {key}"}
        server = ServerProcess(url, tmp_path / "one-node.log", RECALL_EMBEDDER="none").start()
        try:
            with httpx.Client(base_url=server.url, headers=headers) as c:
                graph = Graph(c)
                thread = graph.thread()["id"]
                trigger = graph.trigger(thread_id=thread)["id"]
                for n in range(3):
                    graph.note(thread, f"note {n}")
                paths = [f"/threads/{thread}", f"/threads/{thread}/events", f"/triggers/{trigger}",
                         f"/triggers/{trigger}/payload"]
                before = [c.get(p).content for p in paths]
        finally:
            server.stop()
        queued = query(url, "SELECT count(*) FROM embedding_queue")[0][0]

        assert "schema version" in cli(url, "migrate", "--citus")
        assert {r[0] for r in query(url, "SELECT table_name::text FROM citus_tables"
                                         " WHERE citus_table_type = 'distributed'")} == set(citus.DISTRIBUTED_TABLES)
        assert query(url, "SELECT count(*) FROM embedding_queue")[0][0] == queued  # nothing queued again
        local = query(url, "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                           " WHERE n.nspname = 'public' AND c.relname = ANY($1) AND pg_relation_size(c.oid) > 0",
                      list(citus.DISTRIBUTED_TABLES))[0][0]
        assert local == 0, "the coordinator keeps a copy of distributed rows"
        server = ServerProcess(url, tmp_path / "citus.log", RECALL_EMBEDDER="none").start()
        try:
            with httpx.Client(base_url=server.url, headers=headers) as c:
                assert [c.get(p).content for p in paths] == before
                assert Graph(c).note(thread, "after")["seq"] == 5
                Graph(c).thread()
        finally:
            server.stop()
        assert query(url, "SELECT count(*) FROM embedding_queue")[0][0] == queued + 1  # the new thread's trigger ran
    finally:
        drop_citus_database(coordinator, name)


def test_tenants_land_on_every_worker(database_url: str, base_url: str) -> None:
    tenants = [f"spread-{uid('t')[-8:]}-{n}" for n in range(12)]
    for tenant in tenants:
        key = create_key(database_url, tenant, "write")
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as c:
            Graph(c).thread()
    rows = query(database_url, """
        SELECT DISTINCT s.nodeport FROM unnest($1::text[]) t(tenant)
          JOIN citus_shards s ON s.shardid = get_shard_id_for_distribution_column('threads', t.tenant)
         WHERE s.table_name = 'threads'::regclass""", tenants)
    workers = query(database_url, "SELECT nodeport FROM pg_dist_node WHERE groupid <> 0 AND shouldhaveshards")
    assert {r[0] for r in rows} == {r[0] for r in workers} and len(workers) >= 2
    # and each tenant's rows are on its shard only: the shard query sees them with the tenant bound
    for tenant in tenants[:3]:
        assert len(query(as_app_role(database_url), "SELECT id FROM threads", tenant=tenant)) == 1


def test_a_tenant_bound_with_set_config_alone_reaches_no_worker(database_url: str, client: httpx.Client) -> None:
    """Why tenancy.py binds with SET LOCAL on Citus: set_config binds the coordinator only, and the shard
    query on the worker sees no tenant (so no rows: fails closed)."""
    Graph(client).thread()
    bound_here_only = "SELECT set_config('app.tenant_id', 'default', true), id FROM threads"
    assert query(as_app_role(database_url), bound_here_only) == []
    assert query(as_app_role(database_url), "SELECT id FROM threads", tenant="default") != []


def test_a_set_local_in_a_function_reaches_the_worker_and_set_config_does_not(database_url: str,
                                                                             client: httpx.Client) -> None:
    """Why recall_semantic_hits sets its HNSW walk's settings with SET LOCAL: the walk runs on a worker."""
    Graph(client).thread()

    async def setting_on_the_worker(how: str) -> str | None:
        conn = await asyncpg.connect(as_app_role(database_url))
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL citus.propagate_set_commands = 'local'; SET LOCAL app.tenant_id = 'default'")
                await conn.execute(f"DO $$ BEGIN {how}; END $$")
                return await conn.fetchval("SELECT current_setting('hnsw.ef_search', true) FROM threads"
                                            " WHERE tenant_id = 'default' LIMIT 1")
        finally:
            await conn.close()

    assert asyncio.run(setting_on_the_worker("PERFORM set_config('hnsw.ef_search', '77', true)")) != "77"
    assert asyncio.run(setting_on_the_worker("SET LOCAL hnsw.ef_search = 66")) == "66"


def test_a_fresh_pooled_connection_looks_types_up_without_citus_hiding_shards(database_url: str) -> None:
    """asyncpg's first bigint[] on a connection looks the type up in pg_type and pg_class; with Citus filtering
    pg_class row by row to hide shards, that took 500-800 ms inside the request's transaction, and eight
    retractions queued on one thread's lock ran past the statement timeout. The server's connections to a
    coordinator see the shards (citus.SESSION), so the lookup runs as on one node."""
    async def go() -> tuple[str, list[int]]:
        db = await Database.open(as_app_role(database_url), min_size=1, max_size=1, timeout=10,
                                 queue_limit=4, queue_wait=1)
        try:
            async with db.connection() as conn:
                return (await conn.fetchval("SHOW citus.override_table_visibility"),
                        await conn.fetchval("SELECT $1::bigint[]", [1, 2]))
        finally:
            await db.close()

    assert asyncio.run(go()) == ("off", [1, 2])  # a timing would not tell the two apart under load
