"""LangGraph on recall-server, over the HTTP API through the client: RecallStore (a BaseStore kept in recall's
memories) and RecallSaver (a BaseCheckpointSaver kept in its checkpoints; see the class).

    store = RecallStore()                  # or RecallStore("http://host:8000", "rk_...")
    graph = builder.compile(store=store)   # nodes take `store: BaseStore`; tenancy comes from the key

Mapping (each op is written once, as a generator of client calls, and driven by the sync client for
`batch` or the async one for `abatch`; as in InMemoryStore, a batch's reads answer first and its puts, the
last per (namespace, key), are applied after them):

- GetOp       -> GET /memories/current (a 404 or 410 is None); a spilled value is read from its value link.
- PutOp       -> POST /memories: a new version of (namespace, key) supersedes the current one. Recall keeps
                 superseded versions readable by ID (GET /memories/{id}/versions); the store never returns them.
                 `ttl` (minutes) becomes the memory's ttl in whole seconds (rounded up); reads do not refresh
                 it (`refresh_ttl` is ignored). The server embeds it (the whole item, whatever fields `index`
                 names) unless `index=False`: then it has no vector, and a search by meaning never finds it.
  value None  -> DELETE /memories/{id} of the current version: every version of (namespace, key) is erased
                 (LangGraph keeps no versions; recall erases them all, and a later put starts a new chain).
- SearchOp    -> GET /memories?namespace=<prefix>, paged with cursors; `filter` string equalities are pushed down
                 as value_contains (PostgreSQL @>) and every filter (operators $eq $ne $gt $gte $lt $lte
                 included) is then applied here with LangGraph's own comparison, so results equal
                 InMemoryStore's; `offset`/`limit` are applied here. Order: (namespace, key), not insertion
                 order. With a `query`: GET /search over memories under the prefix (the server's ranking:
                 hybrid, or semantic with `index=`), best first, each item's score the server's.
- ListNamespacesOp -> GET /memories/namespaces (a literal prefix/suffix pushed down); "*" wildcards and
                 several conditions are matched here; sorted as LangGraph sorts tuples, then offset/limit.

Namespaces: recall's segments are 1-64 of [A-Za-z0-9_-], 1-8 of them. A label is encoded exactly and
reversibly: each character outside [A-Za-z0-9_-], and the "_" of a literal "_-", becomes "_-" + the
lowercase hex of its UTF-8 bytes + "-" (so "user 1" is stored as "user_-20-1"; "user_1" and "my-app" are
stored as they are). A namespace of more than 8 labels or a label longer than 64 once encoded is a ValueError.
Item.created_at is when version 1 of the pair's chain was written, updated_at when the current version was.

Keys: recall's are 1-256 characters on one line. A LangGraph key that is not (empty, longer, spanning
lines, holding control characters), or that starts with "~sha256:", is stored under "~sha256:" + the hex
SHA-256 of its UTF-8, and the key itself is kept in the stored value under "~key" (with the value's own
"~key" member, if it has one, beside it): get, search and list answer the original key and value exactly.
Such items page by their stored key in search.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

import msgspec

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        MatchCondition,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
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
try:
    from langgraph.store.base import validate_op_namespace
except ImportError:
    validate_op_namespace = None  # type: ignore[assignment]

from recall_server.client import AsyncRecallClient, Gone, NotFound, RecallClient
from recall_server.models import (
    ChannelBlob,
    ChannelValue,
    CheckpointTupleView,
    MemoryIndexEntry,
    MemoryView,
    OneLine,
    PendingWrite,
    PutCheckpoint,
    PutWrites,
    WriteItem,
)

MAX_SEGMENTS = 8
MAX_SEGMENT_CHARS = 64
PAGE = 500  # memories and namespaces read per request while searching or listing
GET_BUDGET = 65_536  # a get answers values up to about this size in one request (larger ones: a second, for the value)
_PLAIN = re.compile(r"[A-Za-z0-9_-]")
_ONE_LINE = re.compile(OneLine)
MAX_KEY_CHARS = 256
HASHED = "~sha256:"  # the prefix of a stored key that stands for a key recall cannot hold as it is
KEY_MEMBER = "~key"  # where such an item's value keeps its key
_ESCAPE = re.compile(r"_-([0-9a-f]+)-")

# A step of an op: a function of the client that returns a value (sync) or an awaitable (async).
Call = Callable[[Any], Any]
Steps = Generator[Call, Any, Any]


# ---- namespaces ----------------------------------------------------------------------------------


def encode_label(label: str) -> str:
    """One LangGraph namespace label as one recall segment (exact, reversible; see the module docstring)."""
    out: list[str] = []
    for i, ch in enumerate(label):
        literal_marker = ch == "_" and label[i + 1:i + 2] == "-"
        if _PLAIN.fullmatch(ch) and not literal_marker:
            out.append(ch)
        else:
            out.append(f"_-{ch.encode().hex()}-")
    return "".join(out)


def decode_label(segment: str) -> str:
    """The label a segment encodes. A segment not written by this store (an "_-" that is no escape) is kept as is."""
    def one(match: re.Match[str]) -> str:
        hexed = match.group(1)
        try:
            char = bytes.fromhex(hexed).decode()
        except ValueError:
            return match.group(0)
        return char if len(char) == 1 else match.group(0)

    return _ESCAPE.sub(one, segment)


def encode_namespace(namespace: tuple[str, ...]) -> list[str]:
    """A LangGraph namespace as recall segments; ValueError when recall cannot hold it."""
    if not 1 <= len(namespace) <= MAX_SEGMENTS:
        raise ValueError(f"recall namespaces have 1-{MAX_SEGMENTS} labels, got {len(namespace)}: {namespace!r}")
    segments = [encode_label(label) for label in namespace]
    for label, segment in zip(namespace, segments):
        if not 1 <= len(segment) <= MAX_SEGMENT_CHARS:
            raise ValueError(f"namespace label {label!r} is {len(segment)} characters once encoded for recall "
                             f"({segment!r}); recall holds 1-{MAX_SEGMENT_CHARS}")
    return segments


def decode_namespace(segments: list[str]) -> tuple[str, ...]:
    return tuple(decode_label(s) for s in segments)


# ---- keys ----------------------------------------------------------------------------------------


def stored_key(key: str) -> str:
    """The memory key a LangGraph key is stored under: itself, or its hash when recall cannot hold it."""
    if 1 <= len(key) <= MAX_KEY_CHARS and _ONE_LINE.match(key) and not key.startswith(HASHED):
        return key
    return HASHED + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def stored_value(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """The value as stored: with the key inside when it is stored under its hash (see the module docstring)."""
    if stored_key(key) == key:
        return value
    kept = {"key": key, **({"value": value[KEY_MEMBER]} if KEY_MEMBER in value else {})}
    return {**value, KEY_MEMBER: kept}


def original(key: str, value: Any) -> tuple[str, Any]:
    """The LangGraph key and value of a stored pair (the inverse of stored_key and stored_value)."""
    if not key.startswith(HASHED) or not isinstance(value, dict) or not isinstance(value.get(KEY_MEMBER), dict):
        return key, value
    value = dict(value)
    kept = value.pop(KEY_MEMBER)
    if "value" in kept:
        value[KEY_MEMBER] = kept["value"]
    return kept.get("key", key), value


# ---- filters (LangGraph's semantics, applied to what recall returns) -----------------------------


def _compare(value: Any, wanted: Any) -> bool:
    """LangGraph's filter comparison (langgraph.store.memory): nested dicts match key by key, lists exactly,
    operator dicts ($eq $ne $gt $gte $lt $lte) by operator."""
    if isinstance(wanted, dict):
        if any(k.startswith("$") for k in wanted):
            return all(_operator(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (isinstance(value, (list, tuple)) and len(value) == len(wanted)
                and all(_compare(a, b) for a, b in zip(value, wanted)))
    return bool(value == wanted)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if value is None:
            return False
        a, b = float(value), float(operand)
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"Unsupported filter operator: {op}")


def _matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return not filter or all(_compare(value.get(k), v) for k, v in filter.items())


def _pushable(wanted: Any) -> bool:
    """Whether `{key: wanted}` means exactly what JSON containment (@>) means: strings, and objects of them.
    Numbers are not (True == 1 here, not in JSON), nor None (a missing key matches it here), nor lists (exact
    here, containment in @>): those are checked here only."""
    if isinstance(wanted, dict):
        return bool(wanted) and all(not k.startswith("$") and _pushable(v) for k, v in wanted.items())
    return isinstance(wanted, str)


def value_contains(filter: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part of a filter recall can apply itself (a superset of the matches; the rest is checked here).
    Never the member that keeps a hashed item's key: such an item stores that member's own value elsewhere."""
    pushed = {k: v for k, v in (filter or {}).items() if k != KEY_MEMBER and _pushable(v)}
    return pushed or None


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if condition.match_type == "prefix" else zip(reversed(namespace), reversed(path))
    return all(p == "*" or n == p for n, p in pairs)


