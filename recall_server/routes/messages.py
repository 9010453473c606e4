"""Messages: a conversation on a thread, appended as events of its log, replayed, retracted; their content."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Response, get, post
from litestar.params import FromPath, JSONBody, Parameter

from recall_server.models import (
    MAX_SEQ,
    AppendedMessages,
    AppendMessages,
    ExtractionPage,
    GrepResult,
    MessagePage,
    Retraction,
    RetractMessages,
    Role,
)
from recall_server.routes import Caller, Cursor, IdempotencyKey, Limit, SizedLimit, paged, problems, sent, serve_content
from recall_server.routes.lens import Context, MaxMatches, Moment, Pattern, Regex

WRITE = (400, 401, 403, 404, 409, 410, 413, 422, 503)
Seq = Annotated[int, Parameter(ge=1, le=MAX_SEQ, description="The message's seq in the thread's log.")]


@post("/threads/{thread_id:str}/messages", status_code=201, responses=problems(*WRITE), operation_id="AppendMessages")
async def append_messages(
    thread_id: FromPath[str], data: JSONBody[AppendMessages], request: Caller, idempotency_key: IdempotencyKey = None,
    extract: Annotated[Literal["async", "sync"], Parameter(
        description="When the thread extracts memories: async queues the job (the answer does not wait for the "
                    "model); sync runs it before answering, with the memories it made.")] = "async",
) -> Response[AppendedMessages]:
    """Append up to 100 messages to the thread's log in one transaction: consecutive seqs, in the order sent."""
    return sent(await request.service.messages.append(request.cred, thread_id, data, idempotency_key, extract))


@get("/threads/{thread_id:str}/extractions", responses=problems(400, 401, 404, 410, 503),
     operation_id="ListExtractions")
async def list_extractions(
    thread_id: FromPath[str], request: Caller, cursor: Cursor = None, limit: Limit = 50,
) -> Response[ExtractionPage]:
    """The thread's extraction jobs, newest first: queued, running, done (the memories' IDs) or failed (the
    error's class, the attempts); and where its memories go."""
    return paged(request, await request.service.extractions.list_jobs(request.cred, thread_id, cursor, limit))


@get("/threads/{thread_id:str}/messages", responses=problems(400, 401, 404, 410, 503), operation_id="ListMessages")
async def list_messages(
    thread_id: FromPath[str], request: Caller,
    role: Annotated[Role | None, Parameter(description="Only messages of this role.")] = None,
    since: Moment = None,
    until: Moment = None,
    include_retracted: Annotated[bool, Parameter(description="Show retracted messages too, marked.")] = False,
    order: Annotated[Literal["asc", "desc"], Parameter(
        description="asc: oldest first (the last page's cursor follows new messages); desc: newest first.")] = "asc",
    cursor: Cursor = None, limit: SizedLimit = 50,
) -> Response[MessagePage]:
    """The thread's messages in seq order, each exactly once; content inline up to 8 KiB, else spilled."""
    return paged(request, await request.service.messages.replay(
        request.cred, thread_id, cursor, limit, role, since, until, include_retracted, order))


@post("/threads/{thread_id:str}/messages/retractions", status_code=201, responses=problems(*WRITE),
      operation_id="RetractMessages")
async def retract_messages(
    thread_id: FromPath[str], data: JSONBody[RetractMessages], request: Caller, idempotency_key: IdempotencyKey = None,
) -> Response[Retraction]:
    """Take messages out of the conversation by appending a retraction (201; 200 when none was left to take
    out). The log keeps them; replays skip them unless include_retracted=true."""
    return sent(await request.service.messages.retract(request.cred, thread_id, data, idempotency_key))


@get("/threads/{thread_id:str}/messages/{seq:int}/content", responses=problems(400, 401, 404, 410, 416, 503),
     operation_id="GetMessageContent")
async def get_message_content(thread_id: FromPath[str], seq: FromPath[Seq], request: Caller) -> Response[bytes]:
    """The message's content as stored (UTF-8 text, or the JSON of its parts), with ETag and Range."""
    return serve_content(request, await request.service.messages.content(request.cred, thread_id, seq))


@get("/threads/{thread_id:str}/messages/{seq:int}/content/grep", responses=problems(400, 401, 404, 410, 503),
     operation_id="GrepMessageContent")
async def grep_message_content(
    thread_id: FromPath[str], seq: FromPath[Seq], request: Caller, pattern: Pattern, regex: Regex = False,
    context: Context = 0, max_matches: MaxMatches = 20,
) -> GrepResult:
    """Matching lines of the message's content, each with its line number, byte offset and a Range around it."""
    return await request.service.messages.grep(request.cred, thread_id, seq, pattern, regex, context, max_matches)


ROUTES: list[Any] = [append_messages, list_extractions, list_messages, retract_messages, get_message_content, grep_message_content]
