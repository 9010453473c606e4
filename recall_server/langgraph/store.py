"""RecallStore: LangGraph's BaseStore on recall-server's memories, over the HTTP API through the client.

    store = RecallStore()                  # or RecallStore("http://host:8000", "rk_...")
    graph = builder.compile(store=store)   # nodes take `store: BaseStore`; tenancy comes from the key

Mapping (each op is written once, as a generator of client calls, and driven by the sync client for
`batch` or the async one for `abatch`; as in InMemoryStore, a batch's reads answer first and its puts, the
last per (namespace, key), are applied after them):

- GetOp       -> GET /memories/current (a 404 or 410 is None); a spilled value is read from its value link.
- PutOp       -> POST /memories: a new version of (namespace, key) supersedes the current one. Recall keeps
                 superseded versions readable by ID (GET /memories/{id}/versions); the store never returns them.
                 `ttl` (minutes) becomes the memory's ttl in whole seconds (rounded up), which the server
                 keeps: a read with `refresh_ttl` (GetOp, SearchOp) extends the items it answers that expire
                 by their ttl from now (POST /memories/refresh, one call for a search's items). The server
                 embeds it (the whole item, whatever fields `index` names) unless `index=False`: then it has no vector, and a search by meaning never finds it.
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

The sync methods refuse to run on a thread with a running event loop (asyncio.InvalidStateError, as
LangGraph's async stores refuse): there, use the a-methods. A filter key names a member of that name, or
if there is none and the key is dotted, a nested member (`user.access-level`, as SqliteStore reads it).

Namespaces and keys are encoded as codec.py describes (exactly and reversibly). Item.created_at is when
version 1 of the pair's chain was written, updated_at when the current version was.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable
from typing import Any

import msgspec

try:
    from langgraph.store.base import (
        BaseStore, GetOp, Item, ListNamespacesOp, Op, PutOp, Result, SearchItem, SearchOp, TTLConfig,
    )
except ImportError as missing:  # an optional extra: the server and client do not need it
    raise ImportError("recall_server.langgraph needs langgraph: pip install 'recall-server[langgraph]'") from missing
try:
    from langgraph.store.base import validate_op_namespace
except ImportError:
    validate_op_namespace = None  # type: ignore[assignment]

from recall_server.client import AsyncRecallClient, Gone, NotFound, RecallClient
from recall_server.langgraph.codec import (
    MAX_SEGMENTS,
    decode_namespace,
    encode_namespace,
    filter_matches,
    literal_part,
    namespace_matches,
    original,
    stored_key,
    stored_value,
    value_contains,
)
from recall_server.langgraph.steps import PAGE, OnClient, Steps
from recall_server.models import MemoryIndexEntry, MemoryView

GET_BUDGET = 65_536  # a get answers values up to about this size in one request (larger ones: a second, for the value)


class RecallStore(OnClient, BaseStore):
    """A LangGraph BaseStore on recall-server memories. `kind` is the kind every put writes (fact by default)."""

    supports_ttl = True

    def __init__(self, url: str | None = None, key: str | None = None, *, kind: str = "fact", run: str | None = None,
                 client: RecallClient | None = None, aclient: AsyncRecallClient | None = None,
                 index: dict[str, Any] | None = None, search_mode: str | None = None,
                 ttl: TTLConfig | None = None) -> None:
        """`index`: LangGraph's index configuration, accepted for compatibility: the server embeds every memory
        with its own embedder (RECALL_EMBEDDER), so `embed`, `dims` and `fields` are not used. `search_mode`:
        how a query ranks (GET /search's mode): semantic when `index` is given, else the server's default
        (hybrid: words and meaning). `ttl`: LangGraph's TTLConfig, `default_ttl` (minutes) for a put without
        its own and `refresh_on_read` (True by default, as LangGraph's): whether a read extends an item's
        expiry by its ttl when the call does not say (`refresh_ttl`)."""
        OnClient.__init__(self, url, key, run, client, aclient)
        self.ttl_config = ttl
        self.kind = kind
        self.index_config = index
        self.search_mode = search_mode or ("semantic" if index is not None else None)

    # ---- batch: reads first, then the batch's puts (the last per (namespace, key) wins), as InMemoryStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        _off_the_loop()
        answers, puts = self._plan(ops)
        results = [self.drive(steps) for steps in answers]
        for steps in puts:
            self.drive(steps)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        answers, puts = self._plan(ops)
        results = [await self.adrive(steps) for steps in answers]
        for steps in puts:
            await self.adrive(steps)
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
        if op.refresh_ttl and view.expires_at is not None:
            yield lambda c: c.refresh_memories([view.id])
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
        expiring: list[str | None] = []  # beside each found item: its memory's ID if it expires
        skip, want = max(op.offset, 0), op.limit
        cursor = None
        while len(found) < skip + want:
            page = yield lambda c, cursor=cursor: c.list_memories(
                namespace=namespace, value_contains=pushed, cursor=cursor, limit=PAGE)
            for entry in page.data:
                item = yield from self._search_item(entry)
                if item is not None and filter_matches(item.value, op.filter):
                    found.append(item)
                    expiring.append(entry.id if entry.expires_at is not None else None)
            if not page.has_more:
                break
            cursor = page.next_cursor
        yield from _refresh(op, expiring[skip:skip + want])
        return found[skip:skip + want]

    def _ranked_search(self, op: SearchOp, namespace: str | None) -> Steps:
        """A query: the server's ranking (GET /search, memories under the prefix, `search_mode`), each hit read as
        an item and filtered here, best first, its score the server's. Without the rerank stage: LangGraph's
        store search returns every match by similarity (no floor), its score the arm's (semantic: a cosine)."""
        found: list[SearchItem] = []
        expiring: list[str | None] = []
        skip, want = max(op.offset, 0), op.limit
        cursor = None
        query = op.query[:256]  # the server's bound on a question
        while len(found) < skip + want:
            # without a filter every hit is an item: ask for what is still missing; with one, a page of 100
            ask = 100 if op.filter else min(100, skip + want - len(found))
            page = yield lambda c, cursor=cursor, ask=ask: c.search(query, mode=self.search_mode, type="memory",
                                                                    namespace=namespace, cursor=cursor, limit=ask,
                                                                    rerank=False)
            for hit in page.data:
                if len(found) >= skip + want:
                    break
                try:
                    view: MemoryView = yield lambda c, hit=hit: c.get(hit.id, GET_BUDGET)
                except (NotFound, Gone):  # deleted since the search read it
                    continue
                item = yield from self._view_item(view)
                if item is not None and filter_matches(item.value, op.filter):
                    item.score = hit.score
                    found.append(item)
                    expiring.append(view.id if view.expires_at is not None else None)
            if not page.has_more:
                break
            cursor = page.next_cursor
        yield from _refresh(op, expiring[skip:skip + want])
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
            prefix = encode_namespace(literal_part(prefixes[0])) if prefixes and literal_part(prefixes[0]) else None
            suffix = encode_namespace(literal_part(suffixes[0])) if suffixes and literal_part(suffixes[0]) else None
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
                if exact or all(namespace_matches(c, namespace) for c in conditions):
                    found.add(namespace if op.max_depth is None else namespace[:op.max_depth])
            if not page.has_more:
                break
            cursor = page.next_cursor
        return sorted(found)[op.offset:op.offset + op.limit]


def _off_the_loop() -> None:
    """A sync call on an event loop's thread would block every task of that loop for each HTTP round trip:
    refused with InvalidStateError, as LangGraph's async stores (AsyncSqliteStore, AsyncPostgresStore) refuse
    it. On another thread (asyncio.to_thread, a sync graph's worker) the sync methods work."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise asyncio.InvalidStateError(
        "Synchronous calls to RecallStore are only allowed from a thread without a running event loop: in async "
        "code, use the a-methods (aget, aput, asearch, ...) or run the call with asyncio.to_thread.")


def _refresh(op: SearchOp, expiring: list[str | None]) -> Steps:
    """A search that refreshes (refresh_ttl): one call extending every returned item that expires."""
    due = [memory_id for memory_id in expiring if memory_id is not None]
    if op.refresh_ttl and due:
        yield lambda c: c.refresh_memories(due)


def _none() -> Steps:
    return None
    yield  # a generator that makes no call


def _validate(op: Op) -> None:
    """LangGraph's own label checks for ops passed straight to batch (no empty label, no '.')."""
    if validate_op_namespace is not None:  # older langgraph: its BaseStore methods check before batching
        validate_op_namespace(op)
