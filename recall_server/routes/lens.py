"""Finding and navigating the graph: search for IDs to hop from, backlinks, and grep into spilled content."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Response, get
from litestar.params import FromPath, Parameter, QueryParameter

from recall_server import grep
from recall_server.models import BacklinkPage, GrepResult, SearchPage
from recall_server.routes import NAMESPACE, Caller, Cursor, LabelFilter, Limit, paged, problems
from recall_server.service.audit import SEARCH

Kind = Literal["trigger", "thread", "worker", "report", "memory", "message"]
Mode = Literal["hybrid", "lexical", "semantic", "exact"]
SearchLimit = Annotated[int, Parameter(ge=1, le=100, description="Page size (each hit carries a snippet).")]
Moment = Annotated[str | None, Parameter(max_length=64, description="RFC 3339 date-time with an offset (created_at bound).")]
Pattern = Annotated[str, Parameter(min_length=1, max_length=grep.MAX_PATTERN,
                                   description="A literal string, or an RE2 regular expression with regex=true.")]
Regex = Annotated[bool, Parameter(description="Read pattern as an RE2 regular expression (linear time).")]
Context = Annotated[int, Parameter(ge=0, le=grep.MAX_CONTEXT, description="Lines shown before and after each match.")]
MaxMatches = Annotated[int, QueryParameter(name="max", ge=1, le=grep.MAX_MATCHES, description="The most matches returned.")]


@get("/search", responses=problems(400, 401, 503), operation_id="Search", opt=SEARCH)
async def search(
    request: Caller,
    labels: LabelFilter,
    q: Annotated[str, Parameter(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]*\S[^\x00-\x1f\x7f]*\Z",
                                description="A question or words to find (\"quoted phrase\" and -not in every mode; "
                                            "exact: web search syntax, all words).")],
    mode: Annotated[Mode | None, Parameter(
        description="hybrid (the default with an embedder): lexical and semantic fused by reciprocal rank; lexical: "
                    "words, stems and rare terms first; semantic: by meaning; exact: every object with all the words. "
                    "Default: hybrid, or lexical when search by meaning is unavailable (the page's note says why).")] = None,
    explain: Annotated[bool, Parameter(description="Each hit of a ranked mode says which arm found it, its rank "
                                                   "and score there, and what the rerank stage scored.")] = False,
    rerank: Annotated[bool, Parameter(
        description="Ranked modes: score the fused best 50 (and any object q names by ID) for relevance in [0, 1], "
                    "and leave out hits below min_score. false: the arms' fused ranking, every hit, "
                    "scores not comparable across questions.")] = True,
    min_score: Annotated[float | None, Parameter(
        ge=0, le=1, description="With rerank: the relevance a hit needs (default 0.5). A first page with none says "
                                "\"no close match\" and lists the nearest candidates.")] = None,
    kinds: Annotated[list[Kind] | None, QueryParameter(name="type", description="Only these kinds (repeatable).")] = None,
    status: Annotated[str | None, Parameter(max_length=32, pattern=r"^[A-Za-z0-9._-]+\Z",
                                            description="Only threads with this status.")] = None,
    namespace: Annotated[str | None, Parameter(
        pattern=NAMESPACE, max_length=520,
        description="Only memories in this namespace or under it (segments joined by '/').")] = None,
    since: Moment = None,
    until: Moment = None,
    cursor: Cursor = None,
    limit: SearchLimit = 10,
    as_of: Annotated[str | None, Parameter(max_length=64, description=(
        "RFC 3339 date-time with an offset: search the memory versions current then (memories only; every word "
        "must match, newest first; no semantic arm). What is erased is gone at every time."))] = None,
) -> Response[SearchPage]:
    """Live objects (a memory: its current version) and messages whose title, summary, name, source, key,
    namespace, labels or content (first 64 KiB) match q, or whose meaning is near it: best first."""
    return paged(request, await request.service.lens.search(request.cred, q, mode, explain, kinds, status, labels, since,
                                                            until, cursor, limit, namespace, rerank, min_score, as_of))


@get("/ids/{object_id:str}/backlinks", responses=problems(400, 401, 404, 410, 503), operation_id="ListBacklinks")
async def list_backlinks(
    object_id: FromPath[str], request: Caller, cursor: Cursor = None, limit: Limit = 50
) -> Response[BacklinkPage]:
    """Every live object that links to this ID, and how (cites, neighbour, event, owner, thread, worker,
    source: a current memory learned from it)."""
    return paged(request, await request.service.lens.backlinks(request.cred, object_id, cursor, limit))


@get("/triggers/{trigger_id:str}/payload/grep", responses=problems(400, 401, 404, 410, 415, 503),
     operation_id="GrepPayload")
async def grep_payload(
    trigger_id: FromPath[str], request: Caller, pattern: Pattern, regex: Regex = False, context: Context = 0,
    max_matches: MaxMatches = 20,
) -> GrepResult:
    """Matching lines of the payload, each with its line number, byte offset and a Range to read around it."""
    return await request.service.lens.grep(request.cred, "trigger", trigger_id, pattern, regex, context, max_matches)


@get("/reports/{report_id:str}/body/grep", responses=problems(400, 401, 404, 410, 415, 503), operation_id="GrepBody")
async def grep_body(
    report_id: FromPath[str], request: Caller, pattern: Pattern, regex: Regex = False, context: Context = 0,
    max_matches: MaxMatches = 20,
) -> GrepResult:
    """Matching lines of the body, each with its line number, byte offset and a Range to read around it."""
    return await request.service.lens.grep(request.cred, "report", report_id, pattern, regex, context, max_matches)


ROUTES: list[Any] = [search, list_backlinks, grep_payload, grep_body]
