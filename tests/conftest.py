"""Fixtures: a real PostgreSQL (embedded, or DATABASE_URL's server) and real server processes."""

from __future__ import annotations

import functools
import os
import ssl
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import asyncpg
import helpers
import hypothesis
import httpx
import pytest
from helpers import (
    Graph,
    ThrowawayCitus,
    ServerProcess,
    citus_database,
    citus_binaries,
    cli_process,
    create_key,
    drop_citus_database,
    expire as run_expire,
    run_script,
    run_sql,
    scratch_dir,
    with_database,
)

# The suite's servers embed every write their tests make. They run the small, fast embedder (wordllama,
# ~1/250 of the default's CPU per text) so that two cores keep up; the default (MiniLM) is tested where
# its quality or its loading is the point (test_embedders.py, and one server in test_hybrid_search.py).
os.environ.setdefault("RECALL_EMBEDDER", "wordllama")


def pytest_configure(config: pytest.Config) -> None:
    _one_tls_context()
    _citus_tier(config)


def _citus_tier(config: pytest.Config) -> None:
    """RECALL_TEST_CITUS=1 with no RECALL_TEST_CITUS_URL: the tier on a throwaway cluster (a coordinator and two
    workers from the Citus this machine has), started once by the controlling process, which xdist's workers
    inherit through the environment, and stopped at the end."""
    if os.environ.get("RECALL_TEST_CITUS") != "1" or helpers.CITUS_URL or hasattr(config, "workerinput"):
        return
    bindir = citus_binaries()
    if bindir is None:
        raise pytest.UsageError("RECALL_TEST_CITUS=1: no PostgreSQL with citus.so on this machine (docs/scaling.md)")
    cluster = ThrowawayCitus(bindir)
    config.add_cleanup(cluster.stop)
    os.environ["RECALL_TEST_CITUS_URL"] = helpers.CITUS_URL = cluster.start()


def _one_tls_context() -> None:
    """One SSLContext for every httpx client made with the default verification, built once.

    httpx builds a new one for each Client and each httpx.get() (certifi's whole CA bundle parsed:
    ~60 ms of CPU, more than most tests' requests cost) though every test talks plain HTTP to
    loopback, and the suite makes a few thousand clients.
    """
    from httpx._transports import default

    build = default.create_ssl_context
    shared = functools.cache(build)

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> ssl.SSLContext:
        if verify is True and cert is None:
            return shared(verify=True, cert=None, trust_env=trust_env)
        return build(verify=verify, cert=cert, trust_env=trust_env)

    default.create_ssl_context = create_ssl_context


