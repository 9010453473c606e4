"""Fault-injection helpers: a TCP proxy in front of PostgreSQL that can refuse or black-hole,
and a row lock held from outside the server to keep requests in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qs, urlsplit, urlunsplit

import asyncpg


class PostgresProxy:
    """127.0.0.1:<port> -> the real server. `cut()` kills every connection and refuses new ones;
    `blackhole()` accepts connections and never answers; `restore()` forwards again."""

    def __init__(self, database_url: str) -> None:
        parts = urlsplit(database_url)
        socket_dir = parse_qs(parts.query).get("host", [None])[0]
        self.unix_path = f"{socket_dir}/.s.PGSQL.{parts.port or 5432}" if socket_dir else None
        self.target = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.mode = "forward"
        self.loop = asyncio.new_event_loop()
        self.writers: set[asyncio.StreamWriter] = set()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(10)
        netloc = f"{parts.username or 'postgres'}@127.0.0.1:{self.port}"
        self.url = urlunsplit(parts._replace(netloc=netloc, query=""))

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        ready.set()
        self.loop.run_forever()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.close()
            return
        self.writers.add(writer)
        if self.mode == "blackhole":
            await reader.read()  # hold the connection open, say nothing
            return
        try:
            if self.unix_path:
                up_reader, up_writer = await asyncio.open_unix_connection(self.unix_path)
            else:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.writers.add(up_writer)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def _set(self, mode: str) -> None:
        async def apply() -> None:
            self.mode = mode
            if mode != "forward":
                for w in list(self.writers):
                    w.transport.abort()
                self.writers.clear()

        asyncio.run_coroutine_threadsafe(apply(), self.loop).result(10)

    def cut(self) -> None:
        self._set("refuse")

    def blackhole(self) -> None:
        self._set("blackhole")

    def restore(self) -> None:
        self._set("forward")

    def close(self) -> None:
        self._set("refuse")
        self.loop.call_soon_threadsafe(self.loop.stop)


@contextmanager
def thread_row_locked(database_url: str, tenant: str, thread_id: str) -> Iterator[threading.Event]:
    """Hold the thread's row lock (as the owner) until the yielded event is set, or the block ends.

    Appends to that thread then wait inside the server, each holding a pooled connection.
    """
    release = threading.Event()
    locked = threading.Event()

    async def hold() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            async with conn.transaction():
                await conn.execute("SELECT 1 FROM threads WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
                                   tenant, thread_id)
                locked.set()
                while not release.is_set():
                    await asyncio.sleep(0.02)
        finally:
            await conn.close()

    holder = threading.Thread(target=asyncio.run, args=(hold(),), daemon=True)
    holder.start()
    locked.wait(10)
    try:
        yield release
    finally:
        release.set()
        holder.join(10)


@contextmanager
def backends_stopped(database_url: str, role: str = "recall_app") -> Iterator[set[int]]:
    """SIGSTOP every backend of `role` (found as the owner in pg_stat_activity), and each new one
    within 0.1 s, for the block: a database that accepts connections and then never answers.
    SIGCONT on the way out, always."""
    stopped: set[int] = set()
    done = threading.Event()

    async def stop_new() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            while True:
                for (pid,) in await conn.fetch("SELECT pid FROM pg_stat_activity WHERE usename = $1", role):
                    if pid not in stopped:
                        stopped.add(pid)
                        os.kill(pid, signal.SIGSTOP)
                if done.is_set():
                    return
                await asyncio.sleep(0.1)
        finally:
            await conn.close()

    stopper = threading.Thread(target=asyncio.run, args=(stop_new(),), daemon=True)
    stopper.start()
    try:
        time.sleep(0.3)
        yield stopped
    finally:
        done.set()
        stopper.join(10)
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


__all__ = ["PostgresProxy", "backends_stopped", "thread_row_locked", "rss_kib"]
