"""Memories: versions by supersede per (namespace, key), the current one, lists, namespaces, values."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, delete, get, post
from litestar.params import FromPath, JSONBody, Parameter

from recall_server import spill, text
from recall_server.ids import MemoryKind
from recall_server.service.memories import namespace_param
from recall_server.models import (
    CreateMemory,
    MemoryPage,
    MemoryVersionPage,
    MemoryView,
    NamespacePage,
    RefreshedMemories,
    RefreshMemories,
    TagFilter,
)
from recall_server.routes import (
    AsOf,
    Budget,
    Caller,
    Cursor,
    IdempotencyKey,
    NAMESPACE,
    LabelFilter,
    Limit,
    SizedLimit,
    paged,
    problems,
    sent,
    serve_content,
)

NamespaceParam = Annotated[str, Parameter(
    pattern=NAMESPACE, max_length=520, description="A namespace as its segments joined by '/', e.g. users/u1.")]
Prefix = Annotated[str | None, Parameter(
    pattern=NAMESPACE, max_length=520,
    description="Only namespaces that start with these segments (joined by '/', e.g. users or users/u1).")]
Suffix = Annotated[str | None, Parameter(
    pattern=NAMESPACE, max_length=520, description="Only namespaces that end with these segments (joined by '/').")]


@post("/memories", status_code=201, responses=problems(400, 401, 403, 409, 410, 413, 422, 503),
      operation_id="CreateMemory")
async def create_memory(
    data: JSONBody[CreateMemory], request: Caller, idempotency_key: IdempotencyKey = None
) -> Response[MemoryView]:
    """A new version of (namespace, key); the pair's current version, if any, is superseded by it."""
    await request.require_booleans("embed")
    return sent(await request.service.memories.create_memory(request.cred, data, idempotency_key))


@post("/memories/refresh", status_code=200, responses=problems(400, 401, 403, 503),
      operation_id="RefreshMemories")
async def refresh_memories(data: JSONBody[RefreshMemories], request: Caller) -> RefreshedMemories:
    """Each live memory written with a ttl expires that ttl from now, as a read refreshes it in LangGraph's
    stores (refresh_on_read). Memories without a ttl, gone or unknown are left as they are, and not listed."""
    return await request.service.memories.refresh_memories(request.cred, data)


@get("/memories/current", responses=problems(400, 401, 404, 410, 503), operation_id="GetCurrentMemory")
async def get_current_memory(
    request: Caller, namespace: NamespaceParam,
    key: Annotated[str, Parameter(min_length=1, max_length=256, pattern=text.KEY)],
    budget: Budget = spill.DEFAULT_BUDGET,
    as_of: Annotated[str | None, Parameter(max_length=64, description=(
        "RFC 3339 date-time with an offset: the version that was current then (404 if the pair had none yet, "
        "410 if it had expired or been deleted by then; an erased memory is gone at every time)."))] = None,
) -> MemoryView:
    """The current version of (namespace, key): 404 if it never had one, 410 if it was deleted or expired."""
    return await request.service.memories.get_current_memory(
        request.cred, namespace_param("namespace", namespace) or "", key, budget, as_of)


@get("/memories/namespaces", responses=problems(400, 401, 503), operation_id="ListMemoryNamespaces")
async def list_memory_namespaces(
    request: Caller, prefix: Prefix = None, suffix: Suffix = None,
    max_depth: Annotated[int | None, Parameter(ge=1, le=8, description="Cut namespaces to this many segments.")] = None,
    cursor: Cursor = None, limit: Limit = 50,
) -> Response[NamespacePage]:
    """The distinct namespaces of current memories, in order."""
    return paged(request, await request.service.memories.list_memory_namespaces(
        request.cred, namespace_param("prefix", prefix), namespace_param("suffix", suffix), max_depth, cursor, limit))


@get("/memories", responses=problems(400, 401, 503), operation_id="ListMemories")
async def list_memories(
    request: Caller,
    labels: LabelFilter,
    namespace: Prefix = None,
    kind: Annotated[MemoryKind | None, Parameter(description="Only memories of this kind.")] = None,
    tag: Annotated[list[TagFilter] | None, Parameter(description=(
        "Only memories with this tag, as key:value (repeat for several: all must match, so one key with two "
        "values matches none)."))] = None,
    value_contains: Annotated[str | None, Parameter(
        max_length=4096, description="A JSON object the (JSON) value must contain, e.g. {\"lang\":\"en\"}.")] = None,
    cursor: Cursor = None,
    limit: SizedLimit = 50,
    as_of: AsOf = None,
) -> Response[MemoryPage]:
    """Current versions only (never superseded, deleted or expired ones), in (namespace, key) order; `as_of`:
    those current then."""
    return paged(request, await request.service.memories.list_memories(
        request.cred, namespace_param("namespace", namespace), kind, tag, labels, value_contains, cursor, limit,
        as_of))


@get("/memories/{memory_id:str}", responses=problems(400, 401, 404, 410, 503), operation_id="GetMemory")
async def get_memory(memory_id: FromPath[str], request: Caller, budget: Budget = spill.DEFAULT_BUDGET) -> MemoryView:
    """Any version, current or superseded (status says which)."""
    return await request.service.views.get_memory(request.cred, memory_id, budget)


@get("/memories/{memory_id:str}/value", responses=problems(401, 404, 410, 416, 503), operation_id="GetMemoryValue")
async def get_memory_value(memory_id: FromPath[str], request: Caller) -> Response[bytes]:
    return serve_content(request, await request.service.views.get_memory_value(request.cred, memory_id))


@get("/memories/{memory_id:str}/versions", responses=problems(400, 401, 404, 410, 503),
     operation_id="ListMemoryVersions")
async def list_memory_versions(
    memory_id: FromPath[str], request: Caller, cursor: Cursor = None, limit: Limit = 50, as_of: AsOf = None,
) -> Response[MemoryVersionPage]:
    """The chain of versions this memory belongs to, newest first; `as_of`: those written by then, each as it
    was then (404 if this version was not written yet)."""
    return paged(request, await request.service.memories.list_memory_versions(request.cred, memory_id, cursor, limit,
                                                                              as_of))


@delete("/memories/{memory_id:str}", responses=problems(401, 403, 404, 503), operation_id="DeleteMemory")
async def delete_memory(memory_id: FromPath[str], request: Caller) -> None:
    """Erase every version of the memory's (namespace, key); the IDs are retired. A new write starts a new chain."""
    await request.service.writes.delete(request.cred, "memory", memory_id)


ROUTES: list[Any] = [create_memory, refresh_memories, get_current_memory, list_memory_namespaces, list_memories, get_memory,
                     get_memory_value, list_memory_versions, delete_memory]