def _literal_part(condition: MatchCondition) -> tuple[str, ...]:
    """The labels before the first "*" (a prefix) or after the last one (a suffix): what recall can match."""
    path = tuple(condition.path)
    if condition.match_type == "prefix":
        return path[:path.index("*")] if "*" in path else path
    cut = len(path) - path[::-1].index("*") if "*" in path else 0
    return path[cut:]


# ---- the store -----------------------------------------------------------------------------------


class _OnClient:
    """What the store and the saver share: the sync client, and the async client of the running event loop."""

    def __init__(self, url: str | None, key: str | None, run: str | None, client: RecallClient | None,
                 aclient: AsyncRecallClient | None) -> None:
        self.url, self.key, self.run = url, key, run
        self._client, self._aclient = client, aclient
        self._given_aclient = aclient is not None
        self._aclient_loop: asyncio.AbstractEventLoop | None = None

    @property
    def client(self) -> RecallClient:
        if self._client is None:
            self._client = RecallClient(self.url, self.key, run=self.run)
        return self._client

    @property
    def aclient(self) -> AsyncRecallClient:
        """The async client for the running event loop: its pooled connections belong to one loop, and a store
        or saver may outlive a loop (each asyncio.run of a graph has its own)."""
        loop = asyncio.get_running_loop()
        if not self._given_aclient and (self._aclient is None or self._aclient_loop is not loop):
            self._aclient = AsyncRecallClient(self.url, self.key, run=self.run)
            self._aclient_loop = loop
        assert self._aclient is not None
        return self._aclient

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecallStore(_OnClient, BaseStore):
    """A LangGraph BaseStore on recall-server memories. `kind` is the kind every put writes (fact by default)."""

    supports_ttl = True

    def __init__(self, url: str | None = None, key: str | None = None, *, kind: str = "fact", run: str | None = None,
                 client: RecallClient | None = None, aclient: AsyncRecallClient | None = None,
                 index: dict[str, Any] | None = None, search_mode: str | None = None) -> None:
        """`index`: LangGraph's index configuration, accepted for compatibility: the server embeds every memory
        with its own embedder (RECALL_EMBEDDER), so `embed`, `dims` and `fields` are not used. `search_mode`:
        how a query ranks (GET /search's mode): semantic when `index` is given, else the server's default
        (hybrid: words and meaning)."""
        _OnClient.__init__(self, url, key, run, client, aclient)
        self.kind = kind
        self.index_config = index
        self.search_mode = search_mode or ("semantic" if index is not None else None)

    # ---- batch: reads first, then the batch's puts (the last per (namespace, key) wins), as InMemoryStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        answers, puts = self._plan(ops)
        results = [_run(steps, lambda call: call(self.client)) for steps in answers]
        for steps in puts:
            _run(steps, lambda call: call(self.client))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        answers, puts = self._plan(ops)
        results = [await self._adrive(steps) for steps in answers]
        for steps in puts:
            await self._adrive(steps)
        return results

    def _plan(self, ops: Iterable[Op]) -> tuple[list[Steps], list[Steps]]:
        """One step generator per op, in order (a put answers None), and the deduplicated puts."""
        ops = list(ops)
        reads: list[Steps] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            _validate(op)
            if isinstance(op, GetOp):
                reads.append(self._get(op))
            elif isinstance(op, SearchOp):
                reads.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                reads.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                puts[(tuple(op.namespace), op.key)] = op
                reads.append(_none())
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")
        return reads, [self._put(op) for op in puts.values()]

    async def _adrive(self, steps: Steps) -> Any:
        """`_run`, awaited: each step's result (or exception) goes back into the op."""
        try:
            call = next(steps)
            while True:
                try:
                    result = await call(self.aclient)
                except Exception as exc:  # handed to the op, which may expect it (a miss)
                    call = steps.throw(exc)
                else:
                    call = steps.send(result)
        except StopIteration as done:
            return done.value

    # ---- ops, each written once as steps --------------------------------------------------------

    def _get(self, op: GetOp) -> Steps:
        try:
            segments = encode_namespace(tuple(op.namespace))
        except ValueError:
            return None  # recall cannot hold it, so it was never put
        try:
            view: MemoryView = yield lambda c: c.current_memory(segments, stored_key(op.key), GET_BUDGET)
        except (NotFound, Gone):
            return None
        value = view.value
        if value is msgspec.UNSET:  # spilled: larger than the view's budget
            value = msgspec.json.decode((yield lambda c: c.memory_value(view.id)))
        key, value = original(view.key, value)
        return Item(value=value, key=key, namespace=decode_namespace(view.namespace),
                    created_at=view.chain_created_at or view.created_at, updated_at=view.created_at)

    def _put(self, op: PutOp) -> Steps:
        segments = encode_namespace(tuple(op.namespace))
        if op.value is None:
            try:
                view = yield lambda c: c.current_memory(segments, stored_key(op.key), 4096)
            except (NotFound, Gone):
                return None
            yield lambda c: c.delete_memory(view.id)
            return None
        ttl = None if op.ttl is None else max(1, math.ceil(op.ttl * 60))
        yield lambda c: c.remember(namespace=segments, key=stored_key(op.key), kind=self.kind,
                                   value=stored_value(op.key, dict(op.value)), ttl=ttl, embed=op.index is not False)
        return None

    def _search(self, op: SearchOp) -> Steps:
        prefix = tuple(op.namespace_prefix)
        if len(prefix) > MAX_SEGMENTS:
            return []
        try:
            namespace = encode_namespace(prefix) if prefix else None
        except ValueError:
            return []
        if op.query is not None and op.query.strip():
            return (yield from self._ranked_search(op, namespace))
        pushed = value_contains(op.filter)
        found: list[SearchItem] = []
        skip, want = max(op.offset, 0), op.limit
        cursor = None
        while len(found) < skip + want:
            page = yield lambda c, cursor=cursor: c.list_memories(
                namespace=namespace, value_contains=pushed, cursor=cursor, limit=PAGE)
            for entry in page.data:
                item = yield from self._search_item(entry)
                if item is not None and _matches(item.value, op.filter):
                    found.append(item)
            if not page.has_more:
                break
            cursor = page.next_cursor
        return found[skip:skip + want]

    def _ranked_search(self, op: SearchOp, namespace: str | None) -> Steps:
        """A query: the server's ranking (GET /search, memories under the prefix, `search_mode`), each hit read as
        an item and filtered here, best first, its score the server's."""
        found: list[SearchItem] = []
        skip, want = max(op.offset, 0), op.limit
        cursor = None
        query = op.query[:256]  # the server's bound on a question
        while len(found) < skip + want:
            # without a filter every hit is an item: ask for what is still missing; with one, a page of 100
            ask = 100 if op.filter else min(100, skip + want - len(found))
            page = yield lambda c, cursor=cursor, ask=ask: c.search(query, mode=self.search_mode, type="memory",
                                                                    namespace=namespace, cursor=cursor, limit=ask)
            for hit in page.data:
                if len(found) >= skip + want:
                    break
                try:
                    view: MemoryView = yield lambda c, hit=hit: c.get(hit.id, GET_BUDGET)
                except (NotFound, Gone):  # deleted since the search read it
                    continue
                item = yield from self._view_item(view)
                if item is not None and _matches(item.value, op.filter):
                    item.score = hit.score
                    found.append(item)
            if not page.has_more:
                break
            cursor = page.next_cursor
        return found[skip:skip + want]

    def _view_item(self, view: MemoryView) -> Steps:
        value = view.value
        if value is msgspec.UNSET:  # spilled: larger than the view's budget
            value = msgspec.json.decode((yield lambda c: c.memory_value(view.id)))
        if not isinstance(value, dict):  # not a LangGraph item (written through the API)
            return None
        key, value = original(view.key, value)
        return SearchItem(namespace=decode_namespace(view.namespace), key=key, value=value,
                          created_at=view.chain_created_at or view.created_at, updated_at=view.created_at)

    def _search_item(self, entry: MemoryIndexEntry) -> Steps:
        value = entry.value
        if value is msgspec.UNSET:  # larger than a list entry carries inline
            value = msgspec.json.decode((yield lambda c: c.memory_value(entry.id)))
        if not isinstance(value, dict):  # not a LangGraph item (written through the API): not a store item
            return None
        key, value = original(entry.key, value)
        return SearchItem(namespace=decode_namespace(entry.namespace), key=key, value=value,
                          created_at=entry.chain_created_at or entry.created_at, updated_at=entry.created_at)

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps:
        conditions = tuple(op.match_conditions or ())
        prefixes = [c for c in conditions if c.match_type == "prefix"]
        suffixes = [c for c in conditions if c.match_type == "suffix"]
        exact = len(prefixes) <= 1 and len(suffixes) <= 1 and all("*" not in c.path for c in conditions)
        try:
            prefix = encode_namespace(_literal_part(prefixes[0])) if prefixes and _literal_part(prefixes[0]) else None
            suffix = encode_namespace(_literal_part(suffixes[0])) if suffixes and _literal_part(suffixes[0]) else None
        except ValueError:
            return []  # longer than recall holds: nothing can match
        depth = op.max_depth if exact and op.max_depth is not None and op.max_depth <= MAX_SEGMENTS else None
        found: set[tuple[str, ...]] = set()
        cursor = None
        while True:
            page = yield lambda c, cursor=cursor: c.memory_namespaces(prefix=prefix, suffix=suffix, max_depth=depth,
                                                                      cursor=cursor, limit=PAGE)
            for segments in page.data:
                namespace = decode_namespace(segments)
                if exact or all(_namespace_matches(c, namespace) for c in conditions):
                    found.add(namespace if op.max_depth is None else namespace[:op.max_depth])
            if not page.has_more:
                break
            cursor = page.next_cursor
        return sorted(found)[op.offset:op.offset + op.limit]


