"""Search at a million embedded objects: hybrid, semantic and lexical latency, filtered and not.

    python bench/million.py [--home DIR] [--objects 1000000] [--duration 10] [--connections 4]

One embedded store under `--home` (kept and reused: seeding, embedding and the HNSW build take the most
time), tenant `bench`: 1,000 threads, 10 workers, `--objects` triggers and reports (one in ten a report),
every one embedded with the default embedder. Summaries and payloads are CI and incident notes made from a
small vocabulary (services, failures, PR numbers), so that questions in an agent's words have near
neighbours and words to match everywhere in the store.

The vectors are made here, not by a server's indexer: the queue the writes filled is drained with the
indexer's own statements (recall_embedding_batch, the model, recall_embedding_store) in batches of 5,000,
and the model's HNSW index is built once at the end (recall_embedding_index), as one CREATE INDEX. The
indexer inserts into a built graph, one vector at a time (~240 vectors/s on 2 cores: 70 minutes for a
million); bench/indexing.py measures that path. The search figures do not depend on how the graph was made.

Then a server (one worker process) answers the eight questions of bench/run.py's search scenarios, asked as
they would be of this store, for `--duration` seconds per scenario with wrk: p50 and p99 of each. Results
print as a table and go to bench/results/million.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from urllib.parse import quote_plus

import asyncpg
from run import Wrk, embedded, ensure_wrk, execute, log, make_key, postmaster_pid, query, server_env, settle

from recall_server import config, embedders
from recall_server.db.migrate import migrate
from recall_server.db.queries import embeddings as q
from recall_server.process import ServerProcess
from recall_server.service.indexer import as_vector

HERE = Path(__file__).parent
QUESTIONS = [quote_plus(s) for s in (
    "why did CI fail on PR 412", "payment timeout in the checkout service", "which deploy broke the ledger",
    "flaky test in search indexing", "who fixed the database connection errors", "memory leak after the upgrade",
    "report on the billing outage", "slow responses from the auth service",
)]
SERVICES = ["checkout", "payments", "ledger", "search", "auth", "billing", "notifications", "gateway", "inventory",
            "shipping"]
FAILURES = ["payment timeout", "connection refused by the database", "flaky test in the indexing suite",
            "out of memory after the upgrade", "slow responses under load", "certificate expired", "deadlock on "
            "the orders table", "a missing migration", "rate limited by the provider", "a null pointer in the parser"]
OUTCOMES = ["failed", "passed", "was cancelled", "timed out", "recovered"]


def seed(dsn: str, objects: int) -> None:
    """The tenant's threads, workers, triggers and reports (every tenth object a report), in chunks of
    100,000 (each a transaction): text from the vocabulary above, indexed by the object's number."""
    have = query(dsn, "SELECT count(*) FROM triggers WHERE tenant_id = 'bench' AND id LIKE 'trg_m%'")[0][0]
    have += query(dsn, "SELECT count(*) FROM reports WHERE tenant_id = 'bench' AND id LIKE 'rpt_m%'")[0][0]
    if have >= objects:
        return
    log(f"seeding {objects:,} triggers and reports")
    execute(dsn, """
        INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING;
        INSERT INTO workers (tenant_id, id, name, summary, request_hash)
        SELECT 'bench', 'wkr_m' || g, 'triage ' || g, 'triage agent ' || g, '\\x' FROM generate_series(1, 10) g
        ON CONFLICT DO NOTHING;
        INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
        SELECT 'bench', 'thr_m' || g, 'PR ' || g, 'pull request ' || g || ' and its CI runs', 'open', '\\x'
          FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING""")
    text = """(ARRAY{services})[1 + g % 10] || ' CI run ' || g || ' for PR ' || (1 + g % 1000) || ' '
              || (ARRAY{outcomes})[1 + (g / 7) % 5] || ': ' || (ARRAY{failures})[1 + (g / 3) % 10]""".format(
        services=_array(SERVICES), outcomes=_array(OUTCOMES), failures=_array(FAILURES))
    body = """convert_to(repeat((ARRAY{failures})[1 + (g / 11) % 10] || ' in ' || (ARRAY{services})[1 + (g / 13) % 10]
              || ' step ' || g % 17 || E'\\n', 4), 'UTF8')""".format(services=_array(SERVICES),
                                                                   failures=_array(FAILURES))
    for start in range(1, objects + 1, 100_000):
        end = min(start + 99_999, objects)
        execute(dsn, f"""
            INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,
                                  request_hash, occurred_at)
            SELECT 'bench', 'trg_m' || g, 'github.check_run', 'thr_m' || (1 + g % 1000), left({text}, 200),
                   'text/plain', p, sha256(p), '\\x', now()
              FROM generate_series({start}, {end}) g, LATERAL (SELECT {body} AS p) x
             WHERE g % 10 <> 0
            ON CONFLICT DO NOTHING;
            INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256,
                                 request_hash)
            SELECT 'bench', 'rpt_m' || g, 'wkr_m' || (1 + g % 10), 'thr_m' || (1 + g % 1000),
                   left('fixed: ' || {text}, 200), 'text/plain', p, sha256(p), '\\x'
              FROM generate_series({start}, {end}) g, LATERAL (SELECT {body} AS p) x
             WHERE g % 10 = 0
            ON CONFLICT DO NOTHING""")
        log(f"seeded {end:,}")


