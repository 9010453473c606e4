"""Triggers and their immutable payloads."""

from __future__ import annotations

from typing import Any

from litestar import Response, delete, get, post
from litestar.params import FromPath, JSONBody

from recall_server import spill
from recall_server.models import CreateTrigger, TriggerView
from recall_server.routes import (
    Budget,
    Caller,
    IdempotencyKey,
    problems,
    sent,
    serve_content,
)


@post("/triggers", status_code=201, responses=problems(400, 401, 403, 409, 413, 422, 503),
      operation_id="CreateTrigger")
async def create_trigger(
    data: JSONBody[CreateTrigger], request: Caller, idempotency_key: IdempotencyKey = None
) -> Response[TriggerView]:
    return sent(await request.service.writes.create_trigger(request.cred, data, idempotency_key))


@get("/triggers/{trigger_id:str}", responses=problems(400, 401, 404, 410, 503), operation_id="GetTrigger")
async def get_trigger(
    trigger_id: FromPath[str], request: Caller, budget: Budget = spill.DEFAULT_BUDGET
) -> TriggerView:
    return await request.service.views.get_trigger(request.cred, trigger_id, budget)


@get("/triggers/{trigger_id:str}/payload", responses=problems(401, 404, 410, 416, 503), operation_id="GetPayload")
async def get_payload(
    trigger_id: FromPath[str], request: Caller
) -> Response[bytes]:
    return serve_content(request, await request.service.views.get_payload(request.cred, trigger_id))


@delete("/triggers/{trigger_id:str}", responses=problems(401, 403, 404, 503), operation_id="DeleteTrigger")
async def delete_trigger(trigger_id: FromPath[str], request: Caller) -> None:
    """Erase the trigger and its payload; the ID is retired."""
    await request.service.writes.delete(request.cred, "trigger", trigger_id)


ROUTES: list[Any] = [create_trigger, get_trigger, get_payload, delete_trigger]
