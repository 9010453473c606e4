"""The connection pool, and the one place that turns "cannot reach the database" into a 503."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import ClassVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from recall_server.errors import Unavailable
from recall_server.observability import DB_ERRORS, POOL

# Connection-level failures: the server is down, restarting, unreachable or gone away mid-query.
_UNREACHABLE = (OSError, asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError)


APP_ROLE = "recall_app"

# No NOTICEs to the server: nothing reads them, and each costs both ends. A payload with a token longer
# than to_tsvector's limit (a base64 blob) sent one per trigger, "word is too long to be indexed":
# ~19 us of database time per row on bench ingest_4k, before asyncpg parsed it. Warnings and errors
# still come; the database's own log is set apart (log_min_messages).
# No JIT: every statement here is an index lookup or a bounded page, the short queries JIT slows down. A plan
# priced past jit_above_cost compiles on every execution: a sort forbidden by enable_sort is priced at ~1e10,
# and the semantic arm's walk with its sort in one statement spent 1.1 s a search compiling where PostgreSQL
# has LLVM (Debian's) to run for 15 ms.
SESSION = {"client_min_messages": "warning", "jit": "off"}

# What connections to a Citus coordinator ask for at connect, beside SESSION:
SHARDED_SESSION = {
    # asyncpg looks up each type it has no codec for (bigint[], timestamptz[]) once per connection, with a
    # query joining pg_type to pg_class. Citus hides shards from clients by filtering pg_class through a
    # function, row by row, which took that lookup from ~20 ms to 500-800 ms, inside a request's transaction:
    # a retraction's under its thread's row lock, so eight at once on fresh connections queued past the
    # statement timeout (tests/test_messages.py, concurrent pops). The server lists no tables: it sees shards.
    "citus.override_table_visibility": "off",
}

SHARDED = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"


async def is_sharded(conn: asyncpg.Connection) -> bool:
    """Whether the store is a Citus coordinator (the citus extension exists in its database)."""
    return bool(await conn.fetchval(SHARDED))


def as_app_role(dsn: str) -> str:
    """The owner's DSN with the user swapped for recall_app (no password: trust/peer auth, as embedded).

    On a server that wants a password, set RECALL_APP_DATABASE_URL instead.
    """
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{APP_ROLE}@{host}"))


async def _reset(conn: asyncpg.Connection) -> None:
    """What a connection needs before going back to the pool: nothing but an unfinished transaction undone.

    asyncpg's default (RESET ALL, CLOSE ALL, UNLISTEN, advisory unlock) costs a round trip per
    request; the server keeps no session state to reset: the tenant is bound with SET LOCAL,
    advisory locks are transaction-scoped, and there are no cursors or LISTENs.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


class Connection(asyncpg.Connection):
    """A connection to a store on one node. `sharded` says which form of a statement to run: each
    statement that differs on Citus has both, in the module that owns it (tenancy.Keyed, and the steps
    of the queries modules)."""

    sharded: ClassVar[bool] = False


class ShardedConnection(Connection):
    """A connection to a Citus coordinator: tenancy binds the tenant so that it reaches the workers."""

    sharded: ClassVar[bool] = True


async def connect(dsn: str, **kw: object) -> Connection:
    """One connection of the right class for the store (the operator's commands, migrations)."""
    conn: Connection = await asyncpg.connect(dsn, connection_class=Connection, **kw)  # type: ignore[arg-type]
    if await is_sharded(conn):
        await conn.close()
        conn = await asyncpg.connect(dsn, connection_class=ShardedConnection,  # type: ignore[arg-type]
                                     server_settings=SHARDED_SESSION, **kw)
    return conn


def _closed(conn: asyncpg.Connection) -> bool:
    """Whether the connection is closed; a proxy asyncpg already released (closing it) counts as closed."""
    try:
        return conn.is_closed()
    except asyncpg.InterfaceError:
        return True


