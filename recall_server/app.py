"""create_app(settings): the lifespan (pool), the routes, and the one error handler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response, Router, route
from litestar.di import Provide
from litestar.enums import HttpMethod
from litestar.exceptions import (
    HTTPException,
    SerializationException,
    ValidationException,
)
from litestar.datastructures import State
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme

from recall_server import __version__, errors
from recall_server.auth import KeyCache
from recall_server.config import Settings
from recall_server.cursor import CursorCodec
from recall_server.db import queries
from recall_server.db.pool import Database, as_app_role
from recall_server.mcp_http import HttpEndpoint
from recall_server.observability import forget_processes, request_id
from recall_server.openapi import CorrectedJsonPlugin, CorrectedYamlPlugin
from recall_server.process import freeze_heap
from recall_server.routes import (
    Caller,
    RequireKey,
    checkpoints,
    console,
    hooks,
    WholeNumbers,
    keys,
    labels,
    lens,
    memories,
    messages,
    meta,
    reference,
    threads,
    triggers,
    workers,
)
from recall_server.routes import trace as trace_routes
from recall_server.service import Service
from recall_server.service.audit import AuditRequests
from recall_server.service.trace import TraceReads

log = logging.getLogger("recall_server")


def _issue_text(issue: dict[str, Any]) -> str:
    """A parameter's validation message for a person: a cursor is opaque, so one that does not parse is "not a
    cursor this server issued", never the escaped pattern it failed."""
    message = str(issue.get("message", ""))
    if issue.get("key") == "cursor" and "matching regex" in message:
        return "not a cursor this server issued (pass a page's next_cursor unchanged)"
    return message


def _as_problem(request: Request[Any, Any, Any], exc: Exception) -> errors.Problem:
    if isinstance(exc, errors.Problem):
        return exc
    if isinstance(exc, ValidationException):
        issues = exc.extra if isinstance(exc.extra, list) else []
        where = "; ".join(f"{i.get('key', 'body')}: {_issue_text(i)}" for i in issues if isinstance(i, dict))
        return errors.BadRequest(f"{exc.detail}{': ' + where if where else ''}")
    if isinstance(exc, SerializationException):
        return errors.BadRequest(f"The request body is not valid JSON: {exc}")
    if isinstance(exc, HTTPException):
        cls = errors.BY_STATUS.get(exc.status_code)
        if cls is not None and cls not in (errors.Unavailable, errors.Unauthorized):
            detail = exc.detail
            if exc.status_code == 404:
                detail = f"No route matches {request.method} {request.url.path}."
            return cls(detail, headers=dict(exc.headers or {}))
    return errors.as_problem(exc, request.method, request.url.path)


