"""msgspec Structs: the wire shapes published in openapi.yaml.

One module although long: it is the whole published vocabulary, read beside openapi.yaml.

Request Structs forbid unknown fields, so a typo is a 400, not a silently dropped field.
Length limits are what keep every inline view inside the smallest allowed budget.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from recall_server import ids, text

MAX_LINKS = 16  # neighbours, refs and owners per object: bounded so an inline view always fits

# One line, and shown as written (text.py: what it refuses; webhook text is cleaned to it).
OneLine = text.ONE_LINE
# IDs of one kind where only that kind is allowed; AnyId where any kind is (links, refs, /ids/{id}).
ThreadId = Annotated[str, Meta(pattern=ids.pattern("thread"), examples=["thr_pr_412"])]
WorkerId = Annotated[str, Meta(pattern=ids.pattern("worker"), examples=["wkr_77a0"])]
TriggerId = Annotated[str, Meta(pattern=ids.pattern("trigger"), examples=["trg_8f21"])]
ReportId = Annotated[str, Meta(pattern=ids.pattern("report"), examples=["rpt_412a"])]
AnyId = Annotated[str, Meta(pattern=ids.ANY_ID_PATTERN, examples=["thr_pr_412"])]
MemoryId = Annotated[str, Meta(pattern=ids.pattern("memory"), examples=["mem_u1_tone"])]
Title = Annotated[str, Meta(min_length=1, max_length=120, pattern=OneLine)]
Summary = Annotated[str, Meta(max_length=200, pattern=OneLine)]
Name = Annotated[str, Meta(min_length=1, max_length=80, pattern=OneLine)]
Source = Annotated[str, Meta(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._:/-]+\Z", examples=["github.check_run"])]
Status = Annotated[str, Meta(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+\Z", examples=["open", "merged", "closed"])]
ContentType = Annotated[
    str, Meta(max_length=100, pattern=r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+\Z", examples=["text/plain"])
]
TriggerLinks = Annotated[list[TriggerId], Meta(max_length=MAX_LINKS)]
Label = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+\Z", examples=["router-1"])]
Timestamp = Annotated[datetime, Meta(extra_json_schema={"format": "date-time"})]
# A string in bodies: Litestar decodes bodies leniently and would take a number as Unix seconds.
DateTimeText = Annotated[str, Meta(max_length=64, extra_json_schema={"format": "date-time"})]


class Request(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


SEGMENT = r"^[A-Za-z0-9_-]{1,64}\Z"
Segment = Annotated[str, Meta(pattern=SEGMENT, examples=["users"])]
Namespace = Annotated[list[Segment], Meta(min_length=1, max_length=8, examples=[["users", "u1"]],
                                          description="A path of 1-8 segments, each like an ID body.")]


class CreateTrigger(Request, kw_only=True):
    id: TriggerId | None = None
    source: Source
    thread_id: ThreadId | None = None
    summary: Summary
    payload: Any = None
    content_type: ContentType | None = None
    neighbours: TriggerLinks = []
    occurred_at: DateTimeText | None = None
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    namespace: Namespace | None = None  # where a key's grants apply; none: the tenant's root
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None
    external_id: Annotated[str, Meta(min_length=1, max_length=200, pattern=OneLine,
                                     description="Delivery ID: one trigger per (source, external_id).")] | None = None


class CreateThread(Request, kw_only=True):
    id: ThreadId | None = None
    title: Title
    summary: Summary = ""
    status: Status = "open"
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    namespace: Namespace | None = None  # where a key's grants apply; none: the tenant's root
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class UpdateThread(Request, kw_only=True):
    title: Title | UnsetType = UNSET
    summary: Summary | UnsetType = UNSET
    status: Status | UnsetType = UNSET


class CreateWorker(Request, kw_only=True):
    id: WorkerId | None = None
    name: Name
    summary: Summary = ""
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    namespace: Namespace | None = None  # where a key's grants apply; none: the tenant's root
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class AssignOwner(Request, kw_only=True):
    worker_id: WorkerId


class CreateReport(Request, kw_only=True):
    id: ReportId | None = None
    thread_id: ThreadId
    summary: Summary
    body: Any = None
    content_type: ContentType | None = None
    refs: TriggerLinks = []
    app_id: Label | None = None
    agent_id: Label | None = None
    run_id: Label | None = None
    namespace: Namespace | None = None  # where a key's grants apply; none: the tenant's root
    ttl: Annotated[int, Meta(ge=1, le=315_360_000, description="Seconds until it expires.")] | None = None
    expires_at: DateTimeText | None = None


class CreateNote(Request, kw_only=True):
    summary: Summary
    ref: AnyId | None = None


# ---- memories --------------------------------------------------------------------------
MemoryKey = Annotated[str, Meta(min_length=1, max_length=256, pattern=text.KEY, examples=["tone"])]
# Tag and source limits are what keep a memory's core inside the smallest budget (tests/test_memories.py).
TagKey = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._-]{1,24}\Z")]
TagValue = Annotated[str, Meta(max_length=24, pattern=r"^[A-Za-z0-9._:/@+-]*\Z")]
Tags = Annotated[dict[TagKey, TagValue], Meta(max_length=16, description="At most 16; filter with tag=key:value.")]
MAX_SOURCES = 8
Sources = Annotated[list[AnyId], Meta(max_length=MAX_SOURCES, description="IDs it was learned from; each must be live.")]


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
    label: Annotated[str, Meta(max_length=80, pattern=OneLine)] = ""  # its display name
    subject: Subject | None = None
    grants: Grants = []


class UpdateKey(Request, kw_only=True):
    """A key's new grants, in place of its old ones; they hold from the next request on, in every process."""

    grants: Grants


