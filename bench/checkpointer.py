"""RecallSaver against LangGraph's own PostgreSQL saver, on one embedded PostgreSQL, in the same run.

    python bench/checkpointer.py [--home DIR] [--puts 200] [--runs 10] [--steps 20]

Starts an embedded cluster (under `--home`, or a temporary directory), a recall-server on its `recall`
database, and langgraph-checkpoint-postgres's AsyncPostgresSaver on a database of its own in the same
cluster (its tables share names with recall's). Then, one request at a time (latency, not throughput),
for each saver:

- aput: `--puts` checkpoints in a chain on one thread, each with a 4 KiB channel that never changes (each
  saver stores it once) and a small counter that changes every step;
- aget_tuple: the newest checkpoint of that thread, `--puts` times;
- a graph: a compiled StateGraph of `--steps` nodes in a line, ainvoked `--runs` times on new threads with
  durability="sync" (every super-step's checkpoint and writes are stored before the next step runs).

It prints each one's median and 90th percentile, and the ratio recall / postgres of the medians. The HTTP
hop is measured on its own too: GET /key (the key check and one row, no checkpoint work) through the same
async client, the floor every RecallSaver call pays over a saver that talks to PostgreSQL directly.
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
from typing import Any, TypedDict

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from recall_server.client import AsyncRecallClient  # noqa: E402
from recall_server.db import embedded  # noqa: E402
from recall_server.process import ServerProcess  # noqa: E402


def _other_database(dsn: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    return urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))


async def _setup(dsn: str) -> tuple[str, str]:
    """A write key of a fresh tenant, and the DSN of an empty database for the postgres saver."""
    from recall_server.service import ops

    conn = await asyncpg.connect(dsn)
    try:
        tenant = f"bench-{uuid.uuid4().hex[:8]}"
        await ops.create_tenant(conn, tenant)
        key = (await ops.issue_key_checked(conn, tenant, "write", "checkpointer bench")).key
        name = f"lgpg_{uuid.uuid4().hex[:8]}"
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return key, _other_database(dsn, name)


def _checkpoint(step: int, parent: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    cp = empty_checkpoint()
    cp["id"] = str(uuid6(clock_seq=-1))
    cp["channel_values"] = {"doc": "x" * 4096, "counter": step}
    cp["channel_versions"] = {"doc": 1, "counter": step + 1}
    new = {"doc": 1, "counter": step + 1} if step == 0 else {"counter": step + 1}
    return cp, new


async def _puts_and_gets(saver: Any, n: int) -> tuple[list[float], list[float]]:
    thread = f"bench-{uuid.uuid4().hex[:8]}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    puts, gets = [], []
    for step in range(n):
        cp, new = _checkpoint(step, config["configurable"].get("checkpoint_id"))
        started = time.perf_counter()
        config = await saver.aput(config, cp, {"source": "loop", "step": step}, new)
        puts.append(time.perf_counter() - started)
    latest = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    for _ in range(n):
        started = time.perf_counter()
        assert (await saver.aget_tuple(latest)) is not None
        gets.append(time.perf_counter() - started)
    return puts, gets


class Count(TypedDict):
    n: int


def _graph(saver: Any, steps: int) -> Any:
    from langgraph.graph import START, StateGraph

    builder = StateGraph(Count)
    previous = START
    for i in range(steps):
        builder.add_node(f"s{i}", lambda state: {"n": state["n"] + 1})
        builder.add_edge(previous, f"s{i}")
        previous = f"s{i}"
    return builder.compile(checkpointer=saver)


async def _graph_runs(saver: Any, runs: int, steps: int) -> list[float]:
    graph = _graph(saver, steps)
    times = []
    for _ in range(runs):
        config = {"configurable": {"thread_id": f"run-{uuid.uuid4().hex[:8]}"}}
        started = time.perf_counter()
        out = await graph.ainvoke({"n": 0}, config, durability="sync")
        times.append(time.perf_counter() - started)
        assert out["n"] == steps
    return times


async def _hop(url: str, key: str, n: int) -> list[float]:
    client = AsyncRecallClient(url, key)
    times = []
    try:
        for _ in range(n):
            started = time.perf_counter()
            await client.own_key()
            times.append(time.perf_counter() - started)
    finally:
        await client.aclose()
    return times


def _stats(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered) * 1000, ordered[int(0.9 * (len(ordered) - 1))] * 1000


async def _measure(url: str, key: str, pg_dsn: str, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from recall_server.langgraph import RecallSaver

    found: dict[str, dict[str, list[float]]] = {}
    recall = RecallSaver(url, key)
    async with AsyncPostgresSaver.from_conn_string(pg_dsn) as postgres:
        await postgres.setup()
        for name, saver in (("postgres", postgres), ("recall", recall)):  # a warm-up round for each, not counted
            await _puts_and_gets(saver, 20)
            await _graph_runs(saver, 2, args.steps)
        for name, saver in (("postgres", postgres), ("recall", recall)):
            puts, gets = await _puts_and_gets(saver, args.puts)
            found[name] = {"aput": puts, "aget_tuple": gets,
                           f"graph ({args.steps} steps)": await _graph_runs(saver, args.runs, args.steps)}
    await recall.aclose()
    found["recall"]["HTTP hop (GET /key)"] = await _hop(url, key, args.puts)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, help="where the embedded cluster lives (default: a temporary directory)")
    parser.add_argument("--puts", type=int, default=200, help="aput and aget_tuple calls per saver")
    parser.add_argument("--runs", type=int, default=10, help="graph runs per saver")
    parser.add_argument("--steps", type=int, default=20, help="nodes in the graph")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="recall-bench-ckpt-"))
    dsn = embedded.start(home / "pg")
    server = ServerProcess(home / "server.log", DATABASE_URL=dsn, RECALL_LOG_LEVEL="warning",
                           RECALL_SWEEP_INTERVAL="0").start()
    try:
        key, pg_dsn = asyncio.run(_setup(dsn))
        found = asyncio.run(_measure(server.url, key, pg_dsn, args))
    finally:
        server.stop()
    print(f"{'operation':<22} {'postgres p50/p90 ms':>20} {'recall p50/p90 ms':>20} {'ratio p50':>10}")
    for op, times in found["recall"].items():
        r50, r90 = _stats(times)
        if op in found["postgres"]:
            p50, p90 = _stats(found["postgres"][op])
            print(f"{op:<22} {p50:>10.2f} / {p90:<8.2f} {r50:>10.2f} / {r90:<8.2f} {r50 / p50:>9.2f}x")
        else:
            print(f"{op:<22} {'':>20} {r50:>10.2f} / {r90:<8.2f}")


if __name__ == "__main__":
    main()
