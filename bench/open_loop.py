"""An open-loop (constant-rate) load generator: latency at a given offered load, free of coordinated omission.

wrk keeps N requests in flight and sends the next only when one returns, so a slow response also
delays the requests behind it and they are never counted as late (coordinated omission). wrk2
(`wrk -R`) fixes that but is not packaged in Debian; this is the same idea in ~150 lines: request i
is due at t0 + i/rate, is sent on an idle keep-alive connection (a new one is opened when none is
idle, up to `max_connections`; past that it waits), and its latency is measured from when it was
due, not from when it was sent. A "request" may be a chain of GETs (the three-hop recall), timed
from the first one's due time to the last one's answer.

Raw HTTP/1.1 over asyncio streams (no client library in the hot path), on uvloop when present. The
generator reports how late it sent (send lag): if that grows, the generator, not the server, was
the bottleneck, and the figures say so.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from urllib.parse import urlsplit


# A keep-alive connection idle this long is closed instead of reused, as httpx does (keepalive_expiry): the
# server closes one idle for its header timeout (10 s), and a request sent on it just then fails.
KEEPALIVE_EXPIRY = 5.0


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.idle_since = time.perf_counter()

    async def get(self, head: bytes) -> int:
        self.writer.write(head)
        status_line = await self.reader.readuntil(b"\r\n")
        length = 0
        while True:
            line = await self.reader.readuntil(b"\r\n")
            if line == b"\r\n":
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if length:
            await self.reader.readexactly(length)
        return int(status_line.split(b" ", 2)[1])


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def _run(url: str, key: str, chain: Callable[[int], list[str]], rate: float, duration: float,
               max_connections: int, warm_connections: int) -> dict:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    auth = f"Authorization: Bearer {key}\r\n".encode()

    def head(path: str) -> bytes:
        return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n".encode() + auth + b"\r\n"

    idle: list[_Conn] = []
    opened = 0
    free = asyncio.Condition()
    latencies: list[float] = []
    lags: list[float] = []
    errors = 0
    statuses: dict[int, int] = {}

    async def take() -> _Conn:
        nonlocal opened
        async with free:
            while not idle and opened >= max_connections:
                await free.wait()
            while idle:
                conn = idle.pop()
                if time.perf_counter() - conn.idle_since < KEEPALIVE_EXPIRY:
                    return conn
                conn.writer.close()  # the server may have closed it (its keep-alive timeout): never reuse it
                opened -= 1
            opened += 1
        return _Conn(*await asyncio.open_connection(host, port))

    async def give(conn: _Conn | None) -> None:
        nonlocal opened
        async with free:
            if conn is None:
                opened -= 1
            else:
                conn.idle_since = time.perf_counter()
                idle.append(conn)
            free.notify()

    async def one(i: int, due: float) -> None:
        nonlocal errors
        conn = await take()
        if i >= warmup:
            lags.append(time.perf_counter() - due)
        try:
            for path in chain(i):
                status = await conn.get(head(path))
                statuses[status] = statuses.get(status, 0) + 1
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
            conn.writer.close()
            await give(None)
            return
        if i >= warmup:
            latencies.append(time.perf_counter() - due)
        await give(conn)

    # Connections opened before the clock starts (a client that has been running a while has them), and
    # two first seconds at the rate whose samples are dropped: neither a cold start nor connection set-up
    # is what "latency at this load" means.
    for _ in range(min(max_connections, warm_connections)):
        idle.append(_Conn(*await asyncio.open_connection(host, port)))
        opened += 1
    tasks: set[asyncio.Task] = set()
    warmup = int(2 * rate)
    total = int(rate * duration) + warmup
    t0 = time.perf_counter() + 0.05
    for i in range(total):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=60)
    elapsed = time.perf_counter() - t0 - warmup / rate
    for conn in idle:
        conn.writer.close()
    latencies.sort()
    lags.sort()
    ms = 1000.0
    return {
        "offered_rps": round(rate, 1), "achieved_rps": round(len(latencies) / elapsed, 1),
        "requests": total - warmup, "completed": len(latencies), "errors": errors,
        "non2xx": sum(n for s, n in statuses.items() if not 200 <= s < 300),
        "p50_ms": round(_percentile(latencies, 0.50) * ms, 2), "p99_ms": round(_percentile(latencies, 0.99) * ms, 2),
        "p999_ms": round(_percentile(latencies, 0.999) * ms, 2), "max_ms": round(latencies[-1] * ms, 2)
        if latencies else None,
        "send_lag_p99_ms": round(_percentile(lags, 0.99) * ms, 2), "connections": opened,
    }


def open_loop(url: str, key: str, chain: Callable[[int], list[str]], rate: float, duration: float = 10.0,
              max_connections: int = 256, warm_connections: int = 16) -> dict:
    """Offer `rate` chains per second for `duration` seconds; latency percentiles from each chain's due time."""
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    # The generator's own collector stays off while it times requests: a full collection of the bench
    # process (15-20 ms) would delay reading the answers in flight and be counted as the server's latency.
    gc.collect()
    gc.disable()
    try:
        return runner(_run(url, key, chain, rate, duration, max_connections, warm_connections))
    finally:
        gc.enable()
