"""Test helpers: real server processes, unique IDs, an object factory, the problem assertion, metrics."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from recall_server.process import ServerProcess as _ServerProcess
from recall_server.process import free_port


class ServerProcess(_ServerProcess):
    """A server process on the given database."""

    def __init__(self, database_url: str, log: Path, port: int | None = None, **env: str) -> None:
        super().__init__(log, port=port, DATABASE_URL=database_url, **env)


def with_database(url: str, name: str) -> str:
    """The same server's URL for another database."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


# A Citus coordinator: the whole suite's Citus tier (conftest.CITUS_TIER). RECALL_TEST_CITUS=1 without a URL starts a
# throwaway cluster from the Citus found on this machine (conftest.pytest_configure sets this then).
CITUS_URL = os.environ.get("RECALL_TEST_CITUS_URL")


def citus_database(coordinator_url: str, name: str, distributed: bool = True) -> str:
    """A new database `name` on the Citus cluster of `coordinator_url` (the coordinator and every worker its
    pg_dist_node lists, each with the citus extension, the workers added), migrated with `migrate --citus`
    (with `distributed` false, plain `migrate`: a store on the coordinator alone); its URL on the coordinator."""
    async def go() -> None:
        conn = await asyncpg.connect(coordinator_url)
        try:
            nodes = await conn.fetch("SELECT nodename, nodeport, groupid = 0 AS coordinator FROM pg_dist_node")
        finally:
            await conn.close()
        coordinator = urlsplit(coordinator_url)
        for host, port, _ in nodes:
            node = urlunsplit(coordinator._replace(netloc=f"{coordinator.username}@{host}:{port}"))
            await _script(node, f'CREATE DATABASE "{name}"')
            await _script(with_database(node, name), "CREATE EXTENSION citus")
        # Adding a node copies the roles to it; two test processes doing so at once collided on the worker
        # ("tuple concurrently updated"), so one at a time, under a lock in the coordinator's own database.
        guard = await asyncpg.connect(coordinator_url)
        conn = await asyncpg.connect(with_database(coordinator_url, name))
        try:
            await guard.execute("SELECT pg_advisory_lock(hashtext('recall_test_citus_add_node'))")
            for host, port, is_coordinator in nodes:
                if is_coordinator:
                    await conn.execute("SELECT citus_set_coordinator_host($1, $2)", host, port)
                else:
                    await conn.execute("SELECT citus_add_node($1, $2)", host, port)
        finally:
            await conn.close()
            await guard.close()

    asyncio.run(go())
    url = with_database(coordinator_url, name)
    cli(url, "migrate", *(["--citus"] if distributed else []))
    return url


