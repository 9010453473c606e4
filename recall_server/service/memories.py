"""The memory operations (mem_): versions by supersede per (namespace, key), lists, namespaces, values.

`Memories` is composed with the views and the writes (a memory's view by ID, its value and its deletion
are theirs, as for every kind) and uses the same mechanisms (tenancy, Pager, idempotency, require_live);
what is particular to memories is the pair lock that serialises writers of one (namespace, key) so its
chain of versions stays gap-free with exactly one current version.
"""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime

import msgspec

from recall_server import ids, spill, text
from recall_server.auth import Credential
from recall_server.cursor import CursorCodec, json_size
from recall_server.db import queries as q
from recall_server.db import tenancy
from recall_server.db.pool import Database
from recall_server.errors import BadRequest, Gone, NotFound, Unprocessable, require_live
from recall_server.ids import State
from recall_server.models import (
    SEGMENT,
    CreateMemory,
    MemoryIndexEntry,
    MemoryPage,
    MemoryVersion,
    MemoryVersionPage,
    MemoryView,
    NamespacePage,
    RefreshedMemories,
    RefreshedMemory,
    RefreshMemories,
)
from recall_server.rows import Labels, Outcome
from recall_server.service import idempotency
from recall_server.service.inputs import bound, created, encode_content, expiry, json, request_hash
from recall_server.service.views import Views
from recall_server.service.writes import Writes

LIST_INLINE_BYTES = 2048  # a list entry carries its value when it is at most this long
_SEGMENT = re.compile(SEGMENT)


def pair_hash(namespace: str, key: str) -> bytes:
    """What identifies a (namespace, key) after its versions are erased: so a deleted pair is a 410."""
    return hashlib.sha256(f"{namespace}\0{key}".encode()).digest()


def namespace_param(field: str, value: str | None) -> str | None:
    """A namespace in a URL: its segments joined by '/' (e.g. users/u1). 400 unless 1-8 valid segments."""
    if value is None:
        return None
    segments = value.split("/")
    if not 1 <= len(segments) <= 8 or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise BadRequest(f"{field} must be 1-8 segments of [A-Za-z0-9_-]{{1,64}} joined by '/', got {value!r}.",
                         field=field)
    return value


def memory_key(key: str) -> str:
    """A key as stored (Unicode NFC); 400 naming the character for one drawn as nothing (text.memory_key)."""
    try:
        return text.memory_key(key)
    except ValueError as exc:
        raise BadRequest(str(exc), field="key") from None


def tag_filter(tags: list[str] | None) -> tuple[str | None, bool]:
    """`tag=key:value` parameters as the JSON object a memory's tags must contain, and whether a memory can
    match them at all: a tag given twice with two values matches none (a memory has one value a tag)."""
    if not tags:
        return None, True
    found: dict[str, str] = {}
    possible = True
    for tag in tags:
        name, sep, value = tag.partition(":")
        if not sep or not name:  # the published pattern (routes/memories.py) refuses it first
            raise BadRequest(f"tag must be key:value, got {tag!r}.", field="tag")
        possible = possible and found.setdefault(name, value) == value
    return json(found).decode(), possible


def value_filter(text: str | None) -> str | None:
    """`value_contains`: a JSON object that a JSON value must contain (PostgreSQL jsonb @>)."""
    if text is None:
        return None
    try:
        parsed = msgspec.json.decode(text)
    except msgspec.DecodeError:
        raise BadRequest("value_contains must be a JSON object.", field="value_contains") from None
    if not isinstance(parsed, dict):
        raise BadRequest("value_contains must be a JSON object.", field="value_contains")
    return text


# What the statement recodes in a filter (db/queries/memories.py, _NUL_FREE): NUL or U+FFFF, escaped or raw.
# A match in what only looks like one (an escaped backslash, then "u0000") recodes a filter that means the same.
_RECODED = re.compile(r"\\u0000|\\u[fF]{4}|\uffff")


def recode_filter(value_json: str | None) -> bool:
    """Whether a value filter holds a NUL (which jsonb cannot) or a U+FFFF, so the statement recodes it."""
    return value_json is not None and _RECODED.search(value_json) is not None