class Database:
    """The pool, with a queue bounded in time and in count: a request that finds every connection
    busy gets 503 at once when the request waiting longest has already waited `queue_wait` seconds,
    or when `queue_limit` requests already wait, instead of piling up.

    Time first: what a count of waiters means depends on how fast they are served (64 was 30-55 ms of
    work at 2,300 GETs/s here, and shed on any stall longer than that), what a wait means does not.
    Under an overload the queue holds about `queue_wait` seconds of work; a stall shorter than that
    is ridden out. The count is the backstop on what waiting requests hold."""

    def __init__(self, pool: asyncpg.Pool, timeout: float, queue_limit: int, queue_wait: float,
                 sharded: bool = False) -> None:
        self.pool = pool
        self.sharded = sharded  # a Citus coordinator: its connections are ShardedConnections
        self.timeout = timeout
        self.queue_limit = queue_limit
        self.queue_wait = queue_wait
        self.taken = 0  # requests holding a connection or waiting for one (asyncpg's idle count walks the pool)
        self.waiting: deque[float] = deque()  # when each request now waiting began to (loop time), oldest first

    @classmethod
    async def open(cls, dsn: str, *, min_size: int, max_size: int, timeout: float, queue_limit: int,
                   queue_wait: float, name: str = "recall-server") -> Database:
        """`name`: the connections' application_name, as pg_stat_activity shows it."""
        # A Citus coordinator is recognised once, here: its connections say so (Connection.sharded).
        probe = await asyncpg.connect(dsn, timeout=timeout)
        try:
            sharded = await is_sharded(probe)
        finally:
            await probe.close()
        # min_size connections are opened here and kept (asyncpg >= 0.32 restores that floor after a loss,
        # and closes only connections above it that idled for a minute).
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, timeout=timeout, command_timeout=timeout,
            max_inactive_connection_lifetime=60, reset=_reset,
            server_settings={**SESSION, **(SHARDED_SESSION if sharded else {}), "application_name": name},
            connection_class=ShardedConnection if sharded else Connection,
        )
        return cls(pool, timeout, queue_limit, queue_wait, sharded)

    async def close(self) -> None:
        await asyncio.wait_for(self.pool.close(), timeout=self.timeout)

    async def publish_forever(self, interval: float = 1.0) -> None:
        """Publish the pool gauges every `interval` seconds, so a scrape sees them at most that old.

        Not on every acquire and release: with worker processes each gauge set is a write to a
        memory-mapped file, and six of them per request showed in the profile.
        """
        while True:
            size, idle = self.pool.get_size(), self.pool.get_idle_size()
            POOL.labels("in_use").set(size - idle)
            POOL.labels("idle").set(idle)
            POOL.labels("waiting").set(len(self.waiting))
            await asyncio.sleep(interval)

    def _unavailable(self, reason: str, detail: str) -> Unavailable:
        DB_ERRORS.labels(reason).inc()
        return Unavailable(detail)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection; a full queue, waiting too long, or losing the database is a 503."""
        size = self.pool.get_max_size()
        if self.taken >= size and (self.taken >= size + self.queue_limit or (
                self.waiting and asyncio.get_running_loop().time() - self.waiting[0] >= self.queue_wait)):
            raise self._unavailable("overloaded", "The server is at capacity; retry shortly.")
        self.taken += 1
        try:
            try:
                # While no more requests hold or wait for a connection than the pool has, one is in its
                # queue for this request: nothing to wait for (opening it is bounded by the connect
                # timeout), and no timer to arm.
                if self.taken <= size:
                    conn = await self.pool.acquire()
                else:
                    since = asyncio.get_running_loop().time()
                    self.waiting.append(since)
                    try:
                        async with asyncio.timeout(self.timeout):  # not acquire(timeout=): a task per call
                            conn = await self.pool.acquire()
                    finally:
                        self.waiting.remove(since)  # equal times are alike; this one is nearly always first
            except asyncio.TimeoutError:
                raise self._unavailable("timeout",
                                        "No database connection became free in time; retry shortly.") from None
            except _UNREACHABLE:
                await self.pool.expire_connections()
                raise self._unavailable("unreachable", "The database is unavailable; retry shortly.") from None
            broken = False  # timed out or lost: not worth a ROLLBACK round trip to a server that may be stalled
            try:
                yield conn
            except asyncio.TimeoutError:
                broken = True
                raise self._unavailable("timeout", "The database did not answer in time; retry shortly.") from None
            except (*_UNREACHABLE, asyncpg.InterfaceError, asyncpg.InternalClientError) as exc:
                if isinstance(exc, asyncpg.InterfaceError) and not _closed(conn):
                    raise  # a programming error on a live connection is a bug (500), not an outage
                # InternalClientError ("another operation is in progress"): the protocol state of a
                # connection whose backend was terminated under it; the connection is unusable.
                broken = True
                # Connections opened before an outage are dead: replace them all, not one request at a time.
                await self.pool.expire_connections()
                raise self._unavailable("unreachable",
                                        "The database connection was lost; retry shortly.") from None
            finally:
                # asyncpg may already have closed and released it (a timed-out ROLLBACK or reset terminates
                # the connection); then any call on the proxy, terminate() included, raises InterfaceError,
                # which must not turn the 503 into a 500.
                with contextlib.suppress(asyncpg.InterfaceError):
                    if broken:
                        conn.terminate()  # close the socket now; the pool opens a fresh connection when needed
                with contextlib.suppress(Exception):  # a failed reset: asyncpg terminated it, nothing to hand back
                    await self.pool.release(conn, timeout=self.timeout)
        finally:
            self.taken -= 1

