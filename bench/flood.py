"""Floods at the edge, and what another tenant sees meanwhile: its GET /threads/thr_pr_412 p50, idle and
under each flood, and the worker's RSS before and after.

    python bench/flood.py --home /tmp/flood [--seconds 8] [--clients 4]

Starts its own server (one worker, embedded PostgreSQL under --home, loopback only), loads the PR #412
story with the key `serve` saves, makes a read key of another tenant for the /mcp flood, then runs, one
after another, each bounded in time:

- forged_body: forged well-formed keys POST a 6.6 MB JSON object of 420k keys to /triggers;
- forged_grep: forged keys grep with the pattern \\pL{999} (regex);
- mcp_wide: the read key calls tools/call on /mcp with 420k-key arguments, 6 at once.

Figures are same-run ratios (flood p50 / idle p50), never asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from recall_server import demo
from recall_server.process import ServerProcess

FORGED = f"rk_{'0' * 16}.{'A' * 43}"
WIDE = json.dumps({f"k{i}": i for i in range(420_000)}).encode()  # 6.6 MB


def request(port: int, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
    finally:
        conn.close()


def victim_p50(port: int, key: str, seconds: float) -> tuple[float, int]:
    """p50 in ms of sequential GET /threads/thr_pr_412 over `seconds`, and how many were sent."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    took: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        conn.request("GET", "/threads/thr_pr_412", headers={"Authorization": f"Bearer {key}"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        took.append((time.perf_counter() - started) * 1000)
        time.sleep(0.01)
    conn.close()
    return statistics.median(took), len(took)


def flood(port: int, clients: int, seconds: float, send: object) -> dict[int, int]:
    """`clients` threads calling send(port) until `seconds` pass; the statuses they got, counted."""
    statuses: dict[int, int] = {}
    end = time.monotonic() + seconds
    lock = threading.Lock()

    def client() -> None:
        while time.monotonic() < end:
            status = send(port)  # type: ignore[operator]
            with lock:
                statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return statuses


def mcp_call(key: str) -> object:
    body = (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall_get", "arguments": '
            + WIDE + b"}}")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    return lambda port: request(port, "POST", "/mcp", body, headers)


FLOODS = {
    "forged_body": (4, lambda port: request(port, "POST", "/triggers", WIDE, {
        "Authorization": f"Bearer {FORGED}", "Content-Type": "application/json"})),
    "forged_grep": (4, lambda port: request(port, "GET", "/triggers/trg_x/payload/grep?regex=true&pattern=%5CpL%7B999%7D",
                                            None, {"Authorization": f"Bearer {FORGED}"})),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--home", type=Path, required=True, help="where the embedded PostgreSQL keeps its data")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each flood (and of the idle run)")
    parser.add_argument("--clients", type=int, default=4, help="clients of the pre-auth floods")
    args = parser.parse_args()
    args.home.mkdir(parents=True, exist_ok=True)
    env = {"RECALL_DATA_DIR": str(args.home / "data"), "RECALL_SWEEP_INTERVAL": "0"}
    env.pop("DATABASE_URL", None)
    server = ServerProcess(args.home / "server.log", **env)
    os.environ.pop("DATABASE_URL", None)
    server.start(timeout=120)
    try:
        key = (args.home / "data" / "api-key").read_text().strip()
        demo.load(server.url, key)
        cli = [sys.executable, "-m", "recall_server"]
        cli_env = {**os.environ, **env}
        subprocess.run([*cli, "tenants", "create", "attacker"], env=cli_env, capture_output=True, check=False)
        read_key = subprocess.run([*cli, "keys", "create", "--tenant", "attacker", "--scope", "read"], env=cli_env,
                                  capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
        assert server.proc is not None
        (worker,) = psutil.Process(server.proc.pid).children()
        floods = {**FLOODS, "mcp_wide": (6, mcp_call(read_key))}
        idle, count = victim_p50(server.port, key, args.seconds)
        print(f"idle: GET /threads/thr_pr_412 p50 {idle:.2f} ms ({count} requests); "
              f"worker RSS {worker.memory_info().rss >> 20} MiB")
        for name, (clients, send) in floods.items():
            clients = args.clients if name.startswith("forged") else clients
            rss_before = worker.memory_info().rss
            result: dict[str, object] = {}
            attack = threading.Thread(target=lambda: result.update(statuses=flood(server.port, clients, args.seconds,
                                                                                   send)))
            attack.start()
            time.sleep(0.5)
            p50, count = victim_p50(server.port, key, args.seconds - 1)
            attack.join()
            rss_after = worker.memory_info().rss
            print(f"{name} ({clients} clients, {args.seconds:g} s): victim p50 {p50:.2f} ms = {p50 / idle:.2f}x idle "
                  f"({count} requests); flood statuses {result['statuses']}; worker RSS "
                  f"{rss_before >> 20} -> {rss_after >> 20} MiB")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
