"""The recall trace: a run's reads, and the reads of an object (which runs read it); the request audit: what
the keys wrote, deleted, administered and searched. Never traced themselves."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Response, get
from litestar.params import FromPath, Parameter

from recall_server.ids import RUN_PATTERN
from recall_server.models import AuditedRequest, ReadPage, RequestPage
from recall_server.routes import Caller, Cursor, Limit, paged, problems
from recall_server.service import audit
from recall_server.service.inputs import bound
from recall_server.service.trace import UNTRACED

RunPath = Annotated[str, Parameter(pattern=RUN_PATTERN, min_length=1, max_length=128,
                                   description="The run: the X-Recall-Run its reads carried.")]


@get("/runs/{run_id:str}/reads", responses=problems(400, 401, 503), operation_id="ListRunReads", opt=UNTRACED)
async def list_run_reads(run_id: RunPath, request: Caller, cursor: Cursor = None, limit: Limit = 50
                         ) -> Response[ReadPage]:
    """The run's reads in the order they were made, once they are older than the settle horizon (2 trace
    flush intervals). A run with no reads in this tenant is an empty page. There is always a next_cursor,
    to tail a live run."""
    return paged(request, await request.service.trace.run_reads(request.cred, run_id, cursor, limit))


@get("/ids/{object_id:str}/reads", responses=problems(400, 401, 404, 503), operation_id="ListObjectReads",
     opt=UNTRACED)
async def list_object_reads(object_id: FromPath[str], request: Caller, cursor: Cursor = None, limit: Limit = 50
                            ) -> Response[ReadPage]:
    """Every traced read of this ID, in order, each naming its run. 404 if the ID never existed here; a
    deleted or expired object's reads are still listed (the audit of who read it before it went)."""
    return paged(request, await request.service.trace.object_reads(request.cred, object_id, cursor, limit))


Moment = Annotated[str | None, Parameter(max_length=64, description="RFC 3339 date-time with an offset.")]
RequestIdPath = Annotated[str, Parameter(pattern=r"^[A-Za-z0-9._:-]+$", min_length=1, max_length=128,
                                         description="The request's X-Request-ID.")]


@get("/requests", responses=problems(400, 401, 503), operation_id="ListRequests", opt=UNTRACED)
async def list_requests(
    request: Caller,
    since: Moment = None,
    until: Moment = None,
    route: Annotated[str | None, Parameter(max_length=200, description="Only this route template, e.g. /memories.")] = None,
    method: Annotated[Literal["GET", "POST", "PUT", "PATCH", "DELETE"] | None, Parameter(
        description="Only this method (GET: the searches).")] = None,
    status: Annotated[Literal["2xx", "3xx", "4xx", "5xx"] | None, Parameter(
        description="Only answers of this class.")] = None,
    key_id: Annotated[str | None, Parameter(max_length=64, description="Only this key's requests.")] = None,
    subject: Annotated[str | None, Parameter(max_length=80, description="Only requests of keys with this subject.")] = None,
    run: Annotated[str | None, Parameter(pattern=RUN_PATTERN, max_length=128,
                                         description="Only requests that carried this X-Recall-Run.")] = None,
    object_id: Annotated[str | None, Parameter(max_length=200, description=(
        "Only requests that named this ID (in the path or the answer) or returned it (a search)."))] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> Response[RequestPage]:
    """The audit: every write, delete, administration and search of the tenant's keys (a key with grants: its
    own), in the order they were made, once older than the settle horizon (2 trace flush intervals). Each says
    what it touched and, for a search, what it returned, and what became of the embedding of each object it
    names. There is always a next_cursor, to tail."""
    match = audit.filter_of(bound("since", since), bound("until", until), route, status, key_id, subject, run,
                            object_id, method)
    return paged(request, await request.service.audit.requests(request.cred, match, cursor, limit))


@get("/requests/{request_id:str}", responses=problems(400, 401, 404, 503), operation_id="GetRequest", opt=UNTRACED)
async def get_request(request_id: RequestIdPath, request: Caller) -> AuditedRequest:
    """One audited request by its X-Request-ID, written or not yet settled; 404 when none is recorded (yet)."""
    return await request.service.audit.request(request.cred, request_id)


ROUTES: list[Any] = [list_run_reads, list_object_reads, list_requests, get_request]
