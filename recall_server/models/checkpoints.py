"""Checkpoints (LangGraph)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct

from recall_server.models.common import Namespace, OneLine, Request, Timestamp


# The bytes (checkpoint, channel values, writes) are LangGraph's serialised values with their type tag,
# base64 in JSON; the server stores and returns them as sent and never decodes them.

CheckpointThreadId = Annotated[str, Meta(min_length=1, max_length=256, pattern=OneLine,
                                         description="A LangGraph thread_id.", examples=["run-1"])]
CheckpointNs = Annotated[str, Meta(max_length=1024, pattern=r"^[^\x00-\x1f\x7f]*\Z",
                                   description="A LangGraph checkpoint_ns ('' for the root graph).")]
CheckpointId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+\Z",
                                   examples=["1ef4f797-8335-6428-8001-8a1503f9b875"])]
# bytes in JSON: standard base64 with its padding, all a schema can say of it (and what msgspec decodes)
Base64 = Annotated[bytes, Meta(extra_json_schema={
    "pattern": r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?\Z"})]
SerdeType = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+\Z", examples=["msgpack"])]
ChannelName = Annotated[str, Meta(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+\Z")]
ChannelVersion = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+\Z")]
TaskId = Annotated[str, Meta(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+\Z")]
TaskPath = Annotated[str, Meta(max_length=1024, pattern=r"^[^\x00-\x1f\x7f]*\Z")]
RunIdText = Annotated[str, Meta(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]+\Z")]


class ChannelBlob(Request, kw_only=True):
    """A channel's value at one version."""

    channel: ChannelName
    version: ChannelVersion
    type: SerdeType
    data: Base64


class PutCheckpoint(Request, kw_only=True):
    thread_id: CheckpointThreadId
    checkpoint_ns: CheckpointNs = ""
    checkpoint_id: CheckpointId
    parent_checkpoint_id: CheckpointId | None = None
    type: SerdeType
    checkpoint: Annotated[Base64, Meta(description="The checkpoint without its channel values, serialised.")]
    channel_versions: Annotated[dict[ChannelName, ChannelVersion], Meta(
        max_length=1024, description="The version of each channel the checkpoint holds.")] = {}
    metadata: Annotated[dict[str, Any], Meta(description="JSON; list filters match it (containment).")] = {}
    blobs: Annotated[list[ChannelBlob], Meta(
        max_length=1024, description="Values of the channel versions new in this checkpoint.")] = []
    namespace: Namespace | None = None  # where a key's grants apply, set by the thread's first put; none: root


class WriteItem(Request, kw_only=True):
    idx: Annotated[int, Meta(ge=-1000, le=1_000_000)]
    channel: ChannelName
    type: SerdeType
    data: Base64


class PutWrites(Request, kw_only=True):
    thread_id: CheckpointThreadId
    checkpoint_ns: CheckpointNs = ""
    checkpoint_id: CheckpointId
    task_id: TaskId
    task_path: TaskPath = ""
    writes: Annotated[list[WriteItem], Meta(max_length=1024)]
    namespace: Namespace | None = None  # where a key's grants apply, set by the thread's first write; none: root


class CopyCheckpoints(Request, kw_only=True):
    source_thread_id: CheckpointThreadId
    target_thread_id: CheckpointThreadId


class DeleteCheckpointRuns(Request, kw_only=True):
    run_ids: Annotated[list[RunIdText], Meta(max_length=500)]


class PruneCheckpoints(Request, kw_only=True):
    thread_ids: Annotated[list[CheckpointThreadId], Meta(max_length=500)]
    keep: Annotated[int, Meta(ge=0, le=1_000_000,
                              description="Checkpoints kept per (thread, namespace), newest first.")] = 1


class CheckpointRef(Struct):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


class ChannelValue(Struct, omit_defaults=True):
    """A channel's value in a checkpoint: its bytes inline, or (above 64 KiB) `href` to read them from."""

    channel: str
    type: str
    data: bytes | None
    size: int = 0
    version: str = ""
    href: str | None = None


class PendingWrite(Struct, omit_defaults=True):
    """A task's write after a checkpoint: its bytes inline, or (above 64 KiB) `href` to read them from."""

    task_id: str
    channel: str
    type: str
    data: bytes | None
    task_path: str
    idx: int
    size: int = 0
    href: str | None = None


class CheckpointTupleView(Struct):
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    type: str
    checkpoint: bytes
    metadata: dict[str, Any]
    channel_values: list[ChannelValue]
    pending_writes: list[PendingWrite]
    created_at: Timestamp


class CheckpointPage(Struct):
    data: list[CheckpointTupleView]
    next_cursor: str | None
    has_more: bool


class CheckpointCount(Struct):
    checkpoints: int  # how many checkpoints the operation deleted or copied
