"""Internal rows: what queries read from PostgreSQL and spill renders (never on the wire).

Wire shapes live in recall_server/models, which holds only what openapi.yaml publishes.
"""

from __future__ import annotations

from datetime import datetime

from msgspec import Struct

from recall_server.models import Event, Link, Timestamp

class TriggerRow(Struct):
    id: str
    source: str
    thread_id: str | None
    summary: str
    content_type: str
    size: int
    head: bytes  # the whole content when it may fit the budget, else a preview-length prefix
    occurred_at: Timestamp
    created_at: Timestamp
    neighbours: list[Link]
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: datetime | None = None
    namespace: str = ""  # segments joined by '/'; '' for the tenant's root
    gone: bool = False
    tail: bytes = b""  # the last PREVIEW_BYTES when `head` is only a prefix (a text preview shows both ends)


class ThreadRow(Struct):
    id: str
    title: str
    summary: str
    status: str
    last_seq: int
    created_at: Timestamp
    updated_at: Timestamp
    owners: list[Link]
    events: list[Event]  # newest first
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: datetime | None = None
    namespace: str = ""  # segments joined by '/'; '' for the tenant's root
    gone: bool = False
    checkpoints: int = 0  # LangGraph checkpoints kept under this thread's ID (top-level namespace)
    latest_checkpoint: str | None = None


class WorkerRow(Struct):
    id: str
    name: str
    summary: str
    created_at: Timestamp
    threads_total: int
    threads: list[Link]  # most recently assigned first
    reports_total: int
    reports: list[Link]  # newest first
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: datetime | None = None
    namespace: str = ""  # segments joined by '/'; '' for the tenant's root
    gone: bool = False


class ReportRow(Struct):
    id: str
    worker_id: str
    thread_id: str
    summary: str
    content_type: str
    size: int
    head: bytes
    created_at: Timestamp
    refs: list[Link]
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: datetime | None = None
    namespace: str = ""  # segments joined by '/'; '' for the tenant's root
    gone: bool = False
    tail: bytes = b""  # as TriggerRow.tail


class MemoryRow(Struct):
    id: str
    namespace: str  # segments joined by '/'
    key: str
    kind: str
    summary: str
    content_type: str
    size: int
    head: bytes
    tags: dict[str, str]
    confirmed: str
    current: bool
    version: int
    created_at: Timestamp
    sources: list[Link]
    tail: bytes = b""  # as TriggerRow.tail
    chain_created_at: Timestamp | None = None  # version 1's created_at, on later versions
    supersedes: Link | None = None
    superseded_by: Link | None = None
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: datetime | None = None
    gone: bool = False
    source_erased: list[str] = []  # erased IDs it was learned from, flagged by the tenant's lineage policy


class Labels(Struct, frozen=True):
    """Scopes inside a tenant (app, agent, run) narrow retrieval and are not a security boundary; the namespace
    (segments joined by '/', '' for the tenant's root) is where a key's grants apply."""

    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    namespace: str = ""

    def key(self) -> str:
        return f"{self.app_id}\0{self.agent_id}\0{self.run_id}\0{self.namespace}"


class Content(Struct):
    """A trigger's payload or a report's body, as read for serving."""

    content_type: str
    data: bytes | None  # None: the bytes are the caller's known ones (same SHA-256)
    sha256: bytes
    gone: bool


class Outcome(Struct, kw_only=True):
    """The result of a POST, as sent and as recorded for Idempotency-Key replays."""

    status: int
    body: bytes | None  # None only when read back after an erasure scrubbed it: render again
    object_id: str
    location: str | None = None
    event_seq: int | None = None  # the outcome is that event of thread `object_id`
    replayed: bool = False


class Stored(Struct):
    """An Idempotency-Key's record: what the request was (its fingerprint), and its outcome."""

    fingerprint: bytes
    outcome: Outcome


class SearchRow(Struct):
    """A search hit as read: `position` is the score exactly (PostgreSQL's numeric text), for the cursor."""

    id: str
    type: str
    summary: str
    score: float
    created_at: datetime
    snippet: str | None
    position: str
    thread_id: str | None = None  # a trigger's or report's thread
    lexical_rank: int | None = None  # ranked modes: the hit's rank in each arm (None: the arm missed it)
    semantic_rank: int | None = None
    lexical_score: float | None = None
    semantic_score: float | None = None
    fused_rank: int | None = None  # the hit's rank and score in the arms' fusion, before the rerank stage
    fused_score: float | None = None
    cosine: float | None = None  # the question's vector and the object's (None: it has none of the model)
    named: bool = False  # the question names it by its ID
    near: bool = False  # below the floor: one of the nearest candidates shown beside a page with no hit


class BacklinkRow(Struct):
    relation: str
    id: str
    type: str
    summary: str
