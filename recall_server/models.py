"""msgspec Structs: the wire shapes published in openapi.yaml.

Request Structs forbid unknown fields, so a typo is a 400, not a silently dropped field.
Length limits are what keep every inline view inside the smallest allowed budget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from recall_server import ids

MAX_LINKS = 16  # neighbours, refs and owners per object: bounded so an inline view always fits

# One line, and shown as written: no C0/C1 controls (U+0085 is a line break), no U+2028/U+2029, and no
# bidi controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069) that reorder what a reader sees.
OneLine = r"^[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]*$"
AnyId = Annotated[str, Meta(pattern=ids.ANY_ID_PATTERN, examples=["thr_pr_412"])]
Title = Annotated[str, Meta(min_length=1, max_length=120, pattern=OneLine)]
Summary = Annotated[str, Meta(max_length=200, pattern=OneLine)]
Name = Annotated[str, Meta(min_length=1, max_length=80, pattern=OneLine)]
Source = Annotated[str, Meta(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._:/-]+$", examples=["github.check_run"])]
Status = Annotated[str, Meta(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+$", examples=["open", "merged", "closed"])]
ContentType = Annotated[
    str, Meta(max_length=100, pattern=r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+$", examples=["text/plain"])
]
Links = Annotated[list[AnyId], Meta(max_length=MAX_LINKS)]
Label = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$", examples=["router-1"])]
Timestamp = Annotated[datetime, Meta(extra_json_schema={"format": "date-time"})]
# A string in bodies: Litestar decodes bodies leniently and would take a number as Unix seconds.
DateTimeText = Annotated[str, Meta(max_length=64, extra_json_schema={"format": "date-time"})]


class Request(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


class CreateTrigger(Request, kw_only=True):
    id: AnyId | None = None
    source: Source
    thread_id: AnyId | None = None
    summary: Summary
    payload: Any = None
    content_type: ContentType | None = None
    neighbours: Links = []
    occurred_at: DateTimeText | None = None
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None
    external_id: Annotated[str, Meta(min_length=1, max_length=200, pattern=OneLine,
                                     description="Delivery ID: one trigger per (source, external_id).")] | None = None


class CreateThread(Request, kw_only=True):
    id: AnyId | None = None
    title: Title
    summary: Summary = ""
    status: Status = "open"
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class UpdateThread(Request, kw_only=True):
    title: Title | UnsetType = UNSET
    summary: Summary | UnsetType = UNSET
    status: Status | UnsetType = UNSET


class CreateWorker(Request, kw_only=True):
    id: AnyId | None = None
    name: Name
    summary: Summary = ""
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class AssignOwner(Request, kw_only=True):
    worker_id: AnyId


class CreateReport(Request, kw_only=True):
    id: AnyId | None = None
    thread_id: AnyId
    summary: Summary
    body: Any = None
    content_type: ContentType | None = None
    refs: Links = []
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class CreateNote(Request, kw_only=True):
    summary: Summary
    ref: AnyId | None = None


class CreateKey(Request, kw_only=True):
    scope: Literal["read", "write", "admin"]
    label: Annotated[str, Meta(max_length=80, pattern=OneLine)] = ""


# ---- responses -------------------------------------------------------------------------


class Link(Struct, omit_defaults=True):
    """A neighbour in the graph: its ID and, when the budget allows, its one-line summary."""

    id: str
    summary: str | UnsetType = UNSET
    refs: list[str] | UnsetType = UNSET  # on a worker's reports: the trigger IDs each one cites
    deleted: bool = False  # the linked object was deleted or has expired: only its ID remains


class Event(Struct, omit_defaults=True):
    seq: int
    type: str
    at: Timestamp
    summary: str
    ref: str | None
    ref_deleted: bool = False  # the event stays; its target is gone


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


class TriggerView(Struct, omit_defaults=True):
    id: str
    source: str
    thread_id: str | None
    summary: str
    content_type: str
    neighbours: list[Link]
    occurred_at: Timestamp
    created_at: Timestamp
    links: dict[str, str]
    payload: Any | UnsetType = UNSET
    spilled: Spilled | UnsetType = UNSET
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None


class ThreadView(Struct, omit_defaults=True):
    id: str
    title: str
    summary: str
    status: str
    owner_workers: list[Link]
    events: list[Event]
    events_total: int
    created_at: Timestamp
    updated_at: Timestamp
    links: dict[str, str]
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None


class WorkerView(Struct, omit_defaults=True):
    id: str
    name: str
    summary: str
    threads: list[Link]
    threads_total: int
    reports: list[Link]
    reports_total: int
    created_at: Timestamp
    links: dict[str, str]
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None


class ReportView(Struct, omit_defaults=True):
    id: str
    worker_id: str
    thread_id: str
    summary: str
    content_type: str
    refs: list[Link]
    created_at: Timestamp
    links: dict[str, str]
    body: Any | UnsetType = UNSET
    spilled: Spilled | UnsetType = UNSET
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None


class ThreadIndexEntry(Struct):
    id: str
    title: str
    status: str
    summary: str
    updated_at: Timestamp
    href: str


class ReportIndexEntry(Struct):
    id: str
    thread_id: str
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
    id: str
    type: str
    href: str
    summary: str


class KeyView(Struct):
    """An API key as listed: never its secret."""

    id: str
    tenant: str
    scope: str
    label: str
    created_at: Timestamp
    revoked_at: Timestamp | None


class NewKey(Struct):
    """A key just created: the only time its secret (`key`) is ever shown."""

    id: str
    tenant: str
    scope: str
    label: str
    created_at: Timestamp
    key: str


class KeyList(Struct):
    data: list[KeyView]


class Health(Struct):
    status: str


class ProblemBody(Struct):
    """RFC 9457 problem details, as every error is rendered."""

    type: str
    title: str
    status: int
    detail: str
    instance: str


# ---- rows read from the database (internal, never on the wire) ----------------------------


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
    gone: bool = False


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
    gone: bool = False


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
    gone: bool = False


class Labels(Struct, frozen=True):
    """Scopes inside a tenant (app, agent, run): they narrow retrieval; they are not a security boundary."""

    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None

    def key(self) -> str:
        return f"{self.app_id}\0{self.agent_id}\0{self.run_id}"
