"""The recall trace (recall_server/service/trace.py): which run read which ID."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from recall_server import ids
from recall_server.models.common import Request, Timestamp


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


class Background(Struct):
    """What became of the work a request started for one object, as it stands now: its embedding."""

    id: str
    embedding: Literal["queued", "retrying", "failed", "indexed"]
    error: str | None = None  # the class of the last error, while retrying or once failed


class AuditedRequest(Struct):
    """One audited request: a write, delete, administration or search of a tenant's key (service/audit.py)."""

    request_id: str | None  # as in the access log and X-Request-ID
    at: Timestamp  # when the server received it
    key_id: str
    subject: str | None  # the key's subject then
    run: RunId | None  # its X-Recall-Run
    method: str
    route: str  # the route template, e.g. /memories
    status: int
    object_ids: list[str]  # the IDs in its path, and the ID of the object its answer is about
    namespace: str | None  # the namespace it wrote or searched ('/'-joined)
    params: dict[str, Any] | None  # a search's parameters, but never the question
    returned: list[str] | None  # a search's hits, best first
    background: list[Background]


class RequestPage(Struct):
    data: list[AuditedRequest]
    next_cursor: str | None
    has_more: bool
