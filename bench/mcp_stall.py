"""How long one large /mcp tool call holds the server's event loop: the slowest GET /healthz answered while it runs.

    python bench/mcp_stall.py [--rounds 3] [--home DIR]

Starts `recall-server serve` (one worker, RECALL_EMBEDDER=none) on a fresh embedded store, then sends each
scenario's tools/call as one raw POST /mcp, `--rounds` times, while a probe requests `GET /healthz` every 5 ms
on its own connection (the worker answers both on one loop, so the probe's slowest answer during the call is
the longest the loop could not answer). Each shape comes twice, `_api` with ~99,000 keys and array items (just
under RECALL_MAX_JSON_ITEMS) and `_mcp` just under /mcp's bounds (`--items`, `--bytes`; default the server's
RECALL_MCP_MAX_ITEMS and RECALL_MCP_MAX_BODY_BYTES):

- strings: recall_remember with a value that is a list of short strings;
- objects: recall_remember with a value that is a list of objects of two keys;
- deep: recall_remember with a value nested 900 levels deep, each level holding a few keys;
- invalid: recall_say with a list of strings for messages (a validation error per item);
- extra_keys: recall_get with the arguments it takes and that many more;
- string_8mb, string_mcp: recall_file_trigger with a payload of one string of 8 MB, and just under /mcp's bytes.

Prints JSON: per scenario the HTTP status, what the call answered (a result, a tool error or a JSON-RPC error,
first 120 characters), the call's time (slowest of the rounds) and the probe's slowest answer in each round, and
the probe's slowest while idle. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import httpx
from run import embedded, log, make_key, query, server_env  # noqa: E402  (bench/, on sys.path as the script's directory)

from recall_server.config import Settings
from recall_server.process import ServerProcess

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def tool_call(name: str, arguments: dict, raw: bytes = b"") -> bytes:
    """A tools/call request; `raw` is JSON inserted as the last argument, "value", as it is."""
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": name, "arguments": arguments}}).encode()
    return body[:-2] + b', "value": ' + raw + b"}}" if raw else body


def nested(depth: int, width: int) -> bytes:
    """An object nested `depth` levels deep, each level holding `width` keys besides the next level."""
    level = b"".join(b'"w%d": %d, ' % (i, i) for i in range(width))
    return (b'{' + level + b'"k": ') * depth + b'"leaf"' + b'}' * depth


def scenarios(items: int, size: int) -> dict[str, bytes]:
    """Each shape twice: with ~99,000 items (just under RECALL_MAX_JSON_ITEMS), and just under /mcp's bounds."""
    memory = {"namespace": "bench/stall", "key": "k"}
    found: dict[str, bytes] = {}
    for scale, n in (("api", 99_000), ("mcp", items - 20)):  # the envelope and the other arguments hold a few
        found |= {
            f"strings_{scale}": tool_call("recall_remember", {**memory, "value": [f"s{i}" for i in range(n)]}),
            f"objects_{scale}": tool_call("recall_remember", {**memory, "value": [{"a": i, "b": "x"}
                                                                                 for i in range(n // 2)]}),
            f"deep_{scale}": tool_call("recall_remember", memory, nested(900, n // 900 - 1)),
            f"invalid_{scale}": tool_call("recall_say", {"thread_id": "thr_x", "messages": [
                f"s{i}" for i in range(n)]}),
            f"extra_keys_{scale}": tool_call("recall_get", {"id": "thr_x", **{f"k{i}": i for i in range(n)}}),
        }
    found["string_8mb"] = tool_call("recall_file_trigger", {"source": "bench", "summary": "a large payload",
                                                            "content_type": "text/plain", "payload": "x" * 8_000_000})
    found["string_mcp"] = tool_call("recall_file_trigger", {"source": "bench", "summary": "a large payload",
                                                            "content_type": "text/plain", "payload": "x" * (size - 400)})
    return found


def probe(url: str, stop: threading.Event, seen: list[tuple[float, float]]) -> None:
    """GET /healthz every 5 ms: when each was sent and how long its answer took."""
    with httpx.Client(base_url=url, timeout=60) as http:
        while not stop.is_set():
            start = time.perf_counter()
            http.get("/healthz")
            seen.append((start, time.perf_counter() - start))
            time.sleep(0.005)


def answered(response: httpx.Response) -> str:
    try:
        found = response.json()
    except ValueError:
        return response.text[:120]
    if "result" in found:
        result = found["result"]
        text = result["content"][0]["text"] if result.get("content") else ""
        return ("tool error: " if result.get("isError") else "result: ") + text[:120]
    if "error" in found:
        return f"JSON-RPC error {found['error']['code']}: {found['error']['message'][:120]}"
    return f"problem {found.get('status')}: {found.get('detail', '')[:120]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--home", type=Path)
    parser.add_argument("--items", type=int, help="keys and array items of the _mcp shapes")
    parser.add_argument("--bytes", type=int, help="bytes of string_mcp")
    args = parser.parse_args()

    home = args.home or Path(tempfile.mkdtemp(prefix="recall-bench-mcp-stall-"))
    home.mkdir(parents=True, exist_ok=True)
    owner = os.environ.get("DATABASE_URL") or embedded.start(home / "data")
    server = ServerProcess(home / "server.log", "--workers", "1", **{**server_env(owner, 8, 1),
                                                                     "RECALL_EMBEDDER": "none"})
    server.start(timeout=120)
    results: dict[str, dict] = {}
    try:
        query(owner, "INSERT INTO tenants (id) VALUES ('bench') ON CONFLICT DO NOTHING")
        key = make_key(owner)
        stop, seen = threading.Event(), []
        prober = threading.Thread(target=probe, args=(server.url, stop, seen))
        prober.start()
        try:
            with httpx.Client(base_url=server.url, timeout=120,
                              headers={**HEADERS, "Authorization": f"Bearer {key}"}) as http:
                http.post("/mcp", content=tool_call("recall_get", {"id": "thr_warm"}))
                time.sleep(1)
                idle = [took for _, took in seen]
                items = args.items or Settings().mcp_max_items
                for name, body in scenarios(items, args.bytes or Settings().mcp_max_body_bytes).items():
                    log(f"{name}: {len(body)} bytes, {args.rounds} rounds")
                    stalls, slowest, status, what = [], 0.0, 0, ""
                    for _ in range(args.rounds):
                        time.sleep(0.2)
                        start = time.perf_counter()
                        response = http.post("/mcp", content=body)
                        took = time.perf_counter() - start
                        time.sleep(0.05)  # the probe's request in flight at the end comes back
                        during = [t for sent, t in seen if start - 0.01 <= sent <= start + took]
                        stalls.append(max(during, default=0.0))
                        slowest = max(slowest, took)
                        status, what = response.status_code, answered(response)
                    results[name] = {"bytes": len(body), "status": status, "answered": what,
                                     "call_ms": round(slowest * 1000, 1),
                                     "probe_slowest_ms": [round(t * 1000, 1) for t in stalls]}
        finally:
            stop.set()
            prober.join()
    finally:
        server.stop()
    print(json.dumps({"probe_idle_slowest_ms": round(max(idle) * 1000, 1), "scenarios": results}, indent=1))


if __name__ == "__main__":
    main()