def _none() -> Steps:
    return None
    yield  # a generator that makes no call


def _run(steps: Steps, call_with: Callable[[Call], Any]) -> Any:
    """Drive one op's steps with a blocking client: each step's result (or exception) goes back into the op."""
    try:
        call = next(steps)
        while True:
            try:
                result = call_with(call)
            except Exception as exc:
                call = steps.throw(exc)
            else:
                call = steps.send(result)
    except StopIteration as done:
        return done.value


def _validate(op: Op) -> None:
    """LangGraph's own label checks for ops passed straight to batch (no empty label, no '.')."""
    if validate_op_namespace is not None:  # older langgraph: its BaseStore methods check before batching
        validate_op_namespace(op)


# ---- the checkpointer ----------------------------------------------------------------------------


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


class RecallSaver(_OnClient, BaseCheckpointSaver[int]):
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
        _OnClient.__init__(self, url, key, None, client, aclient)
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

    # ---- sync ---------------------------------------------------------------------------------------

    def _filled(self, view: CheckpointTupleView) -> CheckpointTupleView:
        """The view with each value and write too large to come inline read from its link (_spilled)."""
        for item, read in _spilled(view):
            item.data = read(self.client)
        return view

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, checkpoint_ns, checkpoint_id = _thread(config)
        try:
            return self._tuple(self._filled(self.client.checkpoint_tuple(thread_id, checkpoint_ns, checkpoint_id)))
        except (NotFound, Gone):
            return None

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        params, only = self._list_query(config, filter, before)
        left, cursor = limit, None
        while left is None or left > 0:
            try:
                page = self.client.list_checkpoints(**params, cursor=cursor, limit=min(left or PAGE, PAGE))
            except Gone:
                return
            for view in page.data:
                if only is None or view.checkpoint_id == only:
                    yield self._tuple(self._filled(view))
                    left = None if left is None else left - 1
                    if left == 0:
                        return
            if not page.has_more:
                return
            cursor = page.next_cursor

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        ref = self.client.put_checkpoint(self._put_body(config, checkpoint, metadata, new_versions))
        return _ref(ref.thread_id, ref.checkpoint_ns, ref.checkpoint_id)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        self.client.put_checkpoint_writes(self._writes_body(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        try:
            self.client.delete_checkpoint_thread(str(thread_id))
        except NotFound:
            pass

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            self.client.delete_checkpoint_runs([str(r) for r in run_ids])

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            self.client.copy_checkpoint_thread(str(source_thread_id), str(target_thread_id))
        except NotFound:
            pass

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if thread_ids:
            self.client.prune_checkpoints([str(t) for t in thread_ids], _keep(strategy))

    # ---- async --------------------------------------------------------------------------------------

    async def _afilled(self, view: CheckpointTupleView) -> CheckpointTupleView:
        for item, read in _spilled(view):
            item.data = await read(self.aclient)
        return view

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, checkpoint_ns, checkpoint_id = _thread(config)
        try:
            return self._tuple(await self._afilled(await self.aclient.checkpoint_tuple(thread_id, checkpoint_ns,
                                                                                        checkpoint_id)))
        except (NotFound, Gone):
            return None

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        params, only = self._list_query(config, filter, before)
        left, cursor = limit, None
        while left is None or left > 0:
            try:
                page = await self.aclient.list_checkpoints(**params, cursor=cursor, limit=min(left or PAGE, PAGE))
            except Gone:
                return
            for view in page.data:
                if only is None or view.checkpoint_id == only:
                    yield self._tuple(await self._afilled(view))
                    left = None if left is None else left - 1
                    if left == 0:
                        return
            if not page.has_more:
                return
            cursor = page.next_cursor

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        ref = await self.aclient.put_checkpoint(self._put_body(config, checkpoint, metadata, new_versions))
        return _ref(ref.thread_id, ref.checkpoint_ns, ref.checkpoint_id)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        await self.aclient.put_checkpoint_writes(self._writes_body(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        try:
            await self.aclient.delete_checkpoint_thread(str(thread_id))
        except NotFound:
            pass

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        if run_ids:
            await self.aclient.delete_checkpoint_runs([str(r) for r in run_ids])

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        try:
            await self.aclient.copy_checkpoint_thread(str(source_thread_id), str(target_thread_id))
        except NotFound:
            pass

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if thread_ids:
            await self.aclient.prune_checkpoints([str(t) for t in thread_ids], _keep(strategy))


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


__all__ = ["RecallSaver", "RecallStore", "decode_label", "encode_label", "strict_serde", "value_contains"]
