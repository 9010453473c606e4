"""What the graph's reads answer: views, pages, keys, health and problems."""

from __future__ import annotations

from typing import Any, Literal

from msgspec import UNSET, Struct, UnsetType

from recall_server.models.common import AnyId, MemoryId, ReportId, SourceId, ThreadId, Timestamp, TriggerId, WorkerId
from recall_server.models.requests import Grant


class Link(Struct, omit_defaults=True):
    """A neighbour in the graph: its ID and, when the budget allows, its one-line summary. A memory's source may
    be a message of a conversation (its ID `<thread ID>/<seq>`: what the memory was extracted from)."""

    id: SourceId  # any object's, or (a memory's source) a thread's message
    summary: str | UnsetType = UNSET
    refs: list[TriggerId] | UnsetType = UNSET  # on a worker's reports: the trigger IDs each one cites
    deleted: bool = False  # the linked object was deleted or has expired: only its ID remains


class Event(Struct, omit_defaults=True):
    seq: int
    type: str
    at: Timestamp
    summary: str
    ref: AnyId | None
    ref_deleted: bool = False  # the event stays; its target is gone
    retracted: bool = False  # a message a retraction took out (the log keeps it; views and replays skip it)


class Spill(Struct):
    """A pointer to content that did not fit the inline view."""

    href: str
    bytes: int
    content_type: str
    preview: str
    hint: str


class Spilled(Struct, omit_defaults=True):
    payload: Spill | UnsetType = UNSET
    body: Spill | UnsetType = UNSET
    value: Spill | UnsetType = UNSET


class ObjectView(Struct, omit_defaults=True, kw_only=True):
    """The labels, lifetime and place of a graph object, after its own fields in every view."""

    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None
    namespace: list[str] | None = None  # where a key's grants apply (docs/tenancy.md#grants); none: root


class TriggerView(ObjectView, omit_defaults=True):
    id: TriggerId
    source: str
    thread_id: ThreadId | None
    summary: str
    content_type: str
    neighbours: list[Link]
    occurred_at: Timestamp
    created_at: Timestamp
    links: dict[str, str]
    payload: Any | UnsetType = UNSET
    spilled: Spilled | UnsetType = UNSET


class ThreadView(ObjectView, omit_defaults=True):
    id: ThreadId
    title: str
    summary: str
    status: str
    owner_workers: list[Link]
    events: list[Event]
    events_total: int
    created_at: Timestamp
    updated_at: Timestamp
    links: dict[str, str]
    # A LangGraph run whose thread_id is this ID (RecallSaver): its checkpoints (top-level namespace) and the
    # newest one's ID; links.checkpoint reads that state, links.checkpoints lists them. Omitted when none.
    checkpoints: int | None = None
    latest_checkpoint: str | None = None


class WorkerView(ObjectView, omit_defaults=True):
    id: WorkerId
    name: str
    summary: str
    threads: list[Link]
    threads_total: int
    reports: list[Link]
    reports_total: int
    created_at: Timestamp
    links: dict[str, str]


class ReportView(ObjectView, omit_defaults=True):
    id: ReportId
    worker_id: WorkerId
    thread_id: ThreadId
    summary: str
    content_type: str
    refs: list[Link]
    created_at: Timestamp
    links: dict[str, str]
    body: Any | UnsetType = UNSET
    spilled: Spilled | UnsetType = UNSET


class MemoryView(Struct, omit_defaults=True):
    """One version of a memory. `status` is current or superseded (a superseded version stays readable)."""

    id: MemoryId
    namespace: list[str]
    key: str
    kind: str
    status: Literal["current", "superseded"]
    version: int
    summary: str
    content_type: str
    tags: dict[str, str]
    confirmed: str
    sources: list[Link]
    created_at: Timestamp
    links: dict[str, str]
    supersedes: Link | None = None
    superseded_by: Link | None = None
    value: Any | UnsetType = UNSET
    spilled: Spilled | UnsetType = UNSET
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None
    chain_created_at: Timestamp | None = None  # when version 1 of this chain was written (omitted on version 1)
    # erased IDs it was learned from, directly or through other memories (the tenant's lineage policy `flag`)
    source_erased: list[SourceId] = []


class MemoryIndexEntry(Struct, omit_defaults=True):
    """A current memory in a list: its value inline when small (else GET links.value)."""

    id: MemoryId
    namespace: list[str]
    key: str
    kind: str
    version: int
    summary: str
    content_type: str
    tags: dict[str, str]
    confirmed: str
    created_at: Timestamp
    href: str
    value: Any | UnsetType = UNSET
    value_href: str | UnsetType = UNSET
    expires_at: Timestamp | None = None
    chain_created_at: Timestamp | None = None  # when version 1 of this chain was written (omitted on version 1)
    source_erased: list[SourceId] = []  # as MemoryView's


class MemoryVersion(Struct, omit_defaults=True):
    id: MemoryId
    version: int
    status: Literal["current", "superseded", "deleted"]
    summary: str
    created_at: Timestamp
    href: str


class MemoryPage(Struct):
    data: list[MemoryIndexEntry]
    next_cursor: str | None
    has_more: bool


class RefreshedMemory(Struct):
    id: str
    expires_at: Timestamp


class RefreshedMemories(Struct):
    """The memories a refresh extended (a memory without a ttl, gone or unknown is not among them)."""

    data: list[RefreshedMemory]


class MemoryVersionPage(Struct):
    data: list[MemoryVersion]
    next_cursor: str | None
    has_more: bool


class NamespacePage(Struct):
    data: list[list[str]]
    next_cursor: str | None
    has_more: bool


class ThreadIndexEntry(Struct):
    id: ThreadId
    title: str
    status: str
    summary: str
    updated_at: Timestamp
    href: str


class ReportIndexEntry(Struct):
    id: ReportId
    thread_id: ThreadId
    summary: str
    created_at: Timestamp
    href: str


class ThreadPage(Struct):
    data: list[ThreadIndexEntry]
    next_cursor: str | None
    has_more: bool


class EventPage(Struct):
    data: list[Event]
    next_cursor: str | None
    has_more: bool


class ReportPage(Struct):
    data: list[ReportIndexEntry]
    next_cursor: str | None
    has_more: bool


class Resolved(Struct):
    id: AnyId
    type: str
    href: str
    summary: str


class KeyView(Struct):
    """An API key as listed: never its secret. last_used_at is kept to within a few seconds."""

    id: str
    tenant: str
    scope: str
    label: str
    created_at: Timestamp
    revoked_at: Timestamp | None
    subject: str | None = None
    grants: list[Grant] = []
    last_used_at: Timestamp | None = None


class NewKey(Struct):
    """A key just created: the only time its secret (`key`) is ever shown."""

    id: str
    tenant: str
    scope: str
    label: str
    created_at: Timestamp
    key: str
    subject: str | None = None
    grants: list[Grant] = []


class KeyList(Struct):
    data: list[KeyView]


class SearchStatus(Struct):
    """What GET /search can do now: its modes, the embedder, whether this database holds vectors, and why not."""

    modes: list[Literal["hybrid", "lexical", "semantic", "exact"]]
    embedder: str
    vectors: bool
    note: str | None = None


class Health(Struct, omit_defaults=True):
    status: str
    search: SearchStatus | None = None  # /readyz only


class ProblemBody(Struct):
    """RFC 9457 problem details, as every error is rendered."""

    type: str
    title: str
    status: int
    detail: str
    instance: str