# The Citus tier: with RECALL_TEST_CITUS_URL these modules run on the Citus cluster (the server and its
# contracts); the others are about one PostgreSQL server (plans, dump/restore, the embedded cluster,
# fault injection) or about no database, and are skipped there.
CITUS_TIER = {
    "test_agents_session.py", "test_anthropic_memory.py", "test_bad_input.py", "test_citus.py",
    "test_citus_dump_restore.py", "test_client.py", "test_console.py", "test_content.py",
    "test_contract_cursors.py", "test_contract_misses.py", "test_contract_stable_ids.py", "test_edge.py",
    "test_grants.py", "test_grep.py", "test_hostile_input.py", "test_http_limits.py", "test_http_semantics.py",
    "test_hybrid_search.py", "test_inline_views.py", "test_langgraph.py",
    "test_langgraph_checkpoint_conformance.py", "test_langgraph_checkpointer.py", "test_langgraph_conformance.py",
    "test_langgraph_semantic.py", "test_lifecycle.py", "test_mcp.py", "test_memories.py", "test_messages.py",
    "test_payloads.py", "test_recall_story.py", "test_search.py", "test_spill.py", "test_tenancy.py",
    "test_trace.py", "test_webhooks.py", "test_worker_heap.py",
}
# Tests of the tier that fail on Citus, with why: most look at one node's internals (a plan, index statistics,
# pg_locks, statement counts) that are elsewhere on a cluster; docs/scaling.md says what does not work there.
CITUS_FAILS: dict[str, str] = {
    "tests/test_search.py::test_search_uses_the_gin_indexes_which_rls_would_forbid":
        "the test reads index statistics on the coordinator; the scans happen on the workers",
    "tests/test_grants.py::test_another_subjects_thread_is_refused_before_any_of_its_events_are_read":
        "the test EXPLAINs the single-node statement on the coordinator: 'cannot perform a lateral outer join'",
    "tests/test_hybrid_search.py::test_the_indexers_backend_of_the_embedded_cluster_runs_at_the_lowest_priority":
        "the embedded cluster's own: the indexer renices a backend of a PostgreSQL it started, not a remote one",
    "tests/test_trace.py::test_a_traced_read_runs_exactly_the_statements_of_an_untraced_one":
        "the key check and the binding are statements of their own on Citus (counts differ, traced or not alike)",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not helpers.CITUS_URL:
        return
    for item in items:
        if item.path.name not in CITUS_TIER:
            item.add_marker(pytest.mark.skip(reason="not in the Citus tier (conftest.CITUS_TIER)"))
        elif (why := CITUS_FAILS.get(item.nodeid.split("[")[0])) is not None:
            item.add_marker(pytest.mark.xfail(reason=f"on Citus: {why}", strict=True))


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A fresh, empty database: on RECALL_TEST_CITUS_URL's Citus cluster when set (migrated with
    `migrate --citus`), else on DATABASE_URL's server when set, else in an embedded cluster."""
    if helpers.CITUS_URL:
        name = f"recall_test_{uuid.uuid4().hex[:12]}"
        yield citus_database(helpers.CITUS_URL, name)
        drop_citus_database(helpers.CITUS_URL, name)
        return
    server_url = os.environ.get("DATABASE_URL")
    if not server_url:
        from recall_server.db import embedded

        yield embedded.start(scratch_dir("pg"))
        return
    name = f"recall_test_{uuid.uuid4().hex[:12]}"
    run_script(server_url, f'CREATE DATABASE "{name}"')
    yield with_database(server_url, name)
    run_script(server_url, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture()
def fresh_database(database_url: str) -> Iterator[str]:
    """A new, empty database in the test cluster (a server on it migrates it): its queues are its own, no other server's indexer drains them."""
    name = f"recall_fresh_{uuid.uuid4().hex[:10]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    yield with_database(database_url, name)
    run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    # No periodic sweep in the shared server: tests that sweep do it themselves, deterministically.
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("server") / "server.log",
                         RECALL_SWEEP_INTERVAL="0").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="session")
def base_url(server: ServerProcess) -> str:
    return server.url


@pytest.fixture(scope="module")
def http(base_url: str) -> Iterator[Callable[[str], httpx.Client]]:
    """A JSON client per API key: `http(key)`, made once a module, closed at its end."""
    clients: dict[str, httpx.Client] = {}

    def as_key(key: str) -> httpx.Client:
        if key not in clients:
            clients[key] = httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {key}",
                                                                                   "Content-Type": "application/json"})
        return clients[key]

    yield as_key
    for c in clients.values():
        c.close()


@pytest.fixture(scope="session")
def api_key(server: ServerProcess, database_url: str) -> str:
    """A write key for tenant `default`, made with the installed operator CLI, in its own process, as a user would."""
    return create_key(database_url, "default", "write", run=cli_process)


@pytest.fixture()
def client(base_url: str, api_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
        yield c


@pytest.fixture()
def sql(database_url: str):
    """Run one query against the test database (to check what was, or was not, written)."""

    def run(query: str, *args: Any) -> list[asyncpg.Record]:
        return run_sql(database_url, query, *args)

    return run


@pytest.fixture()
def expire(database_url: str):
    """Run out the expiry of the objects given by ID, now (helpers.expire): no test sleeps past a ttl."""

    def run(*ids: str) -> None:
        run_expire(database_url, *ids)

    return run


@pytest.fixture()
def graph(client: httpx.Client) -> Graph:
    return Graph(client)


# Hypothesis' per-example deadline (200 ms) measures the machine, not the code: under load (a shared machine,
# xdist's two workers) pure tests tripped it. The suite asserts no timing (bench/ measures speed).
hypothesis.settings.register_profile("recall", deadline=None)
hypothesis.settings.load_profile("recall")
