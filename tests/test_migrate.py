"""Upgrades: a store made by an earlier release migrates in place and answers as if it had always been current.

tests/data/schema-v<N>.sql is schema.sql as released in version N, kept to build such stores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from helpers import (
    ServerProcess,
    assert_an_upgrade_adds_a_column_with_its_check,
    cli,
    create_key,
    run_script,
    run_sql,
    with_database,
)

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


@pytest.mark.slow
def test_a_version_1_store_migrates_and_keeps_its_workers_counts(version_1_store: str, tmp_path: Path) -> None:
    assert cli(version_1_store, "migrate").strip() == "schema version 9"
    assert cli(version_1_store, "migrate").strip() == "schema version 9"  # and again: nothing changes
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


@pytest.mark.slow
def test_idempotency_slots_become_each_api_keys_own(version_1_store: str, tmp_path: Path) -> None:
    """A store whose slots were the tenant's: a key with grants kept its own as '<key ID>/<Idempotency-Key>',
    which becomes (its ID, the Idempotency-Key); the rest keep api_key_id '' (no key can be told), which keys
    without grants still replay until they expire. The primary key is then (tenant_id, api_key_id, key)."""
    owner, stranger = "a" * 16, "b" * 16
    run_script(version_1_store, f"""
        INSERT INTO api_keys (id, tenant_id, scope, secret_sha256) VALUES ('{owner}', 'default', 'write', sha256('s'));
        INSERT INTO idempotency_keys (tenant_id, key, request_hash, status, body, location, object_id, expires_at)
        SELECT 'default', k, '\\x', 201, NULL, NULL, 'thr_old1', now() + interval '1 day'
          FROM unnest(ARRAY['{owner}/x', 'plain', '{stranger}/y']) AS k;
    """)
    assert cli(version_1_store, "migrate").strip() == "schema version 9"
    assert cli(version_1_store, "migrate").strip() == "schema version 9"  # and again: nothing changes
    rows = run_sql(version_1_store, "SELECT api_key_id, key FROM idempotency_keys")
    assert sorted(tuple(r) for r in rows) == [("", f"{stranger}/y"), ("", "plain"), (owner, "x")]
    primary = run_sql(version_1_store, """
        SELECT array_agg(a.attname::text ORDER BY array_position(c.conkey, a.attnum)) FROM pg_constraint c
          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
         WHERE c.conrelid = 'idempotency_keys'::regclass AND c.contype = 'p'""")
    assert primary[0][0] == ["tenant_id", "api_key_id", "key"]
    server = ServerProcess(version_1_store, tmp_path / "server.log").start()
    try:
        key = create_key(version_1_store, "default", "write")
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            body = {"thread_id": "thr_old2", "summary": "new", "body": "b"}
            replayed = c.post("/workers/wkr_old/reports", json=body, headers={"Idempotency-Key": "plain"})
            assert replayed.status_code == 422, replayed.text  # the old slot: held to its own request
            fresh = c.post("/workers/wkr_old/reports", json=body, headers={"Idempotency-Key": "x"})
            assert fresh.status_code == 201 and "idempotent-replayed" not in fresh.headers  # the owner's, not this key's
    finally:
        server.stop()


@pytest.fixture()
def version_2_store(database_url: str) -> Iterator[str]:
    """A new database with the version-2 schema, holding rows at every limit and erased tombstones."""
    name = f"recall_v2_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        run_script(url, (DATA / "schema-v2.sql").read_text())
        run_script(url, f"""
            INSERT INTO workers (tenant_id, id, name, summary, request_hash, app_id)
            VALUES ('default', 'wkr_old', '{'n' * 80}', '{'s' * 200}', '\\x', '{'a' * 64}');
            INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
            SELECT 'default', 'thr_old' || g, '{'t' * 120}', 's', '{'s' * 32}', '\\x' FROM generate_series(1, 3) g;
            INSERT INTO thread_owners (tenant_id, thread_id, worker_id) VALUES ('default', 'thr_old1', 'wkr_old');
            INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,
                                  request_hash, occurred_at)
            SELECT 'default', 'trg_old' || g, 'github.check_run', 'thr_old2', 'x', 'text/plain', '\\x', '\\x', '\\x', now()
            FROM generate_series(1, 17) g;
            INSERT INTO trigger_neighbours (tenant_id, trigger_id, position, neighbour_id)
            SELECT 'default', 'trg_old1', g, 'trg_old' || (g + 1) FROM generate_series(1, 16) g;
            SELECT recall_erase('default', 'thr_old2');  -- tombstones: title, summaries '' (deleted)
        """)
        yield url
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_a_version_2_store_migrates_and_validates_the_limits(version_2_store: str, tmp_path: Path) -> None:
    assert cli(version_2_store, "migrate").strip() == "schema version 9"
    assert cli(version_2_store, "migrate").strip() == "schema version 9"
    rows = run_sql(version_2_store, "SELECT conname, convalidated FROM pg_constraint "
                                    "WHERE contype = 'c' AND conname LIKE '%\\_limit'")
    assert len(rows) == 22 and all(r["convalidated"] for r in rows)
    assert not run_sql(version_2_store, "SELECT 1 FROM pg_proc WHERE proname = 'recall_gone'")
    server = ServerProcess(version_2_store, tmp_path / "server.log").start()
    try:
        key = create_key(version_2_store, "default", "write")
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            old1 = c.get("/threads/thr_old1").json()
            assert old1["title"] == "t" * 120
            assert [o["id"] for o in old1["owner_workers"]] == ["wkr_old"], "version 4 filled the thread's head"
            assert c.get("/threads/thr_old2").status_code == 410
            assert c.patch("/threads/thr_old3", json={"summary": "still writable"}).status_code == 200
    finally:
        server.stop()


def test_a_store_with_a_row_over_a_limit_fails_to_migrate_naming_the_limit(version_2_store: str) -> None:
    """Validation really scans the old rows: a title written past the limit stops the upgrade, loudly."""
    run_script(version_2_store, f"UPDATE threads SET title = '{'t' * 121}' WHERE id = 'thr_old3'")
    run = subprocess.run([sys.executable, "-m", "recall_server", "migrate"],
                         env={**os.environ, "DATABASE_URL": version_2_store}, capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "threads_title_limit" in run.stderr
    assert run_sql(version_2_store, "SELECT max(version) FROM schema_migrations")[0][0] == 2  # nothing applied


@pytest.mark.slow
def test_a_migration_undone_by_a_deadlock_is_applied_again(database_url: str) -> None:
    """A transaction holds a lock the migration's DDL needs (as autovacuum did on thread_events) and then
    waits for the migration: PostgreSQL undoes the migration, which is tried again once that transaction
    ends, instead of failing the server's start."""
    import asyncio

    import asyncpg

    from recall_server.db import migrate

    name = f"recall_deadlock_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)

    async def go() -> tuple[int, int]:
        await migrate.migrate(url)
        blocker = await asyncpg.connect(url)
        try:
            await blocker.execute("BEGIN; LOCK TABLE thread_events IN SHARE UPDATE EXCLUSIVE MODE")  # autovacuum's
            migration = asyncio.create_task(migrate.migrate(url, again=True))  # as `recall-server migrate`
            for _ in range(200):  # the migration, holding its lock, waits for thread_events
                if await blocker.fetchval(
                        "SELECT count(*) FROM pg_locks WHERE relation = 'thread_events'::regclass AND NOT granted"):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the migration never waited for thread_events")
            before = await blocker.fetchval("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
            await blocker.execute("SELECT pg_advisory_xact_lock($1)", migrate._LOCK_KEY)  # and now waits for it
            await blocker.execute("ROLLBACK")
            version = await asyncio.wait_for(migration, 60)
            for _ in range(100):  # the backend that found the deadlock reports it when it exits
                after = await blocker.fetchval(
                    "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
                if after > before:
                    break
                await asyncio.sleep(0.1)
            return version, after - before
        finally:
            await blocker.close()

    try:
        version, deadlocks = asyncio.run(go())
        assert deadlocks == 1, "the migration was undone by a deadlock"
        assert version == run_sql(url, "SELECT max(version) FROM schema_migrations")[0][0]
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_a_server_start_on_a_current_store_takes_no_table_lock(database_url: str) -> None:
    """With a read running on triggers, a start's migration returns at once (this schema.sql is applied);
    applying it again would wait for the table's exclusive lock, and every request after it with it."""
    import asyncio

    import asyncpg

    from recall_server.db import migrate

    name = f"recall_current_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)

    async def go() -> int:
        version = await migrate.migrate(url)
        reader = await asyncpg.connect(url)
        try:
            await reader.execute("BEGIN; LOCK TABLE triggers IN ACCESS SHARE MODE")  # what a running SELECT holds
            assert await asyncio.wait_for(migrate.migrate(url), 10) == version
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(migrate.migrate(url, again=True), 2)
            await reader.execute("ROLLBACK")
        finally:
            await reader.close()
        return await migrate.migrate(url, again=True)

    try:
        version = asyncio.run(go())
        assert version == run_sql(url, "SELECT max(version) FROM schema_migrations")[0][0]
        assert run_sql(url, "SELECT count(*) FROM schema_applied")[0][0] == 1
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


def test_version_6_drops_responses_showing_erased_memories_and_writes_keys_in_nfc(
        client: httpx.Client, database_url: str) -> None:
    """Data written before: a memory write's stored response that listed no mem_ ID (so erasing the memory
    left its value there), and a key stored decomposed. Migrating drops the one and composes the other."""
    import hashlib

    space = ["migrated", uuid.uuid4().hex[:12]]
    headers = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    leaked = client.post("/memories", json={"namespace": space, "key": "old", "value": "private words"},
                         headers=headers)
    assert leaked.status_code == 201
    run_sql(database_url, "UPDATE idempotency_keys SET shows = '{}' WHERE key = $1", headers["Idempotency-Key"])
    assert client.delete(f"/memories/{leaked.json()['id']}").status_code == 204  # as erased before: body kept
    decomposed = client.post("/memories", json={"namespace": space, "key": "cafe", "value": 1}).json()
    nfd = "cafe\u0301"
    run_sql(database_url, "UPDATE memories SET key = $2, pair = $3 WHERE id = $1", decomposed["id"], nfd,
            hashlib.sha256(f"{'/'.join(space)}\0{nfd}".encode()).digest())

    run_sql(database_url, "DELETE FROM schema_migrations WHERE version = 6")
    assert cli(database_url, "migrate").strip() == "schema version 9"

    kept = run_sql(database_url, "SELECT body FROM idempotency_keys WHERE key = $1", headers["Idempotency-Key"])
    assert kept[0]["body"] is None
    assert "erased (no content found)" in cli(database_url, "verify-erasure", leaked.json()["id"])
    found = client.get("/memories/current", params={"namespace": "/".join(space), "key": "caf\u00e9"})
    assert found.status_code == 200 and found.json()["id"] == decomposed["id"]


def test_migrating_drops_the_stored_responses_of_notes_on_an_erased_thread(
        client: httpx.Client, database_url: str) -> None:
    """Data written before: a note's stored response listed no thread ID (its body names none), so erasing the
    thread left its text there. Migrating names the thread in it, and drops it as the thread is gone."""
    thread = client.post("/threads", json={"title": "t", "summary": "s"}).json()["id"]
    headers = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    assert client.post(f"/threads/{thread}/events", json={"summary": "private words"},
                       headers=headers).status_code == 201
    run_sql(database_url, "UPDATE idempotency_keys SET shows = '{}' WHERE key = $1", headers["Idempotency-Key"])
    assert client.delete(f"/threads/{thread}").status_code == 204  # as erased before: body kept

    assert cli(database_url, "migrate").strip() == "schema version 9"

    kept = run_sql(database_url, "SELECT body, shows FROM idempotency_keys WHERE key = $1", headers["Idempotency-Key"])
    assert (kept[0]["body"], kept[0]["shows"]) == (None, [thread])
    assert "erased (no content found)" in cli(database_url, "verify-erasure", thread)


def test_version_9_scopes_a_memorys_words_to_its_namespace_as_well(database_url: str) -> None:
    """A memory written before holds its words under its tenant only ('default:payment'); migrating makes its
    column again, so it holds them under its namespace as well, where a key with grants looks them up."""
    name = f"recall_v8_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        assert cli(url, "migrate").strip() == "schema version 9"
        run_script(url, """
            DROP VIEW recall_searchable;
            ALTER TABLE memories DROP COLUMN search;
            ALTER TABLE memories ADD COLUMN search tsvector
                GENERATED ALWAYS AS (recall_scoped(tenant_id, to_tsvector('simple', summary))) STORED;
            INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value,
                                  value_sha256, confirmed, request_hash, chain, version, current)
            VALUES ('default', 'mem_old', 'users/u1', 'k', sha256('\\x01'), 'fact', 'payment timeout', 'text/plain',
                    '\\x', sha256('\\x'), 'agent', '\\x', 'mem_old', 1, true);
            DELETE FROM schema_migrations WHERE version = 9;""")
        [before] = run_sql(url, "SELECT search::text FROM memories")
        assert "default/users/u1:payment" not in before[0]
        assert cli(url, "migrate").strip() == "schema version 9"
        [after] = run_sql(url, "SELECT search::text FROM memories")
        assert "'default:payment':" in after[0] and "'default/users/u1:payment':" in after[0], after[0]
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_column_an_upgrade_adds_gets_the_check_a_fresh_store_has(database_url: str) -> None:
    """schema.sql adds a later version's columns with recall_add_column: the column, then its CHECK as a
    constraint of its own (the two statements a Citus coordinator takes; tests/test_citus.py runs it there)."""
    name = f"recall_check_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        assert cli(url, "migrate").startswith("schema version")
        assert_an_upgrade_adds_a_column_with_its_check(url)
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')
