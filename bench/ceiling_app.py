"""The benchmark's ceilings as their own tiny app, run next to the real server and never part of it.

    python bench/ceiling_app.py serve --port PORT [--workers N] [--http granian|uvicorn]   (DATABASE_URL: the owner's DSN)

GET /constant      the HTTP ceiling: the same framework, ASGI server, worker count and observability
                   wrapper as `recall-server serve`, no database.
GET /pk/{id}       the stack's fetch ceiling: one primary-key SELECT of a thread row of tenant `bench`
                   through an asyncpg pool as recall_app (tenant bound in the same statement, as
                   every read of the server is), returned as JSON.
GET /asgi/pk/{id}  the same fetch answered in plain ASGI in front of the framework, as the server's
                   direct.Direct answers GET /threads/{id}: the fetch ceiling without the framework.
POST /asgi/insert  the stack's write ceiling: the request body, as it came, inserted as one row of
                   bench_write_ceiling (bench/run.py creates it) through the same pool, tenant bound
                   in the same statement, one durable commit per request; answered in plain ASGI, as
                   the server's direct.Direct answers POST /triggers.
GET /readyz        the pool answers (so recall_server.process.ServerProcess can start it).

It reads tenant `bench` without a key, which is why it lives in bench/: recall_server has no route
that reads without one.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
from litestar import Litestar, Request, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recall_server import config  # noqa: E402
from recall_server.db.pool import as_app_role  # noqa: E402
from recall_server.limits import read_body  # noqa: E402
from recall_server.observability import ObservabilityMiddleware  # noqa: E402
from recall_server.process import freeze_heap  # noqa: E402

TENANT = "bench"

# The tenant bound transaction-locally in the same statement as the read, as the server's GETs do;
# without it row-level security hides the row and the ceiling would measure a cheaper miss.
PK_SELECT = """
    SELECT t.* FROM (SELECT set_config('app.tenant_id', $2, true)) s, LATERAL (
      SELECT id, title, summary, status, updated_at FROM threads WHERE tenant_id = $2 AND id = $1 OFFSET 0) t
"""


# The write ceiling's statement: a primary key from an identity, the body as bytes, nothing else.
INSERT = """
    INSERT INTO bench_write_ceiling (body)
    SELECT $1 FROM (SELECT set_config('app.tenant_id', $2, true)) s RETURNING id
"""


async def _reset(conn: asyncpg.Connection) -> None:
    # The server's pool skips asyncpg's RESET ALL round trip too (it keeps no session state).
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


@get("/constant", sync_to_thread=False)
def constant() -> dict[str, str]:
    return {"status": "ok"}


@get("/pk/{thread_id:str}")
async def pk(thread_id: FromPath[str], request: Request[Any, Any, Any]) -> dict[str, Any]:
    async with request.app.state.pool.acquire() as conn:
        row = await conn.fetchrow(PK_SELECT, thread_id, TENANT)
    if row is None:
        raise NotFoundException(f"{thread_id} not found")
    return dict(row)


@get("/readyz")
async def readyz(request: Request[Any, Any, Any]) -> dict[str, str]:
    async with request.app.state.pool.acquire() as conn:
        await conn.fetchval("SELECT 1")
    return {"status": "ready"}


def create_app(app_dsn: str, pool_min: int, pool_max: int) -> Litestar:
    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        app.state.pool = await asyncpg.create_pool(app_dsn, min_size=pool_min, max_size=pool_max, reset=_reset)
        try:
            yield
        finally:
            await app.state.pool.close()

    return Litestar([constant, pk, readyz], lifespan=[lifespan], on_startup=[freeze_heap],  # as the server does
                    debug=False, logging_config=None, openapi_config=None)


class PlainFetch:
    """GET /asgi/pk/{id} and POST /asgi/insert without the framework; everything else to it."""

    PREFIX = "/asgi/pk/"

    def __init__(self, app: Litestar) -> None:
        self.app = app
        self.encode = msgspec.json.Encoder().encode

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope["path"] if scope["type"] == "http" else ""
        if path == "/asgi/insert":
            scope["path_template"] = path
            body = await read_body(receive)  # as direct.Direct reads a POST /triggers body
            async with self.app.state.pool.acquire() as conn:
                new_id = await conn.fetchval(INSERT, body, TENANT)
            status, body = 201, self.encode({"id": new_id})
        elif path.startswith(self.PREFIX):
            scope["path_template"] = "/asgi/pk/{thread_id}"
            async with self.app.state.pool.acquire() as conn:
                row = await conn.fetchrow(PK_SELECT, path[len(self.PREFIX):], TENANT)
            status, body = (404, b'{"detail":"not found"}') if row is None else (200, self.encode(dict(row)))
        else:
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def from_env() -> ObservabilityMiddleware:
    """The ASGI factory the worker processes import (the server wraps its app the same way)."""
    settings = config.load()  # the server's DSN, pool size and floor, from the same environment
    dsn = settings.app_database_url or as_app_role(settings.database_url)
    return ObservabilityMiddleware(PlainFetch(create_app(dsn, settings.pool_floor, settings.pool_max)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--http", choices=["granian", "uvicorn"], default=os.environ.get("BENCH_HTTP", "granian"),
                        help="granian: the server `recall-server serve` runs (default); uvicorn: to compare")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent
    if args.http == "uvicorn":
        import uvicorn

        uvicorn.run("ceiling_app:from_env", factory=True, host=args.host, port=args.port, workers=args.workers,
                    loop="uvloop", http="httptools", log_level="warning", access_log=False, proxy_headers=False,
                    server_header=False, app_dir=str(here))
        return
    # The same server and settings as `recall-server serve` (recall_server/cli.py _granian).
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.server import Server

    from recall_server.config import Settings

    settings = Settings()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(here), os.environ.get("PYTHONPATH")]))
    Server(
        "ceiling_app:from_env", factory=True, interface=Interfaces.ASGI, address=args.host, port=args.port,
        workers=args.workers, loop=Loops.uvloop, http=HTTPModes.http1, websockets=False,
        backpressure=settings.max_connections,
        http1_settings=HTTP1Settings(header_read_timeout=int(settings.header_timeout * 1000),
                                     max_buffer_size=settings.max_header_bytes),
        log_access=False, workers_kill_timeout=10,
    ).serve()


if __name__ == "__main__":
    main()
