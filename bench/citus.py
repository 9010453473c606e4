"""The Citus coordinator's cost per request: the same requests against a store distributed over a Citus
cluster and a store on one node of the same PostgreSQL, in one run, alternating.

    python bench/citus.py --coordinator postgresql://postgres@127.0.0.1:9700/postgres [--requests 400]
                          [--concurrency 8] [--rounds 3]

Makes two fresh databases on the coordinator's server: one distributed (`migrate --citus`, on every node
the cluster's pg_dist_node lists) and one plain (no citus extension: a single-node store on the
coordinator's PostgreSQL, so the hardware and PostgreSQL are the same). A server on each, one worker
process. Each store gets the same `SEARCHABLE` triggers, embedded by its indexer before the first
round. Each round sends the same requests to both (GET /threads/{id}, GET of an unknown ID, POST
/threads, POST a note, a lexical search and a hybrid one), in closed loops of `--concurrency` clients,
and prints requests per second and the median latency of each, with Citus over one node as a ratio.
Drops both databases at the end. A benchmark, not a test: it never fails on speed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

from helpers import (  # noqa: E402
    citus_database,
    cli,
    create_key,
    drop_citus_database,
    run_script,
    with_database,
)
from run import drain_embeddings  # noqa: E402

from recall_server.process import ServerProcess  # noqa: E402


async def closed_loop(url: str, key: str, make: list, concurrency: int) -> tuple[float, float]:
    """(requests per second, median latency in ms) of `make`'s requests, `concurrency` at a time."""
    latencies: list[float] = []
    queue = list(make)
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        async def client() -> None:
            while queue:
                method, path, body = queue.pop()
                began = time.perf_counter()
                r = await c.request(method, path, json=body)
                latencies.append(time.perf_counter() - began)
                assert r.status_code < 500, r.text
        began = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        took = time.perf_counter() - began
    return len(latencies) / took, statistics.median(latencies) * 1000


SEARCHABLE = 200  # triggers per store, for the search scenarios
CAUSES = ["payment timeout", "flaky network test", "out of memory in the linker", "expired signing key"]


def seed_searchable(url: str, key: str) -> None:
    """SEARCHABLE CI triggers of varied causes (the indexer embeds them after)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        for i in range(SEARCHABLE):
            cause = CAUSES[i % len(CAUSES)]
            r = c.post("/triggers", json={"source": "ci", "summary": f"CI run {i} on PR {400 + i % 40} failed",
                                          "payload": f"job {i}: {cause} after {i % 7 + 1} retries"})
            assert r.status_code == 201, r.text


def scenarios(n: int, thread: str) -> dict[str, list]:
    return {
        "get_thread": [("GET", f"/threads/{thread}", None)] * n,
        "get_unknown": [("GET", f"/threads/thr_missing{i}", None) for i in range(n)],
        "create_thread": [("POST", "/threads", {"id": f"thr_c{uuid.uuid4().hex[:16]}", "title": "t", "summary": "s"})
                          for _ in range(n)],
        "note": [("POST", f"/threads/{thread}/events", {"summary": f"note {i}"}) for i in range(n)],
        "search_lexical": [("GET", "/search?q=payment%20timeout&limit=20&mode=lexical", None)] * n,
        "search_hybrid": [("GET", "/search?q=why%20did%20CI%20fail%20on%20PR%20412&limit=20", None)] * n,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--coordinator", required=True, help="a Citus coordinator's URL (any database on it)")
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:8]
    distributed = citus_database(args.coordinator, f"recall_bench_citus_{tag}")
    single = with_database(args.coordinator, f"recall_bench_single_{tag}")
    run_script(args.coordinator, f'CREATE DATABASE "recall_bench_single_{tag}"')
    cli(single, "migrate")
    logs = Path(tempfile.mkdtemp(prefix="recall-bench-citus-"))
    stores = {"citus": distributed, "one node": single}
    servers = {name: ServerProcess(logs / f"{n}.log", DATABASE_URL=dsn, RECALL_WORKERS="1", RECALL_SWEEP_INTERVAL="0")
               for n, (name, dsn) in enumerate(stores.items())}
    try:
        keys, threads = {}, {}
        for name, server in servers.items():
            server.start()
            keys[name] = create_key(stores[name], "bench", "write")
            r = httpx.post(f"{server.url}/threads", headers={"Authorization": f"Bearer {keys[name]}"},
                           json={"id": f"thr_bench{tag}", "title": "t", "summary": "the bench thread"})
            assert r.status_code == 201, r.text
            threads[name] = f"thr_bench{tag}"
            seed_searchable(server.url, keys[name])
        for dsn in stores.values():
            drain_embeddings(dsn, timeout=300)
        figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for _ in range(args.rounds):
            for name, server in servers.items():  # alternating, so drift hits both alike
                for scenario, requests in scenarios(args.requests, threads[name]).items():
                    figures.setdefault((scenario, name), []).append(
                        asyncio.run(closed_loop(server.url, keys[name], requests, args.concurrency)))
        print(f"{'scenario':<14} {'one node rps':>12} {'citus rps':>10} {'ratio':>6}  "
              f"{'one node p50 ms':>15} {'citus p50 ms':>12}")
        for scenario in scenarios(1, "x"):
            one = [f for f in figures[(scenario, "one node")]]
            dist = [f for f in figures[(scenario, "citus")]]
            one_rps, dist_rps = statistics.median(f[0] for f in one), statistics.median(f[0] for f in dist)
            print(f"{scenario:<14} {one_rps:>12.0f} {dist_rps:>10.0f} {dist_rps / one_rps:>6.2f}  "
                  f"{statistics.median(f[1] for f in one):>15.1f} {statistics.median(f[1] for f in dist):>12.1f}")
    finally:
        for server in servers.values():
            server.stop()
        drop_citus_database(args.coordinator, f"recall_bench_citus_{tag}")
        run_script(args.coordinator, f'DROP DATABASE IF EXISTS "recall_bench_single_{tag}" WITH (FORCE)')


if __name__ == "__main__":
    main()
