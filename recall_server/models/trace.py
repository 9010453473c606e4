"""The recall trace (recall_server/service/trace.py): which run read which ID."""

from __future__ import annotations

from typing import Annotated

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
