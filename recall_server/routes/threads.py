"""Threads: the inline view, the index, status changes, owners and the event log."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, delete, get, patch, post
from litestar.params import FromPath, JSONBody, Parameter

from recall_server import spill
from recall_server.service.memories import namespace_param
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
    NAMESPACE,
    AsOf,
    Budget,
    Caller,
    Cursor,
    IdempotencyKey,
    LabelFilter,
    Limit,
    paged,
    problems,
    sent,
)

WRITE = (400, 401, 403, 404, 409, 410, 413, 422, 503)


@post("/threads", status_code=201, responses=problems(400, 401, 403, 409, 413, 422, 503), operation_id="CreateThread")
async def create_thread(
    data: JSONBody[CreateThread], request: Caller, idempotency_key: IdempotencyKey = None
) -> Response[ThreadView]:
    return sent(await request.service.writes.create_thread(request.cred, data, idempotency_key))


@get("/threads/{thread_id:str}", responses=problems(400, 401, 404, 410, 503), operation_id="GetThread")
async def get_thread(
    thread_id: FromPath[str], request: Caller, budget: Budget = spill.DEFAULT_BUDGET
) -> ThreadView:
    return await request.service.views.get_thread(request.cred, thread_id, budget)


@patch("/threads/{thread_id:str}", responses=problems(400, 401, 403, 404, 410, 413, 503), operation_id="UpdateThread")
async def update_thread(thread_id: FromPath[str], data: JSONBody[UpdateThread], request: Caller) -> ThreadView:
    return await request.service.writes.update_thread(request.cred, thread_id, data)


@delete("/threads/{thread_id:str}", responses=problems(401, 403, 404, 503), operation_id="DeleteThread")
async def delete_thread(thread_id: FromPath[str], request: Caller) -> None:
    """Erase the thread, its event log, and the triggers and reports filed on it; the IDs are retired."""
    await request.service.writes.delete(request.cred, "thread", thread_id)


@get("/threads", responses=problems(400, 401, 503), operation_id="ListThreads")
async def list_threads(
    request: Caller,
    labels: LabelFilter,
    status: Annotated[str | None, Parameter(description="Only threads with this status.")] = None,
    owner: Annotated[str | None, Parameter(description="Only threads this worker owns.")] = None,
    namespace: Annotated[str | None, Parameter(
        pattern=NAMESPACE, max_length=520,
        description="Only threads in this namespace or under it (segments joined by '/').")] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> Response[ThreadPage]:
    return paged(request, await request.service.views.list_threads(
        request.cred, status, owner, labels, namespace_param("namespace", namespace), cursor, limit))


@get("/threads/{thread_id:str}/events", responses=problems(400, 401, 404, 410, 503), operation_id="ListEvents")
async def list_events(
    thread_id: FromPath[str], request: Caller,
    cursor: Cursor = None, limit: Limit = 50, as_of: AsOf = None,
) -> Response[EventPage]:
    """The log in seq order; `as_of`: the events appended by then, a message marked retracted if it was then."""
    return paged(request, await request.service.views.list_events(request.cred, thread_id, cursor, limit, as_of))


@post("/threads/{thread_id:str}/events", status_code=201, responses=problems(*WRITE), operation_id="AddNote")
async def add_note(
    thread_id: FromPath[str], data: JSONBody[CreateNote], request: Caller,
    idempotency_key: IdempotencyKey = None,
) -> Response[Event]:
    return sent(await request.service.writes.add_note(request.cred, thread_id, data, idempotency_key))


@post("/threads/{thread_id:str}/owners", status_code=201, responses=problems(*WRITE), operation_id="AssignOwner")
async def assign_owner(
    thread_id: FromPath[str], data: JSONBody[AssignOwner], request: Caller,
    idempotency_key: IdempotencyKey = None,
) -> Response[ThreadView]:
    return sent(await request.service.writes.assign_owner(request.cred, thread_id, data, idempotency_key))


ROUTES: list[Any] = [create_thread, get_thread, update_thread, delete_thread, list_threads, list_events, add_note,
                     assign_owner]
