"""The indexer shares its work between tenants and never makes a request wait on an index build.

A batch (schema.sql, recall_embedding_batch) gives each tenant with entries due an equal share, its oldest
entries, and the tenants take turns past the batch's size; the HNSW index of a model is built CONCURRENTLY
on a connection of its own (service/indexer.build_vector_index), so a write on the vectors' table goes on
while it builds. Each test has a store of its own: no server's indexer drains its queue."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import asyncpg
import pytest
from helpers import run_script, run_sql

from recall_server.service.indexer import build_vector_index

MODEL = "fairness-test:8"


@pytest.fixture()
def store(fresh_database: str) -> str:
    from recall_server.db.migrate import migrate

    asyncio.run(migrate(fresh_database))
    return fresh_database


def queue(url: str, tenant: str, n: int, age: str) -> None:
    """`n` threads of `tenant` and their queue entries, queued `age` ago (the oldest first)."""
    run_script(url, f"""
        INSERT INTO tenants (id) VALUES ('{tenant}') ON CONFLICT DO NOTHING;
        SET session_replication_role = replica;  -- the queue rows below, not the triggers' own
        INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
        SELECT '{tenant}', 'thr_{tenant}_' || g, 't', 'card payments ' || g, 'open', '\\x' FROM generate_series(1, {n}) g;
        INSERT INTO embedding_queue (tenant_id, object_id, kind, queued_at, not_before)
        SELECT '{tenant}', 'thr_{tenant}_' || g, 'thread', now() - interval '{age}' + g * interval '1 ms',
               now() - interval '{age}' + g * interval '1 ms'
          FROM generate_series(1, {n}) g;
        ANALYZE embedding_queue;
    """)


def batch(url: str, n: int, after: str = "") -> list[tuple[str, str]]:
    return [(r["tenant_id"], r["object_id"]) for r in run_sql(url, "SELECT * FROM recall_embedding_batch($1, $2)", n, after)]


def test_a_tenant_with_few_entries_is_not_queued_behind_another_tenants_bulk_write(store: str) -> None:
    """10,000 older entries of one tenant and 5 newer of another: one batch of 64 holds all 5 (a FIFO batch
    would hold 64 of the first and none of the second), and the rest of the batch goes to the bulk's oldest."""
    queue(store, "bulk", 10_000, "1 hour")
    queue(store, "small", 5, "1 minute")
    got = batch(store, 64)
    assert Counter(t for t, _ in got) == {"small": 5, "bulk": 59}
    assert [o for t, o in got if t == "bulk"] == [f"thr_bulk_{g}" for g in range(1, 60)]  # its oldest, in order


def test_past_the_batch_size_tenants_take_turns(store: str) -> None:
    """Five tenants with entries due and batches of two: each batch starts after the tenant of the previous
    batch's last row, so every tenant is served within three batches, whatever its name's order."""
    for i, tenant in enumerate(["t1", "t2", "t3", "t4", "t5"]):
        queue(store, tenant, 50, f"{10 - i} minutes")
    after, served = "", []
    for _ in range(3):
        got = batch(store, 2, after)
        assert len(got) == 2 and len({t for t, _ in got}) == 2  # one entry of each of two tenants
        served += [t for t, _ in got]
        after = got[-1][0]
    assert set(served) == {"t1", "t2", "t3", "t4", "t5"}


def test_building_a_models_index_does_not_block_a_delete_of_its_vectors(store: str, tmp_path: Path) -> None:
    """While the HNSW index of a model past 20,000 vectors builds, a DELETE of one of its vectors (as an
    erasure runs) completes without waiting: with lock_timeout 2 s it would fail with LockNotAvailable behind
    a plain CREATE INDEX, which holds a SHARE lock on the table until it ends."""
    if not run_sql(store, "SELECT recall_vectors_available()")[0][0]:
        pytest.skip("this PostgreSQL has no pgvector")
    run_script(store, f"""
        INSERT INTO tenants (id) VALUES ('hnsw');
        INSERT INTO embeddings (tenant_id, object_id, kind, model, dims, embedding)
        SELECT 'hnsw', 'thr_h' || g, 'thread', '{MODEL}', 8,
               ('[' || array_to_string(ARRAY(SELECT random() FROM generate_series(1, 8) WHERE g > 0), ',') || ']')::vector
          FROM generate_series(1, 60000) g;
    """)
    result: list[bool] = []
    builder = threading.Thread(target=lambda: result.append(asyncio.run(build_vector_index(store, MODEL, 8, tmp_path))))
    builder.start()

    async def delete_while_building() -> str:
        conn = await asyncpg.connect(store)
        try:
            for _ in range(3000):  # up to 30 s for the build to reach its table scan
                if await conn.fetchval("SELECT count(*) FROM pg_stat_progress_create_index "
                                       "WHERE phase LIKE 'building index%'"):
                    break
                await asyncio.sleep(0.01)
            else:
                return "no build seen"
            await conn.execute("SET lock_timeout = '2s'")
            await conn.execute("DELETE FROM embeddings WHERE tenant_id = 'hnsw' AND object_id = 'thr_h1'")
            building = await conn.fetchval("SELECT count(*) FROM pg_stat_progress_create_index")
            return "deleted during the build" if building else "deleted, the build had ended"
        finally:
            await conn.close()

    outcome = asyncio.run(delete_while_building())
    builder.join(120)
    assert outcome == "deleted during the build"
    assert result == [True]
    assert run_sql(store, "SELECT count(*) FROM embeddings WHERE object_id = 'thr_h1'")[0][0] == 0
    assert run_sql(store, "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)",
                   "embeddings_hnsw_" + run_sql(store, "SELECT left(md5($1), 12)", MODEL)[0][0])[0][0] is True