class Memories:
    """The memory operations, for one store (a memory by ID, its value and its deletion: `Views`, `Writes`)."""

    def __init__(self, db: Database, cursors: CursorCodec, views: Views, writes: Writes) -> None:
        self.db = db
        self.cursors = cursors
        self.views = views
        self.writes = writes

    # ---- reads -----------------------------------------------------------------------

    async def get_current_memory(self, cred: Credential, namespace: str, key: str, budget: int,
                                 as_of: str | None = None) -> MemoryView:
        """The pair's current version (`as_of`: the one current at that time): 404 if the pair never had one
        (by then), 410 if it was deleted or has expired (by then; an erased memory is gone at every time)."""
        key = memory_key(key)
        at = bound("as_of", as_of)
        async with self.db.connection() as conn:
            if at is None:
                _, row = await q.fetch_current_memory(conn, cred, namespace, key, budget, spill.PREVIEW_BYTES)
            else:
                _, row = await q.fetch_memory_as_of(conn, cred, namespace, key, at, budget, spill.PREVIEW_BYTES)
            if row is None and await q.memory_pair_existed(conn, cred, pair_hash(namespace, key), at):
                state = State.GONE
            else:
                state = State.MISSING if row is None else State.of(row.gone)
        where = f"{key!r} in namespace {namespace}"
        if state is State.MISSING:
            raise _pair_miss(f"No memory {where} exists.", namespace, key)
        if state is State.GONE:
            raise _pair_gone(f"The memory {where} was deleted or has expired.", namespace, key)
        assert row is not None
        return spill.memory_view(row, budget)

    async def list_memories(self, cred: Credential, namespace: str | None, kind: str | None, tags: list[str] | None,
                            labels: Labels, value_contains: str | None, cursor: str | None,
                            limit: int, as_of: str | None = None) -> MemoryPage:
        """Current live memories in (namespace, key) order; `as_of`: those current then."""
        at = bound("as_of", as_of)
        (tag_json, possible), value_json = tag_filter(tags), value_filter(value_contains)
        pager = self.cursors.pager(cursor, tuple[str, str], "memories", namespace, kind, tag_json, labels.key(),
                                   value_json, *([at] if at else []))
        async with self.db.connection() as conn:  # tags no memory can match read no row (and still check a cursor)
            tenant, rows = await q.list_memories(conn, cred, namespace, kind, tag_json, labels, value_json,
                                                 pager.after, limit + 1 if possible else 0, LIST_INLINE_BYTES,
                                                 recode_filter(value_json), at)
        entries = []
        for r in rows:
            entry = MemoryIndexEntry(
                id=r.id, namespace=r.namespace.split("/"), key=r.key, kind=r.kind, version=r.version,
                summary=r.summary, content_type=r.content_type, tags=r.tags, confirmed=r.confirmed,
                created_at=r.created_at, href=f"/memories/{r.id}", expires_at=r.expires_at,
                chain_created_at=r.chain_created_at, source_erased=r.source_erased or [],
            )
            if r.text is None:
                entry.value_href = f"/memories/{r.id}/value"
            else:
                entry.value = msgspec.Raw(r.text.encode()) if spill.is_json(r.content_type) else r.text
            entries.append(entry)
        shown, next_cursor, has_more = pager.page(tenant, entries, limit, lambda e: ["/".join(e.namespace), e.key],
                                                  size=json_size)
        return MemoryPage(data=shown, next_cursor=next_cursor, has_more=has_more)

    async def list_memory_versions(self, cred: Credential, memory_id: str, cursor: str | None,
                                   limit: int, as_of: str | None = None) -> MemoryVersionPage:
        """Newest first: the chain of versions the memory belongs to (`as_of`: as it was then)."""
        at = bound("as_of", as_of)
        await self.views.authenticated_miss(cred, "memory", memory_id)
        pager = self.cursors.pager(cursor, tuple[int], "memory_versions", memory_id, *([at] if at else []))
        before = (pager.after or (2**31 - 1,))[0]
        async with self.db.connection() as conn:
            tenant, state, rows = await q.list_memory_versions(conn, cred, memory_id, before, limit + 1, at)
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, lambda r: [r.version])
        require_live(state, memory_id, "memory")
        data = [MemoryVersion(id=r.id, version=r.version, summary="" if r.gone else r.summary,
                              status="deleted" if r.gone else "current" if r.current else "superseded",
                              created_at=r.created_at, href=f"/memories/{r.id}") for r in shown]
        return MemoryVersionPage(data=data, next_cursor=next_cursor, has_more=has_more)

    async def list_memory_namespaces(self, cred: Credential, prefix: str | None, suffix: str | None,
                                     max_depth: int | None, cursor: str | None, limit: int) -> NamespacePage:
        pager = self.cursors.pager(cursor, tuple[str], "memory_namespaces", prefix, suffix, max_depth)
        async with self.db.connection() as conn:
            tenant, found = await q.list_memory_namespaces(conn, cred, prefix, suffix, max_depth,
                                                           pager.after[0] if pager.after else None, limit + 1)
        shown, next_cursor, has_more = pager.page(tenant, found, limit, lambda ns: [ns])
        return NamespacePage(data=[ns.split("/") for ns in shown], next_cursor=next_cursor, has_more=has_more)

    # ---- writes ----------------------------------------------------------------------

    async def create_memory(self, cred: Credential, req: CreateMemory, idempotency_key: str | None) -> Outcome:
        """A new version of (namespace, key): the pair's current version, if any, is superseded by it."""
        memory_id = req.id or ids.new("memory")
        namespace, key = "/".join(req.namespace), memory_key(req.key)  # the fingerprints below: as sent
        content_type, value = encode_content("value", req.value, req.content_type)
        expires_at = expiry(req)
        h = request_hash(msgspec.structs.replace(req, id=memory_id))
        sources = list(dict.fromkeys(req.sources))

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            await q.lock_memory_pair(conn, tenant, namespace, key)
            if req.id is not None:  # a client-chosen ID: a retry of this very request, or a clash
                state, found = await q.request_hash(conn, tenant, "memory", memory_id)
                if state is not State.MISSING:
                    await self.writes.existing_or_conflict(conn, tenant, "memory", memory_id, h)
                    return created(False, await self.views.view(conn, cred, memory_id, spill.DEFAULT_BUDGET),
                                   f"/memories/{memory_id}")
            if memory_id in sources:
                raise Unprocessable("A memory cannot be its own source.", id=memory_id)
            await self.writes.require_links(conn, tenant, sources)
            await q.insert_memory(
                conn, tenant, memory_id, namespace, key, pair_hash(namespace, key), req.kind, req.summary,
                content_type, value, hashlib.sha256(value).digest(), json(req.tags).decode(), req.confirmed,
                Labels(app_id=req.app_id, agent_id=req.agent_id, run_id=req.run_id), h, expires_at, req.embed,
            )
            if sources:
                await q.insert_memory_sources(conn, tenant, memory_id, sources)
            if req.ttl is not None:
                await q.keep_memory_ttl(conn, tenant, memory_id, req.ttl)
            return created(True, await self.views.view(conn, cred, memory_id, spill.DEFAULT_BUDGET, created=True),
                           f"/memories/{memory_id}")

        return await self.writes.write(cred, idempotency_key, idempotency.fingerprint("POST", "/memories", req),
                                       operation)


    async def refresh_memories(self, cred: Credential, req: RefreshMemories) -> RefreshedMemories:
        """Each live memory written with a ttl expires that ttl from now (LangGraph's refresh_on_read)."""
        async with tenancy.session(self.db, cred, "write") as (conn, tenant):
            found = await q.refresh_memories(conn, tenant, list(dict.fromkeys(req.ids)), datetime.now(UTC))
        return RefreshedMemories(data=[RefreshedMemory(id=i, expires_at=at) for i, at in found])


def _pair_miss(detail: str, namespace: str, key: str) -> NotFound:
    return NotFound(detail, namespace=namespace.split("/"), key=key)


def _pair_gone(detail: str, namespace: str, key: str) -> Gone:
    return Gone(detail, namespace=namespace.split("/"), key=key)
