"""ID resolution and health probes."""

from __future__ import annotations

from typing import Any

from litestar import get

from recall_server.models import Health, Resolved
from recall_server.routes import TENANT, problems
from recall_server.service import Recall


@get("/ids/{object_id:str}", responses=problems(404, 503))
async def resolve_id(object_id: str, recall: Recall) -> Resolved:
    return await recall.resolve(TENANT, object_id)


@get("/healthz")
async def healthz() -> Health:
    """The process is up (says nothing about the database)."""
    return Health(status="ok")


@get("/readyz", responses=problems(503))
async def readyz(recall: Recall) -> Health:
    """The database answers a query."""
    await recall.ready()
    return Health(status="ready")


ROUTES: list[Any] = [resolve_id, healthz, readyz]