def drop_citus_database(coordinator_url: str, name: str) -> None:
    """Drop `name` from every node of the cluster (citus_database's)."""
    nodes = run_sql(coordinator_url, "SELECT nodename, nodeport FROM pg_dist_node")
    coordinator = urlsplit(coordinator_url)
    for host, port in nodes:
        node = urlunsplit(coordinator._replace(netloc=f"{coordinator.username}@{host}:{port}"))
        run_script(node, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def assert_an_upgrade_adds_a_column_with_its_check(url: str, *migrate: str) -> None:
    """An upgrade that adds a column with a CHECK, as schema.sql's later versions do: drop one such column
    (tenants.checkpoint_max_age) of a migrated store and migrate again; the column comes back with the CHECK
    a fresh store has, and the CHECK holds."""
    check = ("SELECT pg_get_constraintdef(oid) FROM pg_constraint"
             " WHERE conrelid = 'tenants'::regclass AND conname = 'tenants_checkpoint_max_age_check'")
    [[before]] = run_sql(url, check)
    run_script(url, "ALTER TABLE tenants DROP COLUMN checkpoint_max_age")
    assert cli(url, "migrate", *migrate).startswith("schema version")
    [[after]] = run_sql(url, check)
    assert after == before == "CHECK ((checkpoint_max_age > '00:00:00'::interval))"
    try:
        run_script(url, "INSERT INTO tenants (id, checkpoint_max_age) VALUES ('t-neg', interval '-1 day')")
    except asyncpg.CheckViolationError:
        return
    raise AssertionError("a negative checkpoint_max_age was stored")


async def _script(dsn: str, script: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(script)
    finally:
        await conn.close()


def run_sql(dsn: str, query: str, *args: Any) -> list[asyncpg.Record]:
    """One query's rows, on its own connection."""
    async def go() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


def run_script(dsn: str, script: str) -> None:
    """Several statements (no rows), on their own connection."""
    async def go() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(script)
        finally:
            await conn.close()

    asyncio.run(go())


_TABLES = {"thr_": "threads", "wkr_": "workers", "trg_": "triggers", "rpt_": "reports", "mem_": "memories"}


def expire(dsn: str, *ids: str) -> None:
    """Run out these objects' expiry now, instead of a test sleeping past a short ttl.

    Each must have an expiry (a ttl, an expires_at, a retention): that instant moves to now() on its
    row and on every copy the writes made of it (what was filed on a thread and took its expiry, the
    ref_gone_at of events pointing at them), and the heads showing them are rendered again, as
    recall_cap_expiry does when a retention moves a thread's expiry. An object written without an
    expiry fails the test, so a write that dropped its ttl cannot pass for one that expired.
    """
    async def go() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            async with conn.transaction():
                for obj in ids:
                    table = _TABLES[obj[:4]]
                    row = await conn.fetchrow(f"SELECT tenant_id, expires_at FROM {table} WHERE id = $1", obj)
                    assert row is not None and row["expires_at"] is not None, f"{obj} has no expiry to run out"
                    tenant, until = row["tenant_id"], row["expires_at"]
                    await conn.execute(f"UPDATE {table} SET expires_at = now() WHERE tenant_id = $1 AND id = $2",
                                       tenant, obj)
                    moved = [obj]
                    if table == "threads":
                        for child in ("triggers", "reports"):
                            moved += [r["id"] for r in await conn.fetch(
                                f"UPDATE {child} SET expires_at = now()"
                                " WHERE tenant_id = $1 AND thread_id = $2 AND expires_at = $3 RETURNING id",
                                tenant, obj, until)]
                    await conn.execute("UPDATE thread_events SET ref_gone_at = now()"
                                       " WHERE tenant_id = $1 AND ref = ANY($2) AND ref_gone_at = $3",
                                       tenant, moved, until)
                    for shown in moved:
                        await conn.execute("SELECT recall_rebuild_heads_showing($1, $2)", tenant, shown)
        finally:
            await conn.close()

    asyncio.run(go())


def scratch_dir(name: str) -> Path:
    """A directory for an embedded PostgreSQL outside pytest's basetemp.

    pytest resets its base directory to mode 0700 whenever a pytest process starts (the contract
    suite's self-test starts one); the cluster runs as another user and would lose its files.
    """
    return Path(tempfile.mkdtemp(prefix=f"recall-{name}-"))


_CLI = threading.Lock()  # CliRunner swaps sys.stdout and os.environ for the call: one call at a time


def cli(database_url: str, *args: str) -> str:
    """Run `recall-server ARGS` against the test database; return its stdout.

    The operator CLI's own commands (recall_server.cli.main, what the `recall-server` script runs),
    invoked in this process: a new Python process per call cost ~0.3 s of CPU (start-up, the
    server's imports) and the suite makes a few hundred. The installed command itself, as a
    process, is what tests/test_docs_commands.py and the session's first key exercise.
    """
    from click.testing import CliRunner, Result

    from recall_server.cli import main

    def invoke() -> Result:
        with _CLI:
            return CliRunner(env={"DATABASE_URL": database_url}).invoke(main, list(args))

    try:  # the commands run their own event loop: from a test's running one, in a thread of their own
        asyncio.get_running_loop()
    except RuntimeError:
        result = invoke()
    else:
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(invoke).result()
    detail = "".join(traceback.format_exception(*result.exc_info)) if result.exc_info else result.stderr
    assert result.exit_code == 0, f"recall-server {' '.join(args)}: exit {result.exit_code}\n{detail}"
    return result.stdout


def cli_process(database_url: str, *args: str) -> str:
    """Run the installed `recall-server ARGS` as its own process against the test database; return its stdout."""
    run = subprocess.run([sys.executable, "-m", "recall_server", *args], env={**os.environ, "DATABASE_URL": database_url},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def create_key(database_url: str, tenant: str, scope: str, run: Callable[..., str] = cli) -> str:
    """A new API key (the CLI prints it alone on its last line); `run=cli_process` makes it with the installed command."""
    run(database_url, "tenants", "create", tenant)
    return run(database_url, "keys", "create", "--tenant", tenant, "--scope", scope).strip().splitlines()[-1]


def tenant_with_keys(database_url: str, prefix: str) -> dict[str, str]:
    """A new tenant of one test module's own (`name`), with a key of each scope (`read`, `write`, `admin`)."""
    name = f"{prefix}-{uuid.uuid4().hex[:12]}"
    return {"name": name, **{scope: create_key(database_url, name, scope) for scope in ("read", "write", "admin")}}


@contextlib.contextmanager
def fails_after(seconds: int) -> Iterator[None]:
    """A test that hangs fails with a TimeoutError after `seconds` (SIGALRM), instead of holding the suite."""
    def hung(*_: object) -> None:
        raise TimeoutError(f"the test did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def settled_rows(client: httpx.Client, path: str, count: int, limit: int = 500, timeout: float = 15,
                 **params: Any) -> list[dict[str, Any]]:
    """Every row on the trace or audit page(s) at `path` (with `params`) once `count` of them have settled (or
    the timeout passed)."""
    deadline = time.monotonic() + timeout
    while True:
        reads, cursor = [], None
        while True:
            page = client.get(path, params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})})
            assert page.status_code == 200, page.text
            body = page.json()
            reads += body["data"]
            cursor = body["next_cursor"]
            assert cursor, "a trace or audit page always hands back a cursor"
            if not body["has_more"]:
                break
        if len(reads) >= count or time.monotonic() > deadline:
            return reads
        time.sleep(0.2)  # polling (with a deadline) for the servers' flushes


