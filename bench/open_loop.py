"""An open-loop (constant-rate) load generator: latency at a given offered load, free of coordinated omission.

wrk keeps N requests in flight and sends the next only when one returns, so a slow response also
delays the requests behind it and they are never counted as late (coordinated omission). wrk2
(`wrk -R`) fixes that but is not packaged in Debian; this is the same idea in ~150 lines: request i
is due at t0 + i/rate, is sent on an idle keep-alive connection (a new one is opened when none is
idle, up to `max_connections`; past that it waits), and its latency is measured from when it was
due, not from when it was sent. A "request" may be a chain of GETs (the three-hop recall), timed
from the first one's due time to the last one's answer.

Raw HTTP/1.1 on asyncio protocol callbacks, on uvloop when present: no task, lock or stream per
request. At 3,000 GETs/s on this 2-core machine it costs 49 µs of CPU a request, most of it the
socket writes, where asyncio streams and a task per request cost 65-68 µs: CPU that the server it
measures shares. A request is never sent before it is due. The loop's timers have a resolution of
a millisecond, so the scheduler sleeps at least that long and then sends everything due: requests
leave up to ~1 ms late (median 0.6 ms at that rate), and the lateness counts in their latency. (The
streams version slept for whatever was left and then sent: 44% of requests left early, by up to
0.73 ms, which understated their latency.) The generator reports how late it sent (send lag): if
that grows, the generator, not the server, was the bottleneck, and the figures say so.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import urlsplit

# A keep-alive connection idle this long is closed instead of reused, as httpx does (keepalive_expiry): the
# server closes one idle for its header timeout (10 s), and a request sent on it just then fails.
KEEPALIVE_EXPIRY = 5.0


class _Conn(asyncio.Protocol):
    """One keep-alive connection with at most one request in flight; answers need a Content-Length."""

    def __init__(self, load: _Load) -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.job: tuple[int, float] | None = None  # (request number, due time) of the chain in flight
        self.step = 0  # which GET of the chain is in flight
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.load.opened_one(self)

    def send(self, job: tuple[int, float], step: int) -> None:
        self.job, self.step = job, step
        self.transport.write(self.load.head(job[0], step))  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buffer[:end]).lower()
        length, at = 0, head.find(b"\r\ncontent-length:")
        if at >= 0:
            stop = head.find(b"\r\n", at + 17)
            length = int(head[at + 17:stop if stop >= 0 else None])
        if len(self.buffer) < end + 4 + length:
            return
        status = int(head[9:12])
        del self.buffer[:end + 4 + length]
        self.load.answered(self, status)

    def connection_lost(self, exc: Exception | None) -> None:
        self.load.lost(self)


class _Load:
    def __init__(self, host: str, port: int, key: str, chain: Callable[[int], list[str]], rate: float,
                 max_connections: int) -> None:
        self.host, self.port, self.max_connections = host, port, max_connections
        self.auth = f"\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
        self.chain = chain
        self.chains: dict[int, list[bytes]] = {}  # request number -> its GETs' bytes, built when first sent
        self.idle: list[_Conn] = []
        self.waiting: deque[tuple[int, float]] = deque()  # due, and no connection free yet
        self.opened = self.opening = 0
        self.warmup = int(2 * rate)
        self.latencies: list[float] = []
        self.lags: list[float] = []
        self.statuses: dict[int, int] = {}
        self.errors = 0
        self.outstanding = 0
        self.drained: asyncio.Future[None] | None = None

    def head(self, i: int, step: int) -> bytes:
        heads = self.chains.get(i)
        if heads is None:
            heads = self.chains[i] = [b"GET " + path.encode() + b" HTTP/1.1" + self.auth for path in self.chain(i)]
        return heads[step]

    def due(self, job: tuple[int, float]) -> None:
        self.outstanding += 1
        now = time.perf_counter()
        while self.idle:
            conn = self.idle.pop()
            if now - conn.idle_since < KEEPALIVE_EXPIRY:
                self.begin(conn, job, now)
                return
            conn.transport.close()  # the server may have closed it (its keep-alive timeout): never reuse it
        self.waiting.append(job)
        self.open_if_allowed()

    def begin(self, conn: _Conn, job: tuple[int, float], now: float) -> None:
        if job[0] >= self.warmup:
            self.lags.append(now - job[1])
        conn.send(job, 0)

    def open_if_allowed(self) -> None:
        if len(self.waiting) > self.opening and self.opened + self.opening < self.max_connections:
            self.opening += 1
            task = asyncio.get_running_loop().create_task(self.open())
            task.add_done_callback(lambda t: t.exception())  # an open that failed is counted in open()

    async def open(self) -> None:
        try:
            await asyncio.get_running_loop().create_connection(lambda: _Conn(self), self.host, self.port)
        except OSError:  # one waiting request fails with it; the next may try again
            self.opening -= 1
            if self.waiting:
                self.finish(self.waiting.popleft(), error=True)
            self.open_if_allowed()

    def opened_one(self, conn: _Conn) -> None:
        self.opening -= 1  # every connect counts itself in `opening` first
        self.opened += 1
        self.next(conn)

    def next(self, conn: _Conn) -> None:
        if self.waiting:
            self.begin(conn, self.waiting.popleft(), time.perf_counter())
        else:
            conn.job, conn.idle_since = None, time.perf_counter()
            self.idle.append(conn)

    def answered(self, conn: _Conn, status: int) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        job = conn.job
        if job is None:  # unasked (a server closing an idle connection may say why first)
            return
        if conn.step + 1 < len(self.chains[job[0]]):
            conn.send(job, conn.step + 1)
            return
        self.finish(job)
        self.next(conn)

    def lost(self, conn: _Conn) -> None:
        self.opened -= 1
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.job is not None:  # closed with a request in flight
            self.finish(conn.job, error=True)
            conn.job = None
        self.open_if_allowed()

    def finish(self, job: tuple[int, float], error: bool = False) -> None:
        i, due = job
        self.chains.pop(i, None)
        if error:
            self.errors += 1
        elif i >= self.warmup:
            self.latencies.append(time.perf_counter() - due)
        self.outstanding -= 1
        if self.outstanding == 0 and self.drained is not None and not self.drained.done():
            self.drained.set_result(None)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


async def _run(url: str, key: str, chain: Callable[[int], list[str]], rate: float, duration: float,
               max_connections: int, warm_connections: int) -> dict:
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    load = _Load(parts.hostname or "127.0.0.1", parts.port or 80, key, chain, rate, max_connections)
    # Connections opened before the clock starts (a client that has been running a while has them), and
    # two first seconds at the rate whose samples are dropped: neither a cold start nor connection set-up
    # is what "latency at this load" means.
    for _ in range(min(max_connections, warm_connections)):
        load.opening += 1
        await loop.create_connection(lambda: _Conn(load), load.host, load.port)
    total = int(rate * duration) + load.warmup
    t0 = time.perf_counter() + 0.05
    i = 0
    while i < total:  # every request due by now goes out; then sleep until the next one is due
        now = time.perf_counter()
        while i < total and t0 + i / rate <= now:
            load.due((i, t0 + i / rate))
            i += 1
        if i < total:  # at least a millisecond: the loop's timers have that resolution, and less would spin
            await asyncio.sleep(max(0.001, t0 + i / rate - time.perf_counter()))
    if load.outstanding:
        load.drained = loop.create_future()
        try:
            await asyncio.wait_for(load.drained, timeout=60)
        except TimeoutError:
            pass
    elapsed = time.perf_counter() - t0 - load.warmup / rate
    connections = load.opened
    for conn in list(load.idle):
        conn.transport.close()
    latencies, lags = sorted(load.latencies), sorted(load.lags)
    ms = 1000.0
    failed = {str(s): n for s, n in sorted(load.statuses.items()) if not 200 <= s < 300}
    return {
        "offered_rps": round(rate, 1), "achieved_rps": round(len(latencies) / elapsed, 1),
        "requests": total - load.warmup, "completed": len(latencies), "errors": load.errors,
        "non2xx": sum(failed.values()), **({"non2xx_by_status": failed} if failed else {}),
        "p50_ms": round(_percentile(latencies, 0.50) * ms, 2), "p99_ms": round(_percentile(latencies, 0.99) * ms, 2),
        "p999_ms": round(_percentile(latencies, 0.999) * ms, 2), "max_ms": round(latencies[-1] * ms, 2)
        if latencies else None,
        "send_lag_p99_ms": round(_percentile(lags, 0.99) * ms, 2),
        "send_lag_max_ms": round(lags[-1] * ms, 2) if lags else None, "connections": connections,
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