def _array(words: list[str]) -> str:
    return "[" + ", ".join("'" + w.replace("'", "''") + "'" for w in words) + "]"


async def embed_queue(dsn: str) -> dict:
    """Drain the embedding queue with the default embedder, then build the model's HNSW index: what each took."""
    embedder = embedders.from_settings(config.load())
    assert embedder is not None and hasattr(embedder, "embed_sync")
    conn = await asyncpg.connect(dsn)
    try:
        queued = await conn.fetchval("SELECT count(*) FROM embedding_queue")
        started, done = time.monotonic(), 0
        while True:
            async with conn.transaction():
                batch = await q.embedding_batch(conn, 5000)
                if not batch:
                    break
                made = iter(as_vector(v) for v in embedder.embed_sync([e.text for e in batch if e.text and e.text.strip()]))
                vectors = [next(made) if e.text and e.text.strip() else None for e in batch]
                await q.store_embeddings(conn, batch, vectors, embedder.model, embedder.dims)
            done += len(batch)
            if done % 100_000 < 5000:
                log(f"embedded {done:,} of {queued:,}")
        embedding = time.monotonic() - started
        started = time.monotonic()
        await conn.execute("SET maintenance_work_mem = '4GB'")  # the whole graph in memory: one pass
        await conn.execute("SELECT recall_embedding_index($1, $2)", embedder.model, embedder.dims)
        building = time.monotonic() - started
        vectors = await conn.fetchval("SELECT count(*) FROM embeddings WHERE model = $1", embedder.model)
    finally:
        await conn.close()
    log(f"{vectors:,} vectors; embedded {done:,} in {embedding:.0f} s, the index built in {building:.0f} s")
    return {"vectors": vectors, "model": embedder.model, "embedded": done, "embed_seconds": round(embedding),
            "index_build_seconds": round(building)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, help="keep the embedded store here and reuse it")
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    wrk_bin = ensure_wrk()
    home = args.home or Path(tempfile.mkdtemp(prefix="recall-million-"))
    home.mkdir(parents=True, exist_ok=True)
    owner = os.environ.get("DATABASE_URL") or embedded.start(home / "data")
    asyncio.run(migrate(owner))
    seed(owner, args.objects)
    store = asyncio.run(embed_queue(owner))
    made = home / "store.json"  # what seeding this store took, for the runs that reuse it
    if store["embedded"]:
        made.write_text(json.dumps(store))
    elif made.exists():
        store = {**json.loads(made.read_text()), "vectors": store["vectors"]}
    log(f"store settled in {settle(owner)} s")
    server = ServerProcess(home / "server.log", "--workers", "1", **server_env(owner, args.connections, 1))
    server.start(timeout=120)
    try:
        wrk = Wrk(wrk_bin, 2, args.connections, args.duration, make_key(owner))
        postgres = {} if os.environ.get("DATABASE_URL") else {"postgres": postmaster_pid(home)}
        wrk.cpu_of = {server.url: {"server": server.proc.pid, **postgres}}
        asked = [f"/search?q={s}&limit=20" for s in QUESTIONS]
        filtered = [f"{p}&type=report&since=2000-01-01T00:00:00Z" for p in asked]
        scenarios = {
            "hybrid": asked, "hybrid_filtered": filtered,
            "semantic": [f"{p}&mode=semantic" for p in asked],
            "semantic_filtered": [f"{p}&mode=semantic" for p in filtered],
            "lexical": [f"{p}&mode=lexical" for p in asked],
        }
        results = {"store": store, "connections": args.connections, "duration_s": args.duration, "scenarios": {}}
        for name, paths in scenarios.items():
            log(name)
            results["scenarios"][name] = wrk.run(server.url, paths, connections=args.connections)
    finally:
        server.stop()
    out = HERE / "results" / "million.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\n{store['vectors']:,} vectors ({store['model']}), {args.connections} connections, {args.duration} s each\n")
    print("| scenario | req/s | p50 ms | p99 ms | errors |\n|---|---:|---:|---:|---:|")
    for name, r in results["scenarios"].items():
        print(f"| {name} | {r['rps']} | {r['p50_ms']} | {r['p99_ms']} | {r['errors'] + r['non2xx']} |")


if __name__ == "__main__":
    main()
