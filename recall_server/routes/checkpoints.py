"""LangGraph checkpoints: put, pending writes, one tuple (and its large values and writes), pages, erasing a
thread, runs, copies, pruning."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, delete, get, post
from litestar.params import JSONBody, Parameter

from recall_server.models import (
    CheckpointCount,
    CheckpointPage,
    CheckpointRef,
    CheckpointTupleView,
    CopyCheckpoints,
    DeleteCheckpointRuns,
    PruneCheckpoints,
    PutCheckpoint,
    PutWrites,
)
from recall_server.routes import Caller, Cursor, SizedLimit, paged, problems, sent, serve_content

_ONE_LINE = r"^[^\x00-\x1f\x7f]+\Z"
ThreadParam = Annotated[str, Parameter(min_length=1, max_length=256, pattern=_ONE_LINE,
                                       description="A LangGraph thread_id.")]
NsParam = Annotated[str, Parameter(max_length=1024, pattern=r"^[^\x00-\x1f\x7f]*\Z",
                                   description="A LangGraph checkpoint_ns ('' for the root graph).")]
ChannelParam = Annotated[str, Parameter(min_length=1, max_length=256, pattern=_ONE_LINE, description="A channel's name.")]
VersionParam = Annotated[str, Parameter(min_length=1, max_length=128, pattern=_ONE_LINE, description="A channel version.")]
IdParam = Annotated[str | None, Parameter(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+\Z",
                                          description="A checkpoint ID.")]
CheckpointIdParam = Annotated[str, Parameter(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+\Z",
                                             description="A checkpoint ID.")]
TaskParam = Annotated[str, Parameter(min_length=1, max_length=256, pattern=_ONE_LINE, description="A task's ID.")]
IdxParam = Annotated[int, Parameter(ge=-1000, le=1_000_000, description="The write's index in its task's writes.")]


@post("/checkpoints", status_code=201, responses=problems(400, 401, 403, 409, 413, 503), operation_id="PutCheckpoint")
async def put_checkpoint(data: JSONBody[PutCheckpoint], request: Caller) -> Response[CheckpointRef]:
    """Store a checkpoint with the values of its new channel versions; a retry of the same put is a 200."""
    return sent(await request.service.checkpoints.put(request.cred, data))


@post("/checkpoints/writes", status_code=204, responses=problems(400, 401, 403, 409, 413, 503),
      operation_id="PutCheckpointWrites")
async def put_checkpoint_writes(data: JSONBody[PutWrites], request: Caller) -> None:
    """Store a task's pending writes against a checkpoint, once per (task_id, idx)."""
    await request.service.checkpoints.put_writes(request.cred, data)


@get("/checkpoints/tuple", responses=problems(400, 401, 404, 410, 503), operation_id="GetCheckpointTuple")
async def get_checkpoint_tuple(request: Caller, thread_id: ThreadParam, checkpoint_ns: NsParam = "",
                               checkpoint_id: IdParam = None) -> CheckpointTupleView:
    """A checkpoint with its channel values and pending writes (the newest of the namespace without an ID)."""
    return await request.service.checkpoints.get_tuple(request.cred, thread_id, checkpoint_ns, checkpoint_id)


@get("/checkpoints/value", responses=problems(400, 401, 404, 410, 416, 503), operation_id="GetCheckpointValue")
async def get_checkpoint_value(request: Caller, thread_id: ThreadParam, channel: ChannelParam, version: VersionParam,
                               checkpoint_ns: NsParam = "") -> Response[bytes]:
    """A channel value too large to inline in a tuple (its `href`): the serialised bytes, with ETag and Range."""
    return serve_content(request, await request.service.checkpoints.get_value(
        request.cred, thread_id, checkpoint_ns, channel, version))


@get("/checkpoints/writes/value", responses=problems(400, 401, 404, 410, 416, 503),
     operation_id="GetCheckpointWriteValue")
async def get_checkpoint_write_value(request: Caller, thread_id: ThreadParam, checkpoint_id: CheckpointIdParam,
                                     task_id: TaskParam, idx: IdxParam, checkpoint_ns: NsParam = "") -> Response[bytes]:
    """A pending write too large to inline in a tuple (its `href`): the serialised bytes, with ETag and Range."""
    return serve_content(request, await request.service.checkpoints.get_write_value(
        request.cred, thread_id, checkpoint_ns, checkpoint_id, task_id, idx))


@get("/checkpoints", responses=problems(400, 401, 410, 503), operation_id="ListCheckpoints")
async def list_checkpoints(
    request: Caller,
    thread_id: Annotated[str | None, Parameter(min_length=1, max_length=256, pattern=_ONE_LINE,
                                               description="Only this LangGraph thread's checkpoints.")] = None,
    checkpoint_ns: Annotated[str | None, Parameter(max_length=1024, pattern=r"^[^\x00-\x1f\x7f]*\Z",
                                                   description="Only this namespace's checkpoints.")] = None,
    before: IdParam = None,
    metadata_contains: Annotated[str | None, Parameter(
        max_length=4096, description="A JSON object the metadata must contain, e.g. {\"step\":1}.")] = None,
    cursor: Cursor = None,
    limit: SizedLimit = 50,
) -> Response[CheckpointPage]:
    """Checkpoints newest first (by checkpoint ID), with their channel values and pending writes."""
    return paged(request, await request.service.checkpoints.list(
        request.cred, thread_id, checkpoint_ns, before, metadata_contains, cursor, limit))


@delete("/checkpoints", responses=problems(400, 401, 403, 404, 503), operation_id="DeleteCheckpointThread")
async def delete_checkpoint_thread(request: Caller, thread_id: ThreadParam) -> None:
    """Erase a LangGraph thread's checkpoints, values and writes; its checkpoints answer 410 from now on."""
    await request.service.checkpoints.delete_thread(request.cred, thread_id)


@post("/checkpoints/delete-runs", status_code=200, responses=problems(400, 401, 403, 413, 503),
      operation_id="DeleteCheckpointRuns")
async def delete_checkpoint_runs(data: JSONBody[DeleteCheckpointRuns], request: Caller) -> CheckpointCount:
    """Delete the checkpoints (and their writes) whose metadata's run_id is one of these."""
    return await request.service.checkpoints.delete_runs(request.cred, data)


@post("/checkpoints/copy", status_code=200, responses=problems(400, 401, 403, 404, 409, 410, 413, 503),
      operation_id="CopyCheckpointThread")
async def copy_checkpoint_thread(data: JSONBody[CopyCheckpoints], request: Caller) -> CheckpointCount:
    """Copy every checkpoint, value and write of a thread to another thread."""
    return await request.service.checkpoints.copy_thread(request.cred, data)


@post("/checkpoints/prune", status_code=200, responses=problems(400, 401, 403, 413, 503),
      operation_id="PruneCheckpoints")
async def prune_checkpoints(data: JSONBody[PruneCheckpoints], request: Caller) -> CheckpointCount:
    """Keep the newest `keep` checkpoints of each (thread, namespace) of these threads (0: none)."""
    return await request.service.checkpoints.prune(request.cred, data)


ROUTES: list[Any] = [put_checkpoint, put_checkpoint_writes, get_checkpoint_tuple, get_checkpoint_value,
                     get_checkpoint_write_value, list_checkpoints, delete_checkpoint_thread, delete_checkpoint_runs,
                     copy_checkpoint_thread, prune_checkpoints]
