"""RecallSaver: LangGraph's BaseCheckpointSaver on recall-server's checkpoints, over the HTTP API through the client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import msgspec

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_serializable_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
except ImportError as missing:  # an optional extra: the server and client do not need it
    raise ImportError("recall_server.langgraph needs langgraph: pip install 'recall-server[langgraph]'") from missing

from recall_server.client import AsyncRecallClient, Gone, NotFound, RecallClient
from recall_server.langgraph.steps import PAGE, Call, Emit, OnClient, Steps, Stream
from recall_server.models import (
    ChannelBlob,
    ChannelValue,
    CheckpointTupleView,
    PendingWrite,
    PutCheckpoint,
    PutWrites,
    WriteItem,
)


def strict_serde() -> JsonPlusSerializer:
    """LangGraph's serde in its strict msgpack mode: msgpack values decode only to LangGraph's own safe types
    (SAFE_MSGPACK_TYPES) and the types a compiled graph adds from its state schema (`with_allowlist`); any
    other class in a stored checkpoint is blocked (logged, and not constructed), not imported and called."""
    return JsonPlusSerializer(allowed_msgpack_modules=None)


def _thread(config: RunnableConfig) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id) of a config."""
    conf = config["configurable"]
    return str(conf["thread_id"]), conf.get("checkpoint_ns", ""), conf.get("checkpoint_id")


def _ref(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns, "checkpoint_id": checkpoint_id}}


def _json_metadata(value: Any) -> Any:
    """Metadata as JSON (the server filters on it): what JSON cannot hold is kept as its text."""
    return msgspec.json.decode(msgspec.json.encode(value, enc_hook=str))


