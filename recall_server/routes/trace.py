"""The recall trace: a run's reads, and the reads of an object (which runs read it). Never traced themselves."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, get
from litestar.params import FromPath, Parameter

from recall_server.ids import RUN_PATTERN
from recall_server.models import ReadPage
from recall_server.routes import Caller, Cursor, Limit, paged, problems
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


ROUTES: list[Any] = [list_run_reads, list_object_reads]
