"""Request bodies for the graph (triggers, threads, workers, reports, notes), memories and keys."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from recall_server import ids, text
from recall_server.models.common import AnyId, ContentType, DateTimeText, DisplayLabel, Label, MemoryId, Name, Namespace, OneLine, ReportId, Request, Source, SourceId, Status, Summary, ThreadId, Title, TriggerId, TriggerLinks, WorkerId
from recall_server.models.hooks import Delivery


class NewObject(Request, kw_only=True):
    """The labels, place and lifetime every graph object is created with (kept after its own fields)."""

    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    namespace: Namespace | None = None  # where a key's grants apply; none: the tenant's root
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class CreateTrigger(NewObject, kw_only=True):
    id: TriggerId | None = None
    source: Source
    thread_id: ThreadId | None = None
    summary: Summary
    payload: Any = None
    content_type: ContentType | None = None
    neighbours: TriggerLinks = []
    occurred_at: DateTimeText | None = None
    external_id: Annotated[str, Meta(min_length=1, max_length=200, pattern=OneLine,
                                     description="Delivery ID: one trigger per (source, external_id).")] | None = None


class ExtractSetting(Request, kw_only=True):
    """Memories extracted from the thread's messages (docs/conversations.md#extraction), written into `namespace`
    with the grants of the key that appended them."""

    namespace: Namespace


ExtractField = Annotated[ExtractSetting | None, Meta(
    description="Extract memories from its messages into this namespace; null: never (not even by the tenant's "
                "default). Absent: the tenant's default, if it has one.")]


class CreateThread(NewObject, kw_only=True):
    id: ThreadId | None = None
    title: Title
    summary: Summary = ""
    status: Status = "open"
    extract: ExtractField | UnsetType = UNSET


class UpdateThread(Request, kw_only=True):
    title: Title | UnsetType = UNSET
    summary: Summary | UnsetType = UNSET
    status: Status | UnsetType = UNSET
    extract: ExtractField | UnsetType = UNSET


class CreateWorker(NewObject, kw_only=True):
    id: WorkerId | None = None
    name: Name
    summary: Summary = ""


class AssignOwner(Request, kw_only=True):
    worker_id: WorkerId


class CreateReport(NewObject, kw_only=True):
    id: ReportId | None = None
    thread_id: ThreadId
    summary: Summary
    body: Any = None
    content_type: ContentType | None = None
    refs: TriggerLinks = []


class CreateNote(Request, kw_only=True):
    summary: Summary
    ref: AnyId | None = None


# ---- memories --------------------------------------------------------------------------
MemoryKey = Annotated[str, Meta(min_length=1, max_length=256, pattern=text.KEY, examples=["tone"])]
# Tag and source limits are what keep a memory's core inside the smallest budget (tests/test_memories.py).
TagKey = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._-]{1,24}\Z")]
TagValue = Annotated[str, Meta(max_length=24, pattern=r"^[A-Za-z0-9._:/@+-]*\Z")]
Tags = Annotated[dict[TagKey, TagValue], Meta(max_length=16, description="At most 16; filter with tag=key:value.")]
# A tag filter (GET /memories?tag=): key:value with a key. Unanchored at its end, as JSON Schema reads patterns
# (openapi.py publishes it on the parameter's items): the value may be anything.
TagFilter = Annotated[str, Meta(pattern=r"^[^:]+:")]
MAX_SOURCES = 8
Sources = Annotated[list[SourceId], Meta(max_length=MAX_SOURCES, description=(
    "IDs it was learned from (objects', or a thread's message as `<thread ID>/<seq>`); each must be live."))]


class CreateMemory(Request, kw_only=True):
    id: MemoryId | None = None
    namespace: Namespace
    key: MemoryKey
    kind: ids.MemoryKind = "fact"
    value: Any
    content_type: ContentType | None = None
    summary: Summary = ""
    tags: Tags = {}
    sources: Sources = []
    confirmed: Literal["user", "agent", "unconfirmed"] = "unconfirmed"
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None
    embed: Annotated[bool, Meta(description="False: no vector is made of it, so search by meaning never finds it "
                                            "(words still do).")] = True


class RefreshMemories(Request, kw_only=True):
    ids: Annotated[list[MemoryId], Meta(min_length=1, max_length=100, description=(
        "Memories to refresh: each live one written with a ttl expires that ttl from now."))]


class Grant(Struct, forbid_unknown_fields=True, kw_only=True):
    """Access to the namespaces a pattern covers: segments, `{subject_id}` / `{subject_kind}` for the key's
    subject's, and a trailing `/**` for everything under it (`**` alone: the whole tenant). write includes read."""

    namespace: Annotated[str, Meta(max_length=600, pattern=ids.GRANT_PATTERN, examples=["users/{subject_id}/**"])]
    access: Literal["read", "write"]


Grants = Annotated[list[Grant], Meta(max_length=32, description="None: the key reaches its whole tenant.")]
Subject = Annotated[str, Meta(pattern=ids.SUBJECT_PATTERN, examples=["user:u123"],
                              description="Who the key speaks for: `<kind>:<id>`, e.g. user:u123, team:payments.")]


class CreateKey(Request, kw_only=True):
    scope: Literal["read", "write", "admin"]
    label: DisplayLabel = ""  # its display name
    subject: Subject | None = None
    grants: Grants = []


class UpdateKey(Request, kw_only=True):
    """A key's new grants, in place of its old ones; they hold from the next request on, in every process."""

    grants: Grants