class RecallSaver(OnClient, BaseCheckpointSaver[int]):
    """A LangGraph BaseCheckpointSaver on recall-server's checkpoints (routes /checkpoints; docs/agents.md).

        saver = RecallSaver()                  # or RecallSaver("http://host:8000", "rk_...")
        graph = builder.compile(checkpointer=saver)

    The tenant is the key's: a thread_id locates a thread within it and grants nothing across tenants.
    Values are serialised here with the saver's serde (by default `strict_serde()`: LangGraph's strict msgpack
    mode) and stored as bytes the server never decodes; a checkpoint is stored without its channel values,
    each of which is stored once per (thread, namespace, channel, version), so an unchanged channel is not
    sent again. A value or a pending write above 64 KiB comes in a tuple as a link, which the saver reads (one
    request each). A retried put or put_writes lands once. delete_thread erases the thread (its checkpoints
    answer 410, which reads here as none; its thread_id is never written again: a put raises Conflict).
    prune: "keep_latest" keeps the newest checkpoint of each namespace with its writes, "delete" none (the
    thread stays writable); the server's retention policy per tenant does the same on its sweep, and both
    delete the writes of no checkpoint below the newest (docs/agents.md). `namespace` (segments):
    where the threads this saver starts live, for keys with grants (docs/tenancy.md#grants); a key with grants
    sees only the threads they cover, and another subject's thread reads as none.
    """

    def __init__(self, url: str | None = None, key: str | None = None, *, serde: SerializerProtocol | None = None,
                 client: RecallClient | None = None, aclient: AsyncRecallClient | None = None,
                 namespace: Sequence[str] | None = None) -> None:
        BaseCheckpointSaver.__init__(self, serde=serde or strict_serde())
        OnClient.__init__(self, url, key, None, client, aclient)
        self.namespace = list(namespace) if namespace else None

    # ---- what goes over the wire, and back --------------------------------------------------------

    def _put_body(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                  new_versions: ChannelVersions) -> PutCheckpoint:
        thread_id, checkpoint_ns, parent_id = _thread(config)
        rest = dict(checkpoint)
        values = rest.pop("channel_values", {}) or {}
        blobs = []
        for channel, version in new_versions.items():
            type_, data = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            blobs.append(ChannelBlob(channel=channel, version=str(version), type=type_, data=data))
        type_, data = self.serde.dumps_typed(rest)
        return PutCheckpoint(
            thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=parent_id, type=type_, checkpoint=data,
            channel_versions={c: str(v) for c, v in checkpoint["channel_versions"].items()},
            metadata=_json_metadata(get_serializable_checkpoint_metadata(config, metadata)), blobs=blobs,
            namespace=self.namespace)

    def _writes_body(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                     task_path: str) -> PutWrites:
        thread_id, checkpoint_ns, checkpoint_id = _thread(config)
        items = []
        for i, (channel, value) in enumerate(writes):
            type_, data = self.serde.dumps_typed(value)
            items.append(WriteItem(idx=WRITES_IDX_MAP.get(channel, i), channel=channel, type=type_, data=data))
        return PutWrites(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=str(checkpoint_id),
                         task_id=task_id, task_path=task_path, writes=items, namespace=self.namespace)

    def _tuple(self, view: CheckpointTupleView) -> CheckpointTuple:
        checkpoint = self.serde.loads_typed((view.type, view.checkpoint))
        checkpoint["channel_values"] = {v.channel: self.serde.loads_typed((v.type, v.data))
                                        for v in view.channel_values if v.type != "empty"}
        parent = (_ref(view.thread_id, view.checkpoint_ns, view.parent_checkpoint_id)
                  if view.parent_checkpoint_id else None)
        return CheckpointTuple(
            config=_ref(view.thread_id, view.checkpoint_ns, view.checkpoint_id), checkpoint=checkpoint,
            metadata=view.metadata, parent_config=parent,
            pending_writes=[(w.task_id, w.channel, self.serde.loads_typed((w.type, w.data)))
                            for w in view.pending_writes])

    @staticmethod
    def _list_query(config: RunnableConfig | None, filter: dict[str, Any] | None,
                    before: RunnableConfig | None) -> tuple[dict[str, Any], str | None]:
        """The list's parameters, and the one checkpoint ID the config names (matched here)."""
        conf = (config or {}).get("configurable", {})
        thread_id = str(conf["thread_id"]) if conf.get("thread_id") is not None else None
        params = {"thread_id": thread_id, "checkpoint_ns": conf.get("checkpoint_ns"),
                  "before": get_checkpoint_id(before) if before else None,
                  "metadata_contains": _json_metadata(filter) if filter else None}
        return params, conf.get("checkpoint_id")

    # ---- the operations, each written once as steps ----------------------------------------------

    def _filled(self, view: CheckpointTupleView) -> Steps:
        """The view with each value and write too large to come inline read from its link (_spilled)."""
        for item, read in _spilled(view):
            item.data = yield read
        return view

    def _get_tuple(self, config: RunnableConfig) -> Steps:
        thread_id, checkpoint_ns, checkpoint_id = _thread(config)
        try:
            view = yield lambda c: c.checkpoint_tuple(thread_id, checkpoint_ns, checkpoint_id)
            return self._tuple((yield from self._filled(view)))
        except (NotFound, Gone):
            return None

    def _list(self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None,
              limit: int | None) -> Stream:
        params, only = self._list_query(config, filter, before)
        left, cursor = limit, None
        while left is None or left > 0:
            try:
                page = yield lambda c, cursor=cursor, left=left: c.list_checkpoints(
                    **params, cursor=cursor, limit=min(left or PAGE, PAGE))
            except Gone:
                return
            for view in page.data:
                if only is None or view.checkpoint_id == only:
                    yield Emit(self._tuple((yield from self._filled(view))))
                    left = None if left is None else left - 1
                    if left == 0:
                        return
            if not page.has_more:
                return
            cursor = page.next_cursor

    def _put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
             new_versions: ChannelVersions) -> Steps:
        ref = yield lambda c: c.put_checkpoint(self._put_body(config, checkpoint, metadata, new_versions))
        return _ref(ref.thread_id, ref.checkpoint_ns, ref.checkpoint_id)

    def _put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                    task_path: str) -> Steps:
        yield lambda c: c.put_checkpoint_writes(self._writes_body(config, writes, task_id, task_path))

    @staticmethod
    def _delete_thread(thread_id: str) -> Steps:
        try:
            yield lambda c: c.delete_checkpoint_thread(str(thread_id))
        except NotFound:
            pass

    @staticmethod
    def _delete_for_runs(run_ids: Sequence[str]) -> Steps:
        if run_ids:
            yield lambda c: c.delete_checkpoint_runs([str(r) for r in run_ids])

    @staticmethod
    def _copy_thread(source_thread_id: str, target_thread_id: str) -> Steps:
        try:
            yield lambda c: c.copy_checkpoint_thread(str(source_thread_id), str(target_thread_id))
        except NotFound:
            pass

    @staticmethod
    def _prune(thread_ids: Sequence[str], strategy: str) -> Steps:
        if thread_ids:
            yield lambda c: c.prune_checkpoints([str(t) for t in thread_ids], _keep(strategy))

    # ---- sync: the steps on the client --------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.drive(self._get_tuple(config))

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        yield from self.stream(self._list(config, filter, before, limit))

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        return self.drive(self._put(config, checkpoint, metadata, new_versions))

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self.drive(self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self.drive(self._delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.drive(self._delete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.drive(self._copy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.drive(self._prune(thread_ids, strategy))

    # ---- async: the same steps on the async client --------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.adrive(self._get_tuple(config))

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        async for item in self.astream(self._list(config, filter, before, limit)):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await self.adrive(self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self.adrive(self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self.adrive(self._delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self.adrive(self._delete_for_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self.adrive(self._copy_thread(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self.adrive(self._prune(thread_ids, strategy))


def _spilled(view: CheckpointTupleView) -> Iterator[tuple[ChannelValue | PendingWrite, Call]]:
    """Each channel value and pending write of a tuple that did not come inline (its `href`: above 64 KiB), with
    the client call that reads its bytes (the sync client's or the async one's)."""
    for value in view.channel_values:
        if value.data is None:
            yield value, lambda c, v=value: c.checkpoint_value(view.thread_id, view.checkpoint_ns, v.channel,
                                                               v.version)
    for write in view.pending_writes:
        if write.data is None:
            yield write, lambda c, w=write: c.checkpoint_write_value(view.thread_id, view.checkpoint_ns,
                                                                     view.checkpoint_id, w.task_id, w.idx)


def _keep(strategy: str) -> int:
    """How many checkpoints per (thread, namespace) a prune strategy keeps."""
    if strategy == "keep_latest":
        return 1
    if strategy == "delete":
        return 0
    raise ValueError(f"Unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'.")
