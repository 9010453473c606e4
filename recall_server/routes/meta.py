"""ID resolution and health probes."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.params import FromPath

from recall_server.models import Health, Resolved
from recall_server.observability import METRICS_CONTENT_TYPE, metrics_body
from recall_server.routes import Caller, problems


@get("/ids/{object_id:str}", responses=problems(401, 404, 410, 503), operation_id="ResolveId")
async def resolve_id(object_id: FromPath[str], request: Caller) -> Resolved:
    return await request.service.views.resolve(request.cred, object_id)


@get("/healthz", operation_id="Healthz")
async def healthz() -> Health:
    """The process is up (says nothing about the database)."""
    return Health(status="ok")


@get("/readyz", responses=problems(503), operation_id="Readyz")
async def readyz(request: Caller) -> Health:
    """The database answers a query; and what search can do now (its modes, and why one is missing)."""
    await request.service.ready()
    return Health(status="ready", search=request.service.indexer.describe())


@get("/metrics", include_in_schema=False, sync_to_thread=False)
def metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    """Prometheus exposition: request counts and latency by route and status, pool use, database errors."""
    body = metrics_body(request.app.state.settings.metrics_dir)
    return Response(body, media_type=METRICS_CONTENT_TYPE)


ROUTES: list[Any] = [resolve_id]
PUBLIC: list[Any] = [healthz, readyz, metrics]