def uid(prefix: str) -> str:
    """A fresh ID of a kind, so tests never collide on a shared store."""
    return f"{prefix}_t{uuid.uuid4().hex[:16]}"


class Graph:
    """Creates objects over HTTP and checks each create succeeded."""

    def __init__(self, client: httpx.Client) -> None:
        self.c = client

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.c.post(path, json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def worker(self, **kw: Any) -> dict[str, Any]:
        return self._post("/workers", {"id": uid("wkr"), "name": "w", "summary": "a worker", **kw})

    def thread(self, **kw: Any) -> dict[str, Any]:
        return self._post("/threads", {"id": uid("thr"), "title": "t", "summary": "a thread", **kw})

    def trigger(self, **kw: Any) -> dict[str, Any]:
        return self._post("/triggers", {"id": uid("trg"), "source": "test", "summary": "a trigger",
                                        "payload": {"k": 1}, **kw})

    def report(self, worker_id: str, thread_id: str, **kw: Any) -> dict[str, Any]:
        return self._post(f"/workers/{worker_id}/reports",
                          {"id": uid("rpt"), "thread_id": thread_id, "summary": "a report", "body": "text", **kw})

    def note(self, thread_id: str, summary: str = "note") -> dict[str, Any]:
        return self._post(f"/threads/{thread_id}/events", {"summary": summary})


def assert_problem(response: httpx.Response, status: int, mentions: str | None = None) -> dict[str, Any]:
    """Every error is RFC 9457 problem+json with the full member set."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert {"type", "title", "status", "detail", "instance"} <= body.keys(), body
    assert body["status"] == status
    if mentions is not None:
        assert mentions in response.text, body
    return body


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    """GET /metrics without a key; every sample by (name, labels)."""
    response = httpx.get(url + "/metrics", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value; a series not yet exposed counts as 0."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def citus_binaries() -> Path | None:
    """The bin directory of a PostgreSQL on this machine with Citus installed (citus.so in its libraries), if any:
    where the Citus tier's throwaway cluster comes from when no RECALL_TEST_CITUS_URL names one."""
    configs = [shutil.which("pg_config"), *sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_config"), reverse=True)]
    for config in filter(None, configs):
        try:
            libdir = subprocess.run([config, "--pkglibdir"], capture_output=True, text=True, check=True).stdout.strip()
            bindir = subprocess.run([config, "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            continue
        if (Path(libdir) / "citus.so").exists() and (Path(bindir) / "initdb").exists():
            return Path(bindir)
    return None


class ThrowawayCitus:
    """A coordinator and two workers started from `bindir` in a scratch directory, on free loopback ports, trust
    auth; stopped and removed by stop(). As root (CI), the clusters run as the `postgres` OS user."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="recall-citus-"))
        self.ports = [free_port() for _ in range(3)]
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> str:
        """The coordinator's URL, once every node runs with citus and the coordinator knows its workers."""
        if self.as_user:
            shutil.chown(self.root, "postgres")
        for n, port in enumerate(self.ports):
            data = self.root / f"node{n}"
            self._run(str(self.bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
            self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-l", str(self.root / f"node{n}.log"), "-w", "-o",
                      f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c shared_preload_libraries=citus"
                      " -c max_worker_processes=64 -c max_connections=300 -c fsync=off", "start")
        coordinator = f"postgresql://postgres@127.0.0.1:{self.ports[0]}/postgres"

        async def join() -> None:
            for port in self.ports:
                conn = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/postgres")
                try:
                    await conn.execute("CREATE EXTENSION IF NOT EXISTS citus")
                finally:
                    await conn.close()
            conn = await asyncpg.connect(coordinator)
            try:
                await conn.execute("SELECT citus_set_coordinator_host('127.0.0.1', $1)", self.ports[0])
                for port in self.ports[1:]:
                    await conn.execute("SELECT citus_add_node('127.0.0.1', $1)", port)
            finally:
                await conn.close()

        asyncio.run(join())
        return coordinator

    def stop(self) -> None:
        for n in range(len(self.ports)):
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.root / f"node{n}"), "-m", "immediate", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
