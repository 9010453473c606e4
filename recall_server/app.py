"""create_app(settings): the lifespan (pool), the routes, and the one error handler."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.exceptions import HTTPException, SerializationException, ValidationException
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin

from recall_server import __version__, config, errors
from recall_server.config import Settings
from recall_server.cursor import CursorCodec
from recall_server.db import queries
from recall_server.db.pool import Database
from recall_server.routes import meta, recall, threads, triggers, workers
from recall_server.service import Recall

log = logging.getLogger("recall_server")


def _as_problem(request: Request[Any, Any, Any], exc: Exception) -> errors.Problem:
    if isinstance(exc, errors.Problem):
        return exc
    if isinstance(exc, ValidationException):
        issues = exc.extra if isinstance(exc.extra, list) else []
        where = "; ".join(f"{i.get('key', 'body')}: {i.get('message', '')}" for i in issues if isinstance(i, dict))
        return errors.BadRequest(f"{exc.detail}{': ' + where if where else ''}")
    if isinstance(exc, SerializationException):
        return errors.BadRequest(f"The request body is not valid JSON: {exc}")
    if isinstance(exc, HTTPException):
        cls = errors.BY_STATUS.get(exc.status_code)
        if cls is not None and cls is not errors.Unavailable:
            detail = exc.detail
            if exc.status_code == 404:
                detail = f"No route matches {request.method} {request.url.path}."
            return cls(detail, headers=dict(exc.headers or {}))
    if isinstance(exc, asyncpg.PostgresError):
        mapped = errors.from_sqlstate(exc.sqlstate, str(exc))
        if mapped is not None:
            return mapped
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return errors.Problem("An unexpected error occurred; it has been logged.")


def _problem_response(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    problem = _as_problem(request, exc)
    return Response(
        errors.encode(problem, request.url.path),
        status_code=problem.status,
        media_type=errors.PROBLEM_JSON,
        headers=problem.headers,
    )


def create_app(settings: Settings) -> Litestar:
    if not settings.database_url:
        raise ValueError("create_app needs settings.database_url (the CLI starts the embedded database first)")

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        db = await Database.open(
            settings.database_url, min_size=settings.pool_min, max_size=settings.pool_max,
            timeout=settings.db_timeout,
        )
        async with db.connection() as conn:
            secret = await queries.cursor_secret(conn)
        app.state.recall = Recall(db, CursorCodec(secret))
        try:
            yield
        finally:
            await db.close()

    return Litestar(
        route_handlers=[*threads.ROUTES, *workers.ROUTES, *triggers.ROUTES, *meta.ROUTES],
        dependencies={"recall": Provide(recall, sync_to_thread=False)},
        lifespan=[lifespan],
        exception_handlers={Exception: _problem_response},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="recall-server",
            version=__version__,
            description="The Chain-of-Recall reference graph: exact fetch by stable ID, loud misses, lossless cursors.",
            path="/schema",
            render_plugins=[JsonRenderPlugin()],
        ),
        debug=False,
    )


def from_env() -> Litestar:
    """The ASGI factory worker processes import: settings come from the environment the CLI set."""
    return create_app(config.load())
