"""What search by meaning costs a write: ingest with the indexer on against off, and the lag from write to
searchable.

    python bench/indexing.py [--home DIR] [--pairs 3] [--seconds 8] [--rate 50]

One embedded store. Ingest: POST /triggers (4 KB of log lines, the text the indexer embeds) from wrk, 8
connections, for `--seconds`, against a server with the default embedder (`on`) and one started with
RECALL_EMBEDDER=none (`off`: writes still queue their objects, nothing embeds them), one at a time, the order
turning every pair; the ratio on/off of each pair's req/s, and its median. Lag: with the `on` server idle,
`--rate` triggers a second for `--seconds`, then each one's `embeddings.embedded_at - triggers.created_at`
(p50, p99, max), read from the tables.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from run import Wrk, embedded, ensure_wrk, log, make_key, postmaster_pid, query, server_env

from recall_server.process import ServerProcess

LOG_4K = "".join(f"FAILED tests/test_mod_{i % 37}.py::test_case_{i} - TimeoutError: payment gateway after {i % 9}s\n"
                 for i in range(60))[:4096]
BODY = json.dumps({"source": "bench.ingest", "summary": "CI failed: payment gateway timeouts", "content_type": "text/plain",
                   "payload": LOG_4K})


def serve(home: Path, dsn: str, embedder: str) -> ServerProcess:
    # RECALL_DATA_DIR: the cluster is the server's own, as under `serve` (its indexer's backend runs at nice 19)
    env = {**server_env(dsn, 8, 1), "RECALL_EMBEDDER": embedder, "RECALL_DATA_DIR": str(home / "data")}
    return ServerProcess(home / f"server-{embedder}.log", "--workers", "1", **env).start(timeout=120)


def drained(dsn: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while query(dsn, "SELECT count(*) FROM embedding_queue WHERE not_before <= now()")[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError("the indexer did not drain the queue")
        time.sleep(0.5)


def ingest(args: argparse.Namespace, home: Path, dsn: str, wrk: Wrk) -> dict:
    ratios, runs = [], {"on": [], "off": []}
    for pair in range(args.pairs):
        order = ("on", "off") if pair % 2 == 0 else ("off", "on")
        rps = {}
        for side in order:
            server = serve(home, dsn, "wordllama" if side == "on" else "none")
            try:
                time.sleep(2)  # the embedder loads in the background: not during the run
                wrk.cpu_of = {server.url: {"server": server.proc.pid, "postgres": postmaster_pid(home)}}
                result = wrk.run(server.url, ["/triggers"], method="POST", body=BODY)
            finally:
                server.stop()
            rps[side] = result["rps"]
            runs[side].append({k: result[k] for k in ("rps", "p50_ms", "p99_ms")})
            log(f"pair {pair + 1} {side}: {result['rps']} req/s")
        ratios.append(round(rps["on"] / rps["off"], 3))
        query(dsn, "DELETE FROM embedding_queue")  # what `off` queued and nobody embedded: not the next run's work
    return {"ratio_on_off": ratios, "median_ratio": statistics.median(ratios), "runs": runs}


def lag(args: argparse.Namespace, home: Path, dsn: str, key: str) -> dict:
    server = serve(home, dsn, "wordllama")
    try:
        time.sleep(2)
        start = query(dsn, "SELECT now()")[0][0]
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            interval, t0, sent = 1 / args.rate, time.perf_counter(), 0
            while sent < args.rate * args.seconds:
                delay = t0 + sent * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                assert client.post("/triggers", content=BODY, headers={"content-type": "application/json"}).status_code == 201
                sent += 1
        drained(dsn)
        [row] = query(dsn, """
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l),
                   max(l), count(*)
              FROM (SELECT extract(epoch FROM e.embedded_at - t.created_at) * 1000 AS l
                      FROM triggers t JOIN embeddings e ON e.tenant_id = t.tenant_id AND e.object_id = t.id
                     WHERE t.tenant_id = 'bench' AND t.created_at >= $1) x""", start)
    finally:
        server.stop()
    return {"rate_per_s": args.rate, "writes": row[3], "p50_ms": round(float(row[0]), 1),
            "p99_ms": round(float(row[1]), 1), "max_ms": round(float(row[2]), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", type=Path)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rate", type=int, default=50, help="writes per second while measuring the lag")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="recall-indexing-"))
    home.mkdir(parents=True, exist_ok=True)
    dsn = embedded.start(home / "data")
    serve(home, dsn, "none").stop()  # migrates the store
    query(dsn, "INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING")
    key = make_key(dsn)
    wrk = Wrk(ensure_wrk(), 2, 8, args.seconds, key)
    results = {"ingest": ingest(args, home, dsn, wrk), "lag": lag(args, home, dsn, key)}
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
