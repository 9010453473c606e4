"""What extracting memories from conversations costs an append: append throughput with extraction on against
off, and the lag from append to memories written.

    python bench/extraction.py [--home DIR] [--pairs 2] [--seconds 6] [--rate 20] [--threads 16]

One embedded store, a scripted OpenAI-compatible chat-completions server in this process (it answers at once
with one memory citing the batch's first message: the model's own time is not what is measured). Append:
POST /threads/{id}/messages (one message of ~300 bytes) from wrk, 8 connections, over `--threads` threads,
for `--seconds`, against a server extracting (`on`: RECALL_EXTRACTOR=openai, the threads opted in, the
worker writing memories beside the appends, on the same cores), one queueing only (`queued`: the threads
opted in, RECALL_EXTRACTOR=none: the append statement's own cost, its job row) and one not (`off`: threads
without extraction), one at a time, the order turning every turn (`--pairs` turns); each turn's ratio to
`off`, and their medians. Lag: with the `on` server otherwise idle, `--rate` appends a second for `--seconds`, then each job's
`finished_at - queued_at` (p50, p99, max), read from extraction_jobs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
from run import Wrk, embedded, ensure_wrk, log, make_key, query, server_env

from recall_server.process import ServerProcess

MESSAGE = json.dumps({"messages": [{"role": "user", "content": "I'd like a window seat on the 9:40 to Lisbon, "
                                    "and please remember that I am vegetarian and travel with a folding bike. " * 2}]})


class Model(BaseHTTPRequestHandler):
    """A chat-completions server that answers at once: one fact citing the first message it was shown."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        shown = json.loads(body["messages"][1]["content"].split("\n", 1)[1])["conversation"]
        memories = [{"kind": "fact", "key": "diet", "statement": "The user is vegetarian.",
                     "summary": "vegetarian", "sources": [shown[0]["seq"]], "date": None}] if shown else []
        content = json.dumps({"memories": memories})
        data = json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "bench",
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


SIDES = ("on", "queued", "off")  # queued: the threads opted in, no extractor: the append's own cost alone


def serve(home: Path, dsn: str, side: str, model_url: str) -> ServerProcess:
    env = {**server_env(dsn, 8, 1), "RECALL_EMBEDDER": "none", "RECALL_DATA_DIR": str(home / "data")}
    if side == "on":
        env |= {"RECALL_EXTRACTOR": "openai", "RECALL_EXTRACT_URL": model_url, "RECALL_EXTRACT_MODEL": "bench"}
    return ServerProcess(home / f"server-{side}.log", "--workers", "1", **env).start(timeout=120)


def threads(url: str, key: str, prefix: str, count: int, extract: bool) -> list[str]:
    made = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        for i in range(count):
            body: dict = {"id": f"thr_{prefix}_{i}", "title": "bench conversation"}
            if extract:
                body["extract"] = {"namespace": ["bench", f"{prefix}_{i}"]}
            assert c.post("/threads", json=body).status_code in (200, 201)
            made.append(body["id"])
    return made


def drained(dsn: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while query(dsn, "SELECT count(*) FROM extraction_jobs WHERE status IN ('queued', 'running')")[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError("the extraction queue did not drain")
        time.sleep(0.5)


def append(args: argparse.Namespace, home: Path, dsn: str, key: str, wrk: Wrk, model_url: str) -> dict:
    ratios: dict[str, list[float]] = {"on": [], "queued": []}
    runs: dict[str, list[dict]] = {side: [] for side in SIDES}
    for turn in range(args.pairs):
        order = SIDES[turn % 3:] + SIDES[:turn % 3]
        rps = {}
        for side in order:
            server = serve(home, dsn, side, model_url)
            try:
                ids = threads(server.url, key, f"{side}{turn}", args.threads, side != "off")
                result = wrk.run(server.url, [f"/threads/{t}/messages" for t in ids], method="POST", body=MESSAGE)
                if side == "on":
                    drained(dsn)  # the worker's backlog is not the next run's load
            finally:
                server.stop()
            rps[side] = result["rps"]
            runs[side].append({k: result[k] for k in ("rps", "p50_ms", "p99_ms")})
            log(f"turn {turn + 1} {side}: {result['rps']} req/s")
        query(dsn, "DELETE FROM extraction_jobs WHERE status = 'queued'")  # what `queued` left: nobody's work
        for side in ratios:
            ratios[side].append(round(rps[side] / rps["off"], 3))
    return {"ratio_to_off": ratios, "median_ratio": {side: statistics.median(r) for side, r in ratios.items()},
            "runs": runs}


def lag(args: argparse.Namespace, home: Path, dsn: str, key: str, model_url: str) -> dict:
    server = serve(home, dsn, "on", model_url)
    try:
        ids = threads(server.url, key, "lag", args.threads, True)
        start = query(dsn, "SELECT now()")[0][0]
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            interval, t0, sent = 1 / args.rate, time.perf_counter(), 0
            while sent < args.rate * args.seconds:
                delay = t0 + sent * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                r = client.post(f"/threads/{ids[sent % len(ids)]}/messages", content=MESSAGE,
                                headers={"content-type": "application/json"})
                assert r.status_code == 201, r.text
                sent += 1
        drained(dsn)
        [row] = query(dsn, """
            SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l),
                   max(l), count(*), count(*) FILTER (WHERE NOT done)
              FROM (SELECT extract(epoch FROM coalesce(finished_at, now()) - queued_at) * 1000 AS l,
                           status = 'done' AS done
                      FROM extraction_jobs WHERE tenant_id = 'bench' AND queued_at >= $1) x""", start)
    finally:
        server.stop()
    return {"rate_per_s": args.rate, "jobs": row[3], "not_done": row[4], "p50_ms": round(float(row[0]), 1),
            "p99_ms": round(float(row[1]), 1), "max_ms": round(float(row[2]), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", type=Path)
    parser.add_argument("--pairs", type=int, default=3, help="turns of the three servers")
    parser.add_argument("--seconds", type=int, default=6)
    parser.add_argument("--rate", type=int, default=20, help="appends per second while measuring the lag")
    parser.add_argument("--threads", type=int, default=16, help="threads the appends go to")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="recall-extraction-"))
    home.mkdir(parents=True, exist_ok=True)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    model_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    dsn = embedded.start(home / "data")
    serve(home, dsn, "off", model_url).stop()  # migrates the store
    query(dsn, "INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING")
    key = make_key(dsn)
    wrk = Wrk(ensure_wrk(), 2, 8, args.seconds, key)
    results = {"append": append(args, home, dsn, key, wrk, model_url), "lag": lag(args, home, dsn, key, model_url)}
    httpd.shutdown()
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