# ---- responses -------------------------------------------------------------------------


class Link(Struct, omit_defaults=True):
    """A neighbour in the graph: its ID and, when the budget allows, its one-line summary."""

    id: AnyId
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


class TriggerView(Struct, omit_defaults=True):
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
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None
    namespace: list[str] | None = None  # where a key's grants apply (docs/tenancy.md#grants); none: root


class ThreadView(Struct, omit_defaults=True):
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
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None
    namespace: list[str] | None = None  # where a key's grants apply (docs/tenancy.md#grants); none: root
    # A LangGraph run whose thread_id is this ID (RecallSaver): its checkpoints (top-level namespace) and the
    # newest one's ID; links.checkpoint reads that state, links.checkpoints lists them. Omitted when none.
    checkpoints: int | None = None
    latest_checkpoint: str | None = None


class WorkerView(Struct, omit_defaults=True):
    id: WorkerId
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
    namespace: list[str] | None = None  # where a key's grants apply (docs/tenancy.md#grants); none: root


class ReportView(Struct, omit_defaults=True):
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
    app_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    expires_at: Timestamp | None = None
    namespace: list[str] | None = None  # where a key's grants apply (docs/tenancy.md#grants); none: root


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


# ---- webhooks ---------------------------------------------------------------------------

HookId = Annotated[str, Meta(pattern=ids.HOOK_ID_PATTERN, examples=["hk_3q2Zr0lYc9tWq1xVvQ8nB7mKp4sHd6eF"])]


class CreateHook(Request, kw_only=True):
    source: Literal["github"]
    label: Annotated[str, Meta(max_length=80, pattern=OneLine)] = ""


class HookView(Struct):
    """A webhook endpoint as listed: never its secret."""

    id: HookId
    tenant: str
    source: str
    label: str
    url: str  # the path deliveries are POSTed to
    created_at: Timestamp
    revoked_at: Timestamp | None


class NewHook(Struct):
    """A hook just created: the only time its secret is ever shown (GitHub's webhook "Secret")."""

    id: HookId
    tenant: str
    source: str
    label: str
    url: str
    created_at: Timestamp
    secret: str


class HookList(Struct):
    data: list[HookView]


class Delivery(Struct, omit_defaults=True):
    """What a webhook delivery did: a trigger filed (and the thread it is on), or nothing to store."""

    delivery: str
    event: str
    outcome: Literal["filed", "ignored", "pong"]
    action: str | None = None
    thread_id: ThreadId | None = None
    trigger_id: TriggerId | None = None
    # a PR's or issue's state: newer than the thread's (applied), or older (stale: the trigger is still filed)
    thread_state: Literal["applied", "stale"] | None = None


# ---- the recall trace (recall_server/service/trace.py) ----
RunId = Annotated[str, Meta(pattern=ids.RUN_PATTERN, examples=["run-2026-11-30.a"])]


class Read(Struct):
    """One traced read: which run read which ID, through which route, with what outcome."""

    run: RunId
    at: Timestamp  # when the server received it
    object_id: str | None  # the ID in the path, as requested (a miss may name a malformed one); None: an index
    route: str  # the route template, e.g. /threads/{thread_id}
    status: int
    bytes: int  # response body bytes sent
    key_id: str  # the API key that made the read
    request_id: str | None = None  # as in the access log and X-Request-ID


class ReadPage(Struct):
    data: list[Read]
    next_cursor: str | None
    has_more: bool


# ---- search, backlinks, grep --------------------------------------------------------------------


class SearchHit(Struct, omit_defaults=True):
    """An object whose text matches the query: an ID to hop from."""

    id: AnyId  # a message's: its thread's ID (with `seq`)
    type: Literal["trigger", "thread", "worker", "report", "memory", "message"]
    summary: str
    href: str  # a message's: its content
    # exact: ts_rank; lexical: rare-term-weighted match; semantic: cosine similarity; hybrid: reciprocal
    # rank fusion. Rounded; ties are broken by recency, then ID.
    score: float
    snippet: str  # one line around the match, `**` marking the matched words (at most 300 characters)
    thread_id: ThreadId | None = None  # a trigger's, report's or message's thread: the next hop (omitted for the others)
    seq: int | None = None  # a message's seq in its thread's log
    explain: SearchExplain | None = None  # with explain=true (ranked modes): which arm found it, and where


