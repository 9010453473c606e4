"""Did a change make the server faster? Two builds on one bench store, compared in alternating pairs.

    python bench/ab.py REV [--home DIR] [--pairs 10] [--pair-seconds 4] [--only get_thread,get_worker,ingest_4k]

Serves the working tree and REV (a `git worktree` of it) side by side on one embedded store, seeded
as bench/run.py seeds it (`--home` keeps and reuses it), and runs each scenario against the two
builds back to back `--pairs` times, the order turning every pair (run.paired_runs). Prints, per
scenario, the median and range of the per-pair ratios of req/s (working tree / REV) and each build's
median CPU per request (its processes and PostgreSQL's). REV must have the working tree's
schema.sql, comments aside: both builds serve one store, and each applies its own on start.

REV's server runs with PYTHONPATH=<its worktree> and PYTHONSAFEPATH=1: without the second,
`python -m recall_server` puts the current directory first on sys.path, and started from this
checkout both "builds" would be the working tree's.

Why whole servers, not in-process timing: a change that an in-process harness timed at
~15 us a request less client CPU made no difference end to end (get_thread, alternating pairs).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from run import (
    PAYLOAD_4K,
    ROOT,
    THREADS,
    WORKERS,
    Wrk,
    embedded,
    ensure_wrk,
    log,
    make_key,
    paired_runs,
    postmaster_pid,
    seed,
    server_env,
    settle,
)

from recall_server.process import ServerProcess

# The scenarios as bench/run.py runs them.
SCENARIOS = {
    "get_thread": lambda wrk, url: wrk.run(url, THREADS),
    "get_worker": lambda wrk, url: wrk.run(url, WORKERS),
    "ingest_4k": lambda wrk, url: wrk.run(url, ["/triggers"], method="POST", body=PAYLOAD_4K),
    "search_common_lexical": lambda wrk, url: wrk.run(url, ["/search?q=finished&limit=20&mode=lexical"], connections=4),
    "search_common_hybrid": lambda wrk, url: wrk.run(url, ["/search?q=finished&limit=20"], connections=4),
}


def _statements(schema: str) -> list[str]:
    """The words of schema.sql, comments left out: what each build applies when it starts (db/migrate.py)."""
    return re.sub(r"--[^\n]*", "", schema).split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the build to compare the working tree with (a commit, branch or tag)")
    parser.add_argument("--home", type=Path, help="keep the embedded store here and reuse it (seeded once)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--pair-seconds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    args = parser.parse_args()
    scenarios = args.only.split(",")
    if unknown := set(scenarios) - set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    theirs = subprocess.run(["git", "show", f"{args.rev}:schema.sql"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout
    if _statements(theirs) != _statements((ROOT / "schema.sql").read_text()):
        sys.exit(f"{args.rev}'s schema.sql differs from the working tree's: the two builds could not share a store")

    home = args.home or Path(tempfile.mkdtemp(prefix="recall-ab-"))
    home.mkdir(parents=True, exist_ok=True)
    tree = Path(tempfile.mkdtemp(prefix="recall-ab-rev-")) / "rev"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), args.rev], cwd=ROOT, check=True)
    log(f"starting the embedded PostgreSQL in {home}")
    owner = embedded.start(home / "data")
    env = server_env(owner, args.connections, args.workers)
    new = ServerProcess(home / "ab-tree.log", "--workers", str(args.workers), **env)
    old = ServerProcess(home / f"ab-{args.rev}.log", "--workers", str(args.workers), PYTHONPATH=str(tree),
                        PYTHONSAFEPATH="1", **env)
    try:
        new.start(timeout=120)  # migrates the store first, as bench/run.py's server does
        old.start(timeout=120)
        seed(owner)
        log(f"store settled in {settle(owner)} s")
        wrk = Wrk(ensure_wrk(), 2, args.connections, args.pair_seconds, make_key(owner))
        wrk.cpu_of = {server.url: {"server": server.proc.pid, "postgres": postmaster_pid(home)} for server in (new, old)}
        print(f"| scenario | working tree / {args.rev}, req/s (median of {args.pairs} pairs of {args.pair_seconds} s) "
              f"| range | CPU us/request, working tree | {args.rev} |\n|---|---:|---|---:|---:|", flush=True)
        for name in scenarios:
            run = SCENARIOS[name]
            r = paired_runs(wrk, args.pair_seconds, args.pairs, lambda: run(wrk, new.url), lambda: run(wrk, old.url))
            print(f"| {name} | {r['median']} | {r['min']}-{r['max']} | {r['us_per_request'][0]} | "
                  f"{r['us_per_request'][1]} |", flush=True)
    finally:
        new.stop()
        old.stop()
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
