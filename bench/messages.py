"""Conversation benchmark: bench/run.py's message scenarios on a store of their own, without its big seed.

    python bench/messages.py [--workers 2] [--duration 10] [--connections 32] [--rounds 3] [--home DIR]

Starts `recall-server serve` on a fresh embedded store (RECALL_EMBEDDER=none: no indexer competes with the
measured requests), seeds bench/run.py's conversation threads (1,000 empty ones and thr_m100k with 100,000
messages), then runs, round-robin `--rounds` times: ingest_4k (a 4 KB trigger), append_messages_1 (one
message a request) and append_messages_20 (a batch of 20), each to one of the 1,000 threads at random; and
the replay of thr_m100k: its first page of 50, its last (a cursor near the end) and its newest (order=desc).
Prints JSON: each scenario's median run, messages/s, and the ratios to ingest_4k. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from run import (  # noqa: E402  (bench/, on sys.path as the script's directory)
    PAYLOAD_4K,
    Wrk,
    embedded,
    ensure_wrk,
    log,
    make_key,
    median_run,
    message_scenarios,
    postmaster_pid,
    query,
    replay_scenarios,
    seed_messages,
    server_env,
    settle,
)

from recall_server.process import ServerProcess


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="round-robin rounds of the write scenarios")
    parser.add_argument("--home", type=Path, help="keep the embedded store here and reuse it (seeded once)")
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="recall-bench-messages-"))
    home.mkdir(parents=True, exist_ok=True)
    owner = os.environ.get("DATABASE_URL") or embedded.start(home / "data")
    env = {**server_env(owner, args.connections, args.workers), "RECALL_EMBEDDER": "none"}
    server = ServerProcess(home / "server.log", "--workers", str(args.workers), **env)
    server.start(timeout=120)
    try:
        seed_messages(owner)
        log(f"store settled in {settle(owner)} s")
        key = make_key(owner)
        secret = query(owner, "SELECT value FROM server_secrets WHERE name = 'cursor'")[0][0]
        wrk = Wrk(ensure_wrk(), 2, args.connections, args.duration, key)
        url = server.url
        postgres = {} if os.environ.get("DATABASE_URL") else {"postgres": postmaster_pid(home)}
        wrk.cpu_of = {url: {"server": server.proc.pid, **postgres}}
        writes = {"ingest_4k": lambda: wrk.run(url, ["/triggers"], method="POST", body=PAYLOAD_4K),
                  **message_scenarios(wrk, url)}
        runs: dict[str, list[dict]] = {name: [] for name in writes}
        for n in range(args.rounds):
            log(f"writes, round {n + 1} of {args.rounds}")
            for name, scenario in writes.items():
                runs[name].append(scenario())
        s = {name: median_run(done) for name, done in runs.items()}
        log(f"store settled in {settle(owner)} s")
        for name, scenario in replay_scenarios(wrk, url, secret).items():
            s[name] = scenario()
    finally:
        server.stop()
    ratio = lambda a, b: round(s[a]["rps"] / s[b]["rps"], 3)  # noqa: E731
    out = {
        "machine": {"cores": os.cpu_count(), "workers": args.workers, "connections": args.connections,
                    "duration_s": args.duration, "rounds": args.rounds},
        "scenarios": s,
        "messages_per_second": {"append_messages_1": s["append_messages_1"]["rps"],
                                "append_messages_20": round(s["append_messages_20"]["rps"] * 20, 1)},
        "ratios": {"append_messages_1 / ingest_4k": ratio("append_messages_1", "ingest_4k"),
                   "append_messages_20 / ingest_4k": ratio("append_messages_20", "ingest_4k"),
                   "replay_last_page / replay_first_page": ratio("replay_last_page", "replay_first_page"),
                   "replay_newest_page / replay_first_page": ratio("replay_newest_page", "replay_first_page")},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
