"""Test helpers: real server processes, unique IDs, an object factory, the problem assertion, metrics."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from recall_server.process import ServerProcess as _ServerProcess


class ServerProcess(_ServerProcess):
    """A server process on the given database."""

    def __init__(self, database_url: str, log: Path, port: int | None = None, **env: str) -> None:
        super().__init__(log, port=port, DATABASE_URL=database_url, **env)


def with_database(url: str, name: str) -> str:
    """The same server's URL for another database."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


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


def scratch_dir(name: str) -> Path:
    """A directory for an embedded PostgreSQL outside pytest's basetemp.

    pytest resets its base directory to mode 0700 whenever a pytest process starts (the contract
    suite's self-test starts one); the cluster runs as another user and would lose its files.
    """
    return Path(tempfile.mkdtemp(prefix=f"recall-{name}-"))


def cli(database_url: str, *args: str) -> str:
    """Run `recall-server ARGS` against the test database; return its stdout."""
    run = subprocess.run([sys.executable, "-m", "recall_server", *args], env={**os.environ, "DATABASE_URL": database_url},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return run.stdout


def create_key(database_url: str, tenant: str, scope: str) -> str:
    """A new API key (the CLI prints it alone on its last line)."""
    cli(database_url, "tenants", "create", tenant)
    return cli(database_url, "keys", "create", "--tenant", tenant, "--scope", scope).strip().splitlines()[-1]


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
