"""Threads: the inline view, the index, status changes, owners and the event log."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, get, patch, post
from litestar.params import FromPath, JSONBody, Parameter

from recall_server import spill
from recall_server.models import (
    AssignOwner,
    CreateNote,
    CreateThread,
    Event,
    EventPage,
    ThreadPage,
    ThreadView,
    UpdateThread,
)
from recall_server.routes import (
    Budget,
    Cursor,
    Key,
    LabelFilter,
    Limit,
    Service,
    created,
    paged,
    problems,
)


@post("/threads", status_code=201, responses=problems(400, 401, 403, 409, 413, 422, 503), operation_id="CreateThread")
async def create_thread(data: JSONBody[CreateThread], recall: Service, cred: Key) -> Response[ThreadView]:
    is_new, view = await recall.create_thread(cred, data)
    return created(view, is_new, f"/threads/{view.id}")


@get("/threads/{thread_id:str}", responses=problems(400, 401, 404, 503), operation_id="GetThread")
async def get_thread(thread_id: FromPath[str], recall: Service, cred: Key, budget: Budget = spill.DEFAULT_BUDGET) -> ThreadView:
    return await recall.get_thread(cred, thread_id, budget)


@patch("/threads/{thread_id:str}", responses=problems(400, 401, 403, 404, 413, 503), operation_id="UpdateThread")
async def update_thread(thread_id: FromPath[str], data: JSONBody[UpdateThread], recall: Service, cred: Key) -> ThreadView:
    return await recall.update_thread(cred, thread_id, data)


@get("/threads", responses=problems(400, 401, 503), operation_id="ListThreads")
async def list_threads(
    request: Request[Any, Any, Any],
    recall: Service,
    cred: Key,
    labels: LabelFilter,
    status: Annotated[str | None, Parameter(description="Only threads with this status.")] = None,
    owner: Annotated[str | None, Parameter(description="Only threads this worker owns.")] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> Response[ThreadPage]:
    return paged(request, await recall.list_threads(cred, status, owner, labels, cursor, limit))


@get("/threads/{thread_id:str}/events", responses=problems(400, 401, 404, 503), operation_id="ListEvents")
async def list_events(
    thread_id: FromPath[str], request: Request[Any, Any, Any], recall: Service, cred: Key, cursor: Cursor = None, limit: Limit = 50
) -> Response[EventPage]:
    return paged(request, await recall.list_events(cred, thread_id, cursor, limit))


@post("/threads/{thread_id:str}/events", status_code=201, responses=problems(400, 401, 403, 404, 413, 422, 503), operation_id="AddNote")
async def add_note(thread_id: FromPath[str], data: JSONBody[CreateNote], recall: Service, cred: Key) -> Event:
    return await recall.add_note(cred, thread_id, data)


@post("/threads/{thread_id:str}/owners", status_code=201, responses=problems(400, 401, 403, 404, 413, 422, 503), operation_id="AssignOwner")
async def assign_owner(thread_id: FromPath[str], data: JSONBody[AssignOwner], recall: Service, cred: Key) -> Response[ThreadView]:
    is_new, view = await recall.assign_owner(cred, thread_id, data)
    return created(view, is_new, f"/threads/{view.id}")


ROUTES: list[Any] = [create_thread, get_thread, update_thread, list_threads, list_events, add_note, assign_owner]