def _problem_response(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    problem = _as_problem(request, exc)
    return Response(
        errors.encode(problem, request.url.path, request_id(request.scope)),
        status_code=problem.status,
        media_type=errors.PROBLEM_JSON,
        headers=problem.headers,
    )


def _options_handlers(handlers: list[Any]) -> list[Any]:
    """One OPTIONS handler per path, advertising every method of the path.

    Litestar's automatic OPTIONS handler only lists the methods of the first handler registered
    for a path (GET /threads and POST /threads are separate handlers), so Allow would lie.
    """
    methods: dict[str, set[str]] = {}
    for handler in handlers:
        for path in handler.paths:
            methods.setdefault(path, {"OPTIONS"}).update(handler.http_methods)
            if "GET" in handler.http_methods:  # head.HeadAsGet answers HEAD wherever GET is
                methods[path].add("HEAD")

    def make(path: str, allow: str) -> Any:
        @route(path, http_method=HttpMethod.OPTIONS, include_in_schema=False, sync_to_thread=False,
               name=f"options:{path}")
        def options() -> Response[None]:
            return Response(None, status_code=204, headers={"Allow": allow})

        return options

    return [make(path, ", ".join(sorted(allowed))) for path, allowed in methods.items()]


async def _sweep_forever(service: Service, interval: float) -> None:
    """Purge expired content periodically (expiry is already enforced on every read; this frees the bytes)."""
    if interval <= 0:
        return
    while True:
        await asyncio.sleep(interval)
        try:
            purged = await service.sweep()
            if purged:
                log.info("sweep purged %d expired objects", purged)
        except Exception:  # a sweep that fails (database down) is retried on the next tick
            log.warning("sweep failed; will retry", exc_info=True)


def create_app(settings: Settings) -> Litestar:
    if not settings.database_url:
        raise ValueError("create_app needs settings.database_url (the CLI starts the embedded database first)")

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        db = await Database.open(
            settings.app_database_url or as_app_role(settings.database_url), min_size=settings.pool_floor,
            max_size=settings.pool_max, timeout=settings.db_timeout, queue_limit=settings.queue_limit,
            queue_wait=settings.queue_wait,
        )
        async with db.connection() as conn:
            secret = await queries.cursor_secret(conn)
        app.state.settings = settings
        app.state.key_cache = KeyCache()  # the key checks this process may rely on for a moment (auth.KeyCache)
        # the indexer's own connection (opened when it first needs one): embedding never holds one a request waits for
        indexer_db = await Database.open(
            settings.app_database_url or as_app_role(settings.database_url), min_size=0, max_size=1,
            timeout=settings.db_timeout, queue_limit=settings.queue_limit, queue_wait=settings.queue_wait,
            name="recall-server indexer")
        app.state.service = service = Service(db, CursorCodec(secret), settings, indexer_db)
        forget_processes(settings.metrics_dir)  # workers that exited before this one started
        background = [asyncio.create_task(_sweep_forever(service, settings.sweep_interval)),
                      asyncio.create_task(db.publish_forever()), asyncio.create_task(service.trace.flush_forever()),
                      asyncio.create_task(service.indexer.run_forever()),  # loads the embedder, then indexes
                      asyncio.create_task(service.extractions.run_forever()),  # with an extractor configured
                      asyncio.create_task(service.admin.record_key_use_forever(app.state.key_cache))]
        try:
            yield
        finally:
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            await service.trace.flush()  # what the last interval buffered (a crash loses at most that)
            await service.extractions.aclose()
            await indexer_db.close()
            await db.close()
            forget_processes(settings.metrics_dir, including_this_one=True)
            log.info("shutdown complete: pool closed")

    # /mcp: the MCP tools over streamable HTTP, in front of the framework (asgi.Mount), checking keys itself
    mcp = HttpEndpoint(settings.max_body_bytes, settings.max_json_items, settings.mcp_allowed_origins,
                       settings.mcp_max_body_bytes, settings.mcp_max_items)
    protected = [*threads.ROUTES, *workers.ROUTES, *triggers.ROUTES, *meta.ROUTES, *keys.ROUTES, *memories.ROUTES,
                 *hooks.ROUTES, *lens.ROUTES, *checkpoints.ROUTES, *messages.ROUTES]
    protected += trace_routes.ROUTES
    app = Litestar(
        route_handlers=[  # our OPTIONS handlers first, so Litestar adds none of its own
            Router("/", route_handlers=[*_options_handlers(protected), *protected],
                   # TraceReads: the recall trace (service/trace.py); AuditRequests: the request audit (service/audit.py)
                   middleware=[RequireKey, TraceReads, AuditRequests, WholeNumbers],
                   security=[{"bearer": []}]),
            *_options_handlers([*meta.PUBLIC, *console.ROUTES, *reference.ROUTES]),
            *meta.PUBLIC,
            *console.ROUTES,
            *reference.ROUTES,  # /docs; the reference itself is under /schema (openapi_router below)  # the console for people: its files are public, its data needs the key it signs in with
            # Webhook deliveries carry no API key (their signature is checked by the service), and
            # GitHub sends up to 25 MB: their own body limit.
            Router("/hooks", route_handlers=hooks.DELIVERIES, request_max_body_size=settings.webhook_max_body_bytes),
        ],
        dependencies={
            "labels": Provide(labels, sync_to_thread=False),
        },
        lifespan=[lifespan, mcp.lifespan],
        on_startup=[freeze_heap],  # after both lifespans, so what they built is frozen too
        exception_handlers={Exception: _problem_response},
        request_max_body_size=settings.max_body_bytes,
        request_class=Caller,
        openapi_config=OpenAPIConfig(
            title="recall-server",
            version=__version__,
            description="The Chain-of-Recall reference graph: exact fetch by stable ID, loud misses, lossless cursors.",
            components=Components(security_schemes={
                "bearer": SecurityScheme(type="http", scheme="bearer", description="API key: rk_<id>.<secret>"),
            }),
            # /schema: the JSON (also at /schema itself), the YAML, and the reference for people (routes/reference.py)
            render_plugins=[CorrectedJsonPlugin(), CorrectedYamlPlugin()],
            openapi_router=reference.schema_router(),
        ),
        debug=False,
        logging_config=None,  # serve configures logging (JSON lines); Litestar must not add its own
        state=State({"mcp": mcp}),
    )
    mcp.bind(app)
    return app
