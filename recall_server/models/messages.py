"""Messages: a conversation on a thread (docs/conversations.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from recall_server.models.common import DateTimeText, MemoryId, OneLine, Request, ThreadId, Timestamp
from recall_server.models.views import Spill


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


class ExtractedMemory(Struct):
    """A memory an extraction wrote (a new version of its key), or found already current and unchanged."""

    id: MemoryId
    namespace: list[str]
    key: str
    kind: str
    summary: str
    href: str


class Extraction(Struct, omit_defaults=True):
    """An extraction job: the memories of one appended seq range. queued (or waiting for a retry), running,
    done (`memory_ids`: what it wrote or found current) or failed (`error_class`, `error`; after `attempts`)."""

    from_seq: int
    to_seq: int
    status: Literal["queued", "running", "done", "failed"]
    attempts: int
    queued_at: Timestamp
    memory_ids: list[MemoryId]
    finished_at: Timestamp | None = None
    model: str | None = None
    error_class: str | None = None
    error: str | None = None
    memories: list[ExtractedMemory] = []  # extract=sync: the memories, as written


class ExtractionPage(Struct):
    """A thread's extraction jobs, newest first, and where its memories go: its own namespace (`namespace`;
    `enabled` false when it opted out) or its tenant's default template."""

    enabled: bool
    namespace: list[str] | None
    tenant_default: str | None
    data: list[Extraction]
    next_cursor: str | None
    has_more: bool


class AppendedMessages(Struct, omit_defaults=True):
    """What an append wrote: each message's seq in the thread's log and its time, in the order sent; and the
    extraction it queued (with extract=sync, its outcome and the memories), when the thread extracts."""

    thread_id: ThreadId
    messages: list[MessageSeq]
    extraction: Extraction | None = None


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
