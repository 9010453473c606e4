"""Upgrades: a store made by an earlier release migrates in place and answers as if it had always been current.

tests/data/schema-v<N>.sql is schema.sql as released in version N, kept to build such stores.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import ServerProcess, cli, create_key, run_script, run_sql, with_database

DATA = Path(__file__).parent / "data"


@pytest.fixture()
def version_1_store(database_url: str) -> Iterator[str]:
    """A new database with the version-1 schema and a worker that owns 3 threads and filed 4 reports."""
    name = f"recall_v1_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        run_script(url, (DATA / "schema-v1.sql").read_text())
        run_script(url, """
            INSERT INTO tenants (id) VALUES ('default') ON CONFLICT DO NOTHING;
            INSERT INTO workers (tenant_id, id, name, summary, request_hash)
            VALUES ('default', 'wkr_old', 'w', 's', '\\x');
            INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
            SELECT 'default', 'thr_old' || g, 't', 's', 'open', '\\x' FROM generate_series(1, 3) g;
            INSERT INTO thread_owners (tenant_id, thread_id, worker_id)
            SELECT 'default', 'thr_old' || g, 'wkr_old' FROM generate_series(1, 3) g;
            INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256,
                                 request_hash)
            SELECT 'default', 'rpt_old' || g, 'wkr_old', 'thr_old1', 'r', 'text/plain', '\\x', sha256('\\x'), '\\x'
            FROM generate_series(1, 4) g;
        """)
        yield url
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_version_1_store_migrates_and_keeps_its_workers_counts(version_1_store: str, tmp_path: Path) -> None:
    assert cli(version_1_store, "migrate").strip() == "schema version 2"
    assert cli(version_1_store, "migrate").strip() == "schema version 2"  # and again: nothing changes
    rows = run_sql(version_1_store, "SELECT threads_total, reports_total FROM workers WHERE id = 'wkr_old'")
    assert [tuple(r) for r in rows] == [(3, 4)]
    server = ServerProcess(version_1_store, tmp_path / "server.log").start()
    try:
        key = create_key(version_1_store, "default", "write")
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            assert c.post("/workers/wkr_old/reports", json={"thread_id": "thr_old2", "summary": "new",
                                                            "body": "b"}).status_code == 201
            view = c.get("/workers/wkr_old").json()
        assert (view["threads_total"], view["reports_total"]) == (3, 5)
    finally:
        server.stop()