class SearchExplain(Struct, omit_defaults=True):
    """Which arm of a ranked search found a hit: its 1-based rank and score in each (absent: not found by it)."""

    arms: list[Literal["lexical", "semantic"]]
    lexical_rank: int | None = None
    lexical_score: float | None = None
    semantic_rank: int | None = None
    semantic_score: float | None = None  # cosine similarity of the question's vector and the object's


class SearchPage(Struct):
    data: list[SearchHit]
    next_cursor: str | None
    has_more: bool
    mode: Literal["hybrid", "lexical", "semantic", "exact"] = "exact"  # the mode that ran
    note: str | None = None  # why a mode asked for (or the default) ran with fewer arms, e.g. no embedder


class Backlink(Struct):
    """An object that links to the requested ID, and how (see README: relations)."""

    id: AnyId
    type: Literal["trigger", "thread", "worker", "report", "memory"]
    relation: Literal["cites", "neighbour", "event", "owner", "thread", "worker", "source"]
    summary: str
    href: str


class BacklinkPage(Struct):
    data: list[Backlink]
    next_cursor: str | None
    has_more: bool


class GrepLine(Struct, omit_defaults=True):
    number: int  # 1-based line number
    text: str  # at most grep.LINE_CHARS characters; `truncated` when cut
    truncated: bool = False


class GrepMatch(Struct):
    line: int  # 1-based line number of the match
    offset: int  # byte offset of the match in the content
    length: int  # bytes of the match
    range: str  # a Range header reading the matching line and its context lines (bytes=first-last)
    lines: list[GrepLine]  # the context lines before, the matching line, the context lines after


class GrepResult(Struct):
    id: AnyId
    content_type: str
    bytes: int  # the content's whole size
    scanned: int  # bytes scanned (the first grep.SCAN_BYTES at most)
    matches: list[GrepMatch]
    truncated: bool  # more matches exist than shown (max, or the response bound), or the scan stopped early
    href: str  # the content itself


# ---- messages (a conversation on a thread: docs/conversations.md) ---------------------------------------
MAX_SEQ = 10**15  # the largest seq a request may name (exact as a JSON Schema number, unlike 2**62)
MAX_MESSAGES = 100  # messages one POST /threads/{id}/messages appends, in one transaction
MESSAGE_INLINE = 8192  # content bytes a replayed message carries inline; above, a spill pointer to its content
Role = Literal["user", "assistant", "system", "tool"]
MetadataKey = Annotated[str, Meta(pattern=r"^[A-Za-z0-9._:-]{1,64}\Z")]
MetadataValue = Annotated[str, Meta(max_length=1024, pattern=OneLine)]
Metadata = Annotated[dict[MetadataKey, MetadataValue], Meta(
    max_length=32, description="Flat string tags (at most 32, one line each); keep the keys consistent.")]


class NewMessage(Request, kw_only=True):
    role: Role
    content: Annotated[str | list[Any] | dict[str, Any], Meta(
        description="Text, or JSON (a list of parts, or an object), stored as its JSON.")]
    name: Annotated[str, Meta(min_length=1, max_length=64, pattern=OneLine)] | None = None
    tool_call_id: Annotated[str, Meta(min_length=1, max_length=256, pattern=OneLine)] | None = None
    at: DateTimeText | None = None  # when it was said; the time of the append when absent
    metadata: Metadata = {}


class AppendMessages(Request, kw_only=True):
    messages: Annotated[list[NewMessage], Meta(min_length=1, max_length=MAX_MESSAGES)]


class MessageSeq(Struct):
    seq: int
    at: Timestamp


class AppendedMessages(Struct):
    """What an append wrote: each message's seq in the thread's log and its time, in the order sent."""

    thread_id: ThreadId
    messages: list[MessageSeq]


class Message(Struct, omit_defaults=True):
    seq: int
    role: str
    at: Timestamp
    content: Any  # text or JSON as sent; null when spilled (then `spilled` points at it)
    content_type: str  # text/plain or application/json
    bytes: int
    metadata: dict[str, str]
    name: str | None = None
    tool_call_id: str | None = None
    spilled: Spill | None = None
    retracted: bool = False  # shown only with include_retracted=true


class MessagePage(Struct):
    data: list[Message]
    next_cursor: str | None
    has_more: bool


class RetractMessages(Request, kw_only=True):
    """Exactly one of: `seqs` (these messages), `newest` (the newest n not yet retracted: a pop),
    `through` (every message up to this seq: a clear)."""

    seqs: Annotated[list[Annotated[int, Meta(ge=1, le=MAX_SEQ)]], Meta(min_length=1, max_length=500)] | None = None
    newest: Annotated[int, Meta(ge=1, le=MAX_MESSAGES)] | None = None
    through: Annotated[int, Meta(ge=1, le=MAX_SEQ)] | None = None


class Retraction(Struct):
    """A retraction's event (its seq and time; null when there was nothing to retract), how many messages it
    took out, and those messages as they were (for `seqs` and `newest`; empty for `through`)."""

    seq: int | None
    at: Timestamp | None
    count: int
    messages: list[Message]


# ---- checkpoints (LangGraph) ---------------------------------------------------------------------
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
