"""Did a change make the server faster? Two builds on the bench store, compared in alternating pairs.

    python bench/ab.py REV [--against REV2] [--home DIR] [--pairs 10] [--pair-seconds 4] [--only get_thread,ingest_4k]

Serves the working tree (or REV2, `--against`) and REV, each from a `git worktree` but the working tree,
side by side on the bench store as bench/run.py seeds it, and runs each scenario against the two builds back
to back `--pairs` times, the order turning every pair (run.paired_runs); the read scenarios first, then
ingest_4k, whose triggers stay in the store. Prints, per scenario, the median and range of the per-pair
ratios of req/s (working tree or REV2 / REV) and each build's median CPU per request (its processes and
PostgreSQL's); a pair in which a run finished no request has no ratio and is named in the last column.

When the two builds' schema.sql are the same, comments aside, both serve one embedded store (DIR/data); else
each has its own (DIR/data, and DIR/data-rev for REV), migrated by the build that serves it, then seeded alike
(run.seed: bench/seed.sql). Each build's server applies its own schema.sql on start. Before measuring, each
store's indexer embeds every seeded object (run.drain_embeddings: hybrid search needs the vectors) and the
store settles (run.settle). `--home` keeps the stores and reuses them: a seeded store is not seeded again. A store
per build that ingest_4k has written to is not: each holds what its build ingested, and they differ (reused
so, lexical search measured 0.46 where fresh stores measured 0.99); a fresh `--home` then.

A worktree's server runs with PYTHONPATH=<its worktree> and PYTHONSAFEPATH=1: without the second,
`python -m recall_server` puts the current directory first on sys.path, and started from this
checkout both "builds" would be the working tree's.

Why whole servers, not in-process timing: a change that an in-process harness timed at
~15 us a request less client CPU made no difference end to end (get_thread, alternating pairs).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import tempfile
from pathlib import Path

from run import (
    PAYLOAD_4K,
    ROOT,
    THREADS,
    WORKERS,
    Wrk,
    drain_embeddings,
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

# The scenarios as bench/run.py runs them (wrk.run's paths and options), the reads first: the write files
# triggers in the store the reads after it would search.
SCENARIOS = {
    "get_thread": (THREADS, {}),
    "get_worker": (WORKERS, {}),
    "search_common_lexical": (["/search?q=finished&limit=20&mode=lexical"], {"connections": 4}),
    "search_common_hybrid": (["/search?q=finished&limit=20"], {"connections": 4}),
    "ingest_4k": (["/triggers"], {"method": "POST", "body": PAYLOAD_4K}),
}


def _statements(schema: str) -> list[str]:
    """The words of schema.sql, comments left out: what each build applies when it starts (db/migrate.py)."""
    return re.sub(r"--[^\n]*", "", schema).split()


def worktree(rev: str) -> Path:
    """A detached `git worktree` of rev, in a directory of its own."""
    tree = Path(tempfile.mkdtemp(prefix="recall-ab-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), rev], cwd=ROOT, check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the build to compare with (a commit, branch or tag)")
    parser.add_argument("--against", metavar="REV2", help="compare this build with REV instead of the working tree")
    parser.add_argument("--home", type=Path, help="keep the embedded stores here and reuse them (seeded once)")
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--pair-seconds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    args = parser.parse_args()
    chosen = args.only.split(",")
    if unknown := set(chosen) - set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")

    home = args.home or Path(tempfile.mkdtemp(prefix="recall-ab-"))
    home.mkdir(parents=True, exist_ok=True)
    names = [args.against or "working tree", args.rev]
    trees = [worktree(args.against) if args.against else None, worktree(args.rev)]
    schemas = [_statements(((tree or ROOT) / "schema.sql").read_text()) for tree in trees]
    # One store both builds serve, or (their schema.sql differ) one each, seeded alike
    data = ["data", "data" if schemas[0] == schemas[1] else "data-rev"]
    written = [home / d / "ingested" for d in data]  # ingest_4k's triggers are in this store
    servers: list[ServerProcess] = []
    try:
        if data[0] != data[1] and any(mark.exists() for mark in written):
            raise SystemExit(f"ingest_4k wrote to the stores in {home}, one per build: they differ now; use a fresh --home")
        owners = {d: embedded.start(home / d) for d in data}
        log(f"embedded PostgreSQL in {', '.join(str(home / d) for d in owners)}")
        for side, tree, d in zip(("new", "rev"), trees, data):  # each migrates its store with its own schema.sql
            servers.append(ServerProcess(home / f"ab-{side}.log", "--workers", str(args.workers),
                                         **({"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"} if tree else {}),
                                         **server_env(owners[d], args.connections, args.workers)).start(timeout=120))
        for owner in owners.values():
            seed(owner)
        for d, owner in owners.items():  # hybrid search needs every seeded object's vector
            drain_embeddings(owner)
            log(f"{d} settled in {settle(owner)} s")
        keys = {d: make_key(owner) for d, owner in owners.items()}
        wrk = Wrk(ensure_wrk(), 2, args.connections, args.pair_seconds, "")
        wrk.cpu_of = {server.url: {"server": server.proc.pid, "postgres": postmaster_pid(home, d)}
                      for server, d in zip(servers, data)}
        print(f"| scenario | {names[0]} / {names[1]}, req/s (median of {args.pairs} pairs of {args.pair_seconds} s) "
              f"| range | CPU us/request, {names[0]} | {names[1]} | pairs left out |\n|---|---:|---|---:|---:|---|",
              flush=True)
        for name in (name for name in SCENARIOS if name in chosen):
            log(f"{name}: {args.pairs} pairs")
            paths, options = SCENARIOS[name]
            if options.get("method") == "POST":
                for mark in written:
                    mark.touch()
            new, old = (lambda server=server, d=d: wrk.run(server.url, paths, key=keys[d], **options)
                        for server, d in zip(servers, data))
            r = paired_runs(wrk, args.pair_seconds, args.pairs, new, old, labels=tuple(names))
            cpu = r.get("us_per_request", ["", ""])
            print(f"| {name} | {r['median']} | {r['min']}-{r['max']} | {cpu[0]} | {cpu[1]} | "
                  f"{'; '.join(r.get('failed', []))} |", flush=True)
    finally:
        for server in servers:
            server.stop()
        for tree in filter(None, trees):
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


if __name__ == "__main__":
    main()
