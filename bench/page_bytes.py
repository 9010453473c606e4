"""Page byte budget benchmark: one list of large checkpoints, paged whole, while a probe measures the server's stalls.

    python bench/page_bytes.py [--count 50] [--mib 6] [--limit 500] [--home DIR]

Starts `recall-server serve` (one worker, RECALL_EMBEDDER=none) on a fresh embedded store, puts `--count`
checkpoints of one thread, each holding `--mib` MB of incompressible checkpoint bytes (sent as base64, under
RECALL_MAX_BODY_BYTES), then reads `GET /checkpoints?thread_id=...&limit=` page by page to the end. A probe
requests `GET /healthz` every 5 ms throughout; its slowest answer while the pages are read is how long the
server's event loop could not answer (the worker answers both on one loop). Prints JSON: each page's bytes and
items, the whole read's time, the largest page, the probe's slowest and median answers, and the server's
resident memory (its processes', sampled with each probe) before and during the read. A benchmark, not a
test.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
from run import embedded, log, make_key, query, server_env  # noqa: E402  (bench/, on sys.path as the script's directory)

from recall_server.process import ServerProcess


def probe(url: str, pid: int, stop: threading.Event, seen: list[float], rss: list[int]) -> None:
    """GET /healthz every 5 ms: each answer's time; and the server's resident memory (its processes')."""
    server = psutil.Process(pid)
    with httpx.Client(base_url=url, timeout=60) as http:
        while not stop.is_set():
            start = time.perf_counter()
            http.get("/healthz")
            seen.append(time.perf_counter() - start)
            rss.append(sum(p.memory_info().rss for p in [server, *server.children(recursive=True)]))
            time.sleep(0.005)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=50)
    parser.add_argument("--mib", type=float, default=6, help="MB (10^6 bytes) of checkpoint bytes each")
    parser.add_argument("--limit", type=int, default=500)
    parser.add_argument("--home", type=Path)
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="recall-bench-pages-"))
    home.mkdir(parents=True, exist_ok=True)
    owner = os.environ.get("DATABASE_URL") or embedded.start(home / "data")
    env = {**server_env(owner, 8, 1), "RECALL_EMBEDDER": "none"}
    server = ServerProcess(home / "server.log", "--workers", "1", **env)
    server.start(timeout=120)
    try:
        query(owner, "INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING")
        key = make_key(owner)
        thread = f"bench-pages-{os.getpid()}"
        with httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {key}"}) as http:
            log(f"putting {args.count} checkpoints of {args.mib} MB")
            for n in range(args.count):
                body = {"thread_id": thread, "checkpoint_id": f"ckpt-{n:04d}", "type": "msgpack",
                        "checkpoint": base64.b64encode(os.urandom(int(args.mib * 1e6))).decode()}
                http.post("/checkpoints", json=body).raise_for_status()
            stop, seen, rss = threading.Event(), [], []
            prober = threading.Thread(target=probe, args=(server.url, server.proc.pid, stop, seen, rss))
            prober.start()
            time.sleep(0.5)
            idle, idle_rss = list(seen), list(rss)
            pages, params = [], {"thread_id": thread, "limit": args.limit}
            start = time.perf_counter()
            while True:
                page = http.get("/checkpoints", params=params)
                page.raise_for_status()
                found = page.json()
                pages.append({"bytes": len(page.content), "items": len(found["data"])})
                if not found["has_more"]:
                    break
                params["cursor"] = found["next_cursor"]
            took = time.perf_counter() - start
            stop.set()
            prober.join()
            during = seen[len(idle):]
    finally:
        server.stop()
    print(json.dumps({
        "checkpoints": args.count, "mb_each": args.mib, "limit": args.limit, "pages": len(pages),
        "items": sum(p["items"] for p in pages), "bytes": sum(p["bytes"] for p in pages),
        "largest_page_bytes": max(p["bytes"] for p in pages), "seconds": round(took, 3),
        "probe_slowest_ms": round(max(during) * 1000, 1), "probe_median_ms": round(statistics.median(during) * 1000, 1),
        "probe_idle_slowest_ms": round(max(idle) * 1000, 1) if idle else None,
        "server_rss_mb_idle": round(max(idle_rss) / 1e6), "server_rss_mb_peak": round(max(rss) / 1e6),
        "page_sizes": pages,
    }, indent=1))


if __name__ == "__main__":
    main()
