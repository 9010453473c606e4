"""The connection pool, and the one place that turns "cannot reach the database" into a 503."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from recall_server.errors import Unavailable

_UNREACHABLE = (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError,
                asyncpg.CannotConnectNowError, asyncpg.ConnectionDoesNotExistError)


class Database:
    def __init__(self, pool: asyncpg.Pool, timeout: float) -> None:
        self.pool = pool
        self.timeout = timeout

    @classmethod
    async def open(cls, dsn: str, *, min_size: int, max_size: int, timeout: float) -> Database:
        pool = await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, timeout=timeout, command_timeout=timeout,
            max_inactive_connection_lifetime=60,
        )
        return cls(pool, timeout)

    async def close(self) -> None:
        await asyncio.wait_for(self.pool.close(), timeout=self.timeout)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection; waiting too long for one, or losing it, is a 503."""
        try:
            async with self.pool.acquire(timeout=self.timeout) as conn:
                yield conn
        except _UNREACHABLE as exc:
            raise Unavailable("The database is unavailable or overloaded; retry shortly.") from exc

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        async with self.connection() as conn, conn.transaction():
            yield conn
