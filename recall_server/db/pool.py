"""The connection pool, and the one place that turns "cannot reach the database" into a 503."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from recall_server.auth import SCOPES, Credential
from recall_server.db import queries
from recall_server.errors import Forbidden, Unauthorized, Unavailable

_UNREACHABLE = (OSError, asyncio.TimeoutError, asyncpg.PostgresConnectionError,
                asyncpg.CannotConnectNowError, asyncpg.ConnectionDoesNotExistError)


APP_ROLE = "recall_app"


def as_app_role(dsn: str) -> str:
    """The owner's DSN with the user swapped for recall_app (no password: trust/peer auth, as embedded).

    On a server that wants a password, set RECALL_APP_DATABASE_URL instead.
    """
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{APP_ROLE}@{host}"))


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
    async def session(self, cred: Credential, scope: str) -> AsyncIterator[tuple[asyncpg.Connection, str]]:
        """A connection bound to the key's tenant: (connection, tenant). 401 unknown/revoked, 403 scope."""
        async with self.connection() as conn:
            found = await queries.authenticate(conn, cred.key_id, cred.secret_sha256)
            if found is None:
                raise Unauthorized("The API key is unknown or has been revoked.")
            tenant, granted = found
            if SCOPES[granted] < SCOPES[scope]:
                raise Forbidden(f"This key has {granted} scope; this operation needs {scope}.")
            yield conn, tenant
