"""ID resolution and health probes."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.params import FromPath

from recall_server.models import Health, Resolved
from recall_server.routes import Key, Service, problems


@get("/ids/{object_id:str}", responses=problems(401, 404, 410, 503), operation_id="ResolveId")
async def resolve_id(object_id: FromPath[str], recall: Service, cred: Key) -> Resolved:
    return await recall.resolve(cred, object_id)


@get("/healthz", operation_id="Healthz")
async def healthz() -> Health:
    """The process is up (says nothing about the database)."""
    return Health(status="ok")


@get("/readyz", responses=problems(503), operation_id="Readyz")
async def readyz(recall: Service) -> Health:
    """The database answers a query."""
    await recall.ready()
    return Health(status="ready")


ROUTES: list[Any] = [resolve_id]
PUBLIC: list[Any] = [healthz, readyz]
