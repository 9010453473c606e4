"""The MCP server: one tool set, written against AsyncRecallClient, on stdio and at /mcp.

`recall-server mcp` serves it on stdio through a client of a running server (`serve_stdio`).
`HttpEndpoint` mounts it in the server itself as streamable HTTP (stateless, JSON responses, so
any worker process can answer any request); its tools call the very same Litestar app in-process
through httpx.ASGITransport with the caller's own Authorization header, so authentication, scopes,
errors and tracing are exactly the HTTP API's.

Each MCP session is a run: its ID is the caller's (`--run`, or an `X-Recall-Run` header on /mcp)
or a new one, and is sent as X-Recall-Run on reads. Stateless HTTP has no session: without the
header each /mcp request is its own run.
"""

from __future__ import annotations

import inspect
import re
import secrets
from urllib.parse import urlsplit
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

import httpx
import msgspec
from litestar.types import Receive, Scope, Send
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INVALID_PARAMS, CallToolResult, ResourceLink, TextContent
from mcp.types import Tool as MCPTool
from pydantic import AnyUrl, Field

from recall_server import __version__, errors, jsonbody
from recall_server.client import AsyncRecallClient, Content, RecallError, Unreachable
from recall_server.limits import read_body, replay
from recall_server.service import trace
from recall_server.models import ReportView, SearchHit, TriggerView
from recall_server.observability import ObservabilityMiddleware, request_id

INSTRUCTIONS = (
    "Recall memory of long-running work. Start from a thread ID (thr_...) with recall_get, then follow the IDs its "
    "view shows (owner workers wkr_, triggers trg_, reports rpt_) with recall_get. Holding no ID, recall_search "
    "finds one to start from; recall_backlinks walks back from an ID to what cites it. Large content is spilled "
    "behind a pointer with a preview: grep it with recall_read and a pattern first; read it whole (or a byte range) "
    "only when the matching lines are not enough. "
    "Memories (mem_) you keep between runs are addressed by namespace and key: recall_recall reads the current one "
    "(or lists a namespace), recall_remember writes a new version. A conversation on a thread is its messages: "
    "recall_messages replays them, recall_say appends."
)
_STATE = "recall.mcp"  # where the /mcp gate leaves the caller's binding in the ASGI scope state
_CONTENT_URI = re.compile(r"^recall://(triggers|reports)/([^/]+)/(payload|body)$")
_encode = msgspec.json.encode

Id = Annotated[str, Field(description="A recall ID: thr_..., wkr_..., trg_..., rpt_... or mem_...")]
NamespaceArg = Annotated[list[str] | str, Field(
    description="A memory namespace: 1-8 segments of [A-Za-z0-9_-], as a list or joined by '/' (users/u1).")]
Budget = Annotated[int | None, Field(description="Upper bound in bytes of the view (4096-1048576; default 4096).")]
CursorArg = Annotated[str | None, Field(description="next_cursor of the previous page; omit for the first page.")]
LimitArg = Annotated[int | None, Field(description="Page size, 1-500 (default 50).")]


def new_run() -> str:
    return f"mcp-{secrets.token_hex(8)}"


class Binding:
    """Who is calling: a client acting with their key and run, and whether that key may write."""

    def __init__(self, client: AsyncRecallClient, writable: bool | None = None) -> None:
        self.client = client
        self._writable = writable

    async def can_write(self) -> bool:
        if self._writable is None:
            self._writable = await self.client.can_write()
        return self._writable


def problem_text(exc: RecallError) -> str:
    """A problem as a tool error: its wording, without the request_id (so another tenant's ID reads
    exactly like an unknown one). No answer at all (Unreachable) says where and what to do."""
    return str(exc) if isinstance(exc, Unreachable) else f"{exc.status} {exc.title}: {exc.detail}"


def _text(value: Any) -> TextContent:
    return TextContent(type="text", text=value if isinstance(value, str) else _encode(value).decode())


def _failed(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], isError=True)


async def _answer(work: Awaitable[Any]) -> CallToolResult:
    """A tool's result: compact JSON of the view, a resource link per spilled content; a miss is a tool error."""
    try:
        value = await work
    except RecallError as exc:
        return _failed(problem_text(exc))
    except httpx.HTTPError as exc:
        return _failed(f"The recall server could not be reached: {exc!r}")
    content: list[Any] = [_text(value)]
    spilled = getattr(value, "spilled", msgspec.UNSET)
    if isinstance(value, (TriggerView, ReportView)) and spilled is not msgspec.UNSET:
        for field in ("payload", "body"):
            spill = getattr(spilled, field)
            if spill is not msgspec.UNSET:
                content.append(ResourceLink(
                    type="resource_link", uri=AnyUrl(f"recall:/{spill.href}"), name=f"{value.id} {field}",
                    description=spill.hint, mimeType=spill.content_type, size=spill.bytes,
                ))
    return CallToolResult(content=content, isError=False)


def _textual(content_type: str) -> bool:
    media = content_type.split(";")[0].strip()
    return media.startswith("text/") or media.endswith(("json", "xml"))


def _readable(object_id: str, found: Content) -> str:
    """Text as text (a range may cut a character: replaced); binary content is pointed at, not dumped."""
    if _textual(found.content_type):
        return found.data.decode(errors="replace")
    where = f"recall://{'reports' if object_id.startswith('rpt_') else 'triggers'}/{object_id}/" + (
        "body" if object_id.startswith("rpt_") else "payload")
    return f"({len(found.data)} bytes of {found.content_type}: read the resource {where} for them)"


class RecallMCP(FastMCP):
    """The tools and resources; list_tools hides the writes from a key that may only read."""

    def __init__(self, local: Binding | None = None, **settings: Any) -> None:
        super().__init__(name="recall", instructions=INSTRUCTIONS, **settings)
        # serverInfo.version: this server's, not the SDK's. Without it the SDK looks its own package
        # version up in importlib.metadata on every stateless /mcp request (5% of one in a profile).
        self._mcp_server.version = __version__
        self._local = local
        _register(self)

    def binding(self) -> Binding:
        """stdio: the one binding of this process. /mcp: the one the gate made for this request."""
        if self._local is not None:
            return self._local
        request = self.get_context().request_context.request
        return request.scope["state"][_STATE]

    async def list_tools(self) -> list[MCPTool]:
        tools = await super().list_tools()
        if await self.binding().can_write():
            return tools
        return [tool for tool in tools if tool.name not in WRITE_TOOLS]

    async def read_resource(self, uri: AnyUrl | str) -> Iterable[ReadResourceContents]:
        """recall://triggers/{id}/payload and recall://reports/{id}/body, with their own content types."""
        match = _CONTENT_URI.match(str(uri))
        if match is None:
            return await super().read_resource(uri)
        try:
            found = await self.binding().client.read(match.group(2))
        except RecallError as exc:
            raise ValueError(problem_text(exc)) from None
        data: str | bytes = found.data.decode(errors="replace") if _textual(found.content_type) else found.data
        return [ReadResourceContents(content=data, mime_type=found.content_type.split(";")[0].strip())]


# The tools, one call of the caller's client each. FastMCP reads a tool's input schema from its parameters
# after `client` (see `_bound`): their names, annotations and defaults are what MCP clients see.

async def recall_get(client: AsyncRecallClient, id: Id, budget: Budget = None) -> CallToolResult:
    return await _answer(client.get(id, budget))


async def recall_events(client: AsyncRecallClient, thread_id: Id, cursor: CursorArg = None,
                        limit: LimitArg = None) -> CallToolResult:
    return await _answer(client.list_events(thread_id, cursor, limit))


async def recall_read(client: AsyncRecallClient, id: Id,
                      start: Annotated[int | None, Field(ge=0, description="First byte.")] = None,
                      end: Annotated[int | None, Field(ge=0, description="Last byte (inclusive).")] = None,
                      pattern: Annotated[str | None, Field(
                          description="Answer only the lines matching this (literal unless regex).")] = None,
                      regex: Annotated[bool, Field(description="pattern is an RE2 regular expression.")] = False,
                      context: Annotated[int, Field(ge=0, le=10, description="Lines around each match.")] = 0,
                      max: Annotated[int | None, Field(ge=1, le=100, description="Most matches (20).")] = None,
                      ) -> CallToolResult:
    if pattern is not None:
        if start is not None or end is not None:
            return _failed("Give a pattern or a byte range (start, end), not both.")
        return await _answer(client.grep(id, pattern, regex, context, max))

    async def read() -> str:
        return _readable(id, await client.read(id, start, end))

    return await _answer(read())


def _compact(h: SearchHit, scored: bool) -> dict[str, Any]:
    """A search hit as a tool shows it: what to hop from, and its relevance."""
    return {"id": h.id, "type": h.type, "summary": h.summary, "snippet": h.snippet,
            **({"score": round(h.score, 3)} if scored else {}),
            **({"thread_id": h.thread_id} if h.thread_id else {}), **({"seq": h.seq} if h.seq is not None else {})}


async def recall_search(client: AsyncRecallClient, query: str,
                        mode: Annotated[Literal["hybrid", "lexical", "semantic", "exact"] | None, Field(
                            description="hybrid (default): words and meaning; lexical: words and their forms; "
                                        "semantic: meaning only; exact: every object with all the words.")] = None,
                        type: Annotated[list[str] | str | None, Field(
                            description="Only these kinds: trigger, thread, worker, report, memory, message.")] = None,
                        status: Annotated[str | None, Field(description="Only threads with this status.")] = None,
                        since: Annotated[str | None, Field(description="Created at or after (RFC 3339).")] = None,
                        until: Annotated[str | None, Field(description="Created before (RFC 3339).")] = None,
                        cursor: CursorArg = None,
                        limit: Annotated[int | None, Field(ge=1, le=100, description="Hits (default 10).")] = None,
                        min_score: Annotated[float | None, Field(ge=0, le=1, description=(
                            "The relevance a hit needs, 0-1 (default 0.5; not with mode=exact)."))] = None,
                        ) -> CallToolResult:
    async def found() -> dict[str, Any]:
        page = await client.search(query, mode=mode, type=type, status=status, since=since, until=until,
                                   cursor=cursor, limit=limit or 10, min_score=min_score)
        ranked = page.mode != "exact"  # an exact page's ts_rank is no relevance: not shown
        return {"hits": [_compact(h, ranked) for h in page.data],
                **({"next_cursor": page.next_cursor} if page.has_more else {}),
                **({"note": page.note} if page.note else {}),
                **({"nearest": [_compact(h, ranked) for h in page.nearest]} if page.nearest else {})}

    return await _answer(found())


async def recall_backlinks(client: AsyncRecallClient, id: Id, cursor: CursorArg = None,
                           limit: LimitArg = None) -> CallToolResult:
    async def found() -> dict[str, Any]:
        page = await client.backlinks(id, cursor, limit)
        links = [{"id": b.id, "type": b.type, "relation": b.relation, "summary": b.summary} for b in page.data]
        return {"links": links, **({"next_cursor": page.next_cursor} if page.has_more else {})}

    return await _answer(found())


async def recall_threads(client: AsyncRecallClient, status: str | None = None, owner: Annotated[str | None, Field(
                             description="Only threads this worker (wkr_) owns.")] = None,
                         app_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                         cursor: CursorArg = None, limit: LimitArg = None) -> CallToolResult:
    return await _answer(client.list_threads(status=status, owner=owner, app_id=app_id, agent_id=agent_id,
                                             run_id=run_id, cursor=cursor, limit=limit))


async def recall_messages(client: AsyncRecallClient, thread_id: Id, cursor: CursorArg = None, limit: LimitArg = None,
                          role: Annotated[Literal["user", "assistant", "system", "tool"] | None, Field(
                              description="Only messages of this role.")] = None,
                          newest: Annotated[bool, Field(description="Newest first.")] = False,
                          include_retracted: Annotated[bool, Field(
                              description="Show retracted messages too, marked.")] = False) -> CallToolResult:
    return await _answer(client.list_messages(thread_id, cursor, limit, role=role, order="desc" if newest else None,
                                              include_retracted=include_retracted))


# The roles a model may write through MCP: what it hears, says and is told by its tools. A system message
# steers every later turn of whoever replays the thread, so it is written only through the API, by whoever
# holds the key outright (tests/test_mcp.py::test_recall_say_refuses_a_system_message_and_appends_nothing).
SAY_ROLES = ("user", "assistant", "tool")


async def recall_say(client: AsyncRecallClient, thread_id: Id, messages: Annotated[list[dict[str, Any]], Field(
                         description="1-100 messages.")]) -> CallToolResult:
    for n, message in enumerate(messages, 1):
        if (role := message.get("role")) not in SAY_ROLES:
            has = "no role" if role is None else f"role {_encode(role).decode()}"
            return _failed(f"Message {n} has {has}: through MCP a message's role is user, assistant or tool "
                           "(system messages are written only through the API). Nothing was appended.")
    return await _answer(client.append_messages(thread_id, messages))


async def recall_note(client: AsyncRecallClient, thread_id: Id, summary: str, ref: str | None = None,
                      ) -> CallToolResult:
    return await _answer(client.add_note(thread_id, summary, ref))


async def recall_file_trigger(client: AsyncRecallClient, source: str, summary: str, thread_id: str | None = None,
                              payload: Any = None, content_type: str | None = None,
                              neighbours: list[str] | None = None, id: str | None = None,
                              external_id: str | None = None) -> CallToolResult:
    return await _answer(client.create_trigger(
        source=source, summary=summary, thread_id=thread_id, payload=payload, content_type=content_type,
        neighbours=neighbours or [], id=id, external_id=external_id))


async def recall_file_report(client: AsyncRecallClient, worker_id: Id, thread_id: Id, summary: str, body: Any = None,
                             content_type: str | None = None, refs: list[str] | None = None,
                             id: str | None = None) -> CallToolResult:
    return await _answer(client.create_report(
        worker_id, thread_id=thread_id, summary=summary, body=body, content_type=content_type, refs=refs or [],
        id=id))


async def recall_assign(client: AsyncRecallClient, thread_id: Id, worker_id: Id) -> CallToolResult:
    return await _answer(client.assign_owner(thread_id, worker_id))


async def recall_set_status(client: AsyncRecallClient, thread_id: Id, status: str) -> CallToolResult:
    return await _answer(client.update_thread(thread_id, status=status))


async def recall_recall(client: AsyncRecallClient, namespace: NamespaceArg, key: Annotated[str | None, Field(
                            description="The memory's key; omit to list the namespace.")] = None,
                        cursor: CursorArg = None, limit: LimitArg = None,
                        as_of: Annotated[str | None, Field(description=(
                            "With key: the version that was current at this RFC 3339 time."))] = None,
                        ) -> CallToolResult:
    if key is not None:
        return await _answer(client.current_memory(namespace, key, as_of=as_of))
    return await _answer(client.list_memories(namespace=namespace, cursor=cursor, limit=limit))


async def recall_remember(client: AsyncRecallClient, namespace: NamespaceArg, key: str, value: Any, summary: str = "",
                          kind: Annotated[str, Field(description="profile, preference, fact (default), procedure, "
                                                                 "scratchpad or state.")] = "fact",
                          sources: Annotated[list[str] | None, Field(
                              description="IDs it was learned from (each must exist).")] = None,
                          tags: Annotated[dict[str, str] | None, Field(
                              description="At most 16 key: value tags.")] = None,
                          confirmed: Annotated[str, Field(
                              description="user, agent or unconfirmed (default).")] = "unconfirmed",
                          ) -> CallToolResult:
    segments = namespace.split("/") if isinstance(namespace, str) else namespace
    return await _answer(client.remember(namespace=segments, key=key, value=value, summary=summary, kind=kind,
                                         sources=sources or [], tags=tags or {}, confirmed=confirmed))


ToolFn = Callable[..., Awaitable[CallToolResult]]

# The tool set in tools/list order: (tool, the key scope it needs, its description).
TOOLS: tuple[tuple[ToolFn, Literal["read", "write"], str], ...] = (
    (recall_get, "read",
     "Inline view of any recall ID: its fields, linked IDs with one-line summaries, recent events. Start from a "
     "thread ID and follow the IDs you see; spilled content comes with a preview and a link."),
    (recall_events, "read",
     "A page of a thread's event log, oldest first. Pass next_cursor back for the next page (it also finds events "
     "appended later)."),
    (recall_read, "read",
     "A spilled trigger payload (trg_) or report body (rpt_). With a pattern: only the matching lines, each with "
     "its line number and a byte range (grep first, it reads little); without: the content, or bytes start-end of "
     "it (e.g. a match's range)."),
    (recall_search, "read",
     "Search for an ID to start from, best first: each hit's id, type, summary, snippet, score (relevance 0-1; "
     "and thread_id for a trigger or report). Only when you hold no ID: then follow IDs with recall_get. Ask in "
     "your own words (by default words and meaning are both used); \"exact phrase\" and -word hold in every mode. "
     "Only hits scoring min_score (0.5) or more are shown: note \"no close match\" means nothing stored answers "
     "well (nearest: the best below it); do not treat those as the answer."),
    (recall_backlinks, "read",
     "What links to an ID, and how: reports citing a trigger (cites), threads whose log names it (event), triggers "
     "naming it as a neighbour, threads it owns (owner), what was filed on a thread (thread) or by a worker "
     "(worker), memories learned from it (source)."),
    (recall_threads, "read",
     "Index of threads, newest first, filtered by status, owner worker and labels. Use it only when you have no "
     "thread ID to start from."),
    (recall_messages, "read",
     "A page of a thread's conversation: its messages (role, content, time, metadata) oldest first, retracted ones "
     "left out. newest=true: the newest first. Large content comes as a preview with an href; pass next_cursor "
     "back for the next page."),
    (recall_say, "write",
     "Append messages to a thread's conversation, in order, in one transaction: each {role: "
     "user|assistant|tool, content: text or JSON parts, name?, tool_call_id?, at?, metadata?: {string: "
     "string}}. Answers each one's seq. Any other role (system included) refuses the whole call: nothing is "
     "appended."),
    (recall_note, "write", "Append a one-line note to a thread's log, optionally citing an ID (ref)."),
    (recall_file_trigger, "write",
     "File an incoming event (a trigger): source, one-line summary, its payload, optionally on a thread and citing "
     "neighbour triggers."),
    (recall_file_report, "write",
     "File a worker's report on a thread: one-line summary, the body, and the IDs it cites (refs)."),
    (recall_assign, "write", "Make a worker (wkr_) an owner of a thread."),
    (recall_set_status, "write", "Set a thread's status (e.g. open, merged, closed)."),
    (recall_recall, "read",
     "The current memory at (namespace, key): its value, summary, version and sources. Without a key: a page of "
     "the current memories under the namespace (a prefix of whole segments), in (namespace, key) order."),
    (recall_remember, "write",
     "Remember something between runs: write the memory at (namespace, key). A memory already there is superseded "
     "by this new version (the old one stays readable by ID)."),
)
WRITE_TOOLS = frozenset(tool.__name__ for tool, scope, _ in TOOLS if scope == "write")


def _bound(server: RecallMCP, tool: ToolFn) -> ToolFn:
    """The tool as FastMCP sees it: its name, and its parameters after `client`, which is the caller's."""
    async def call(**arguments: Any) -> CallToolResult:
        return await tool(server.binding().client, **arguments)

    signature = inspect.signature(tool, eval_str=True)  # evaluated here: FastMCP takes a __signature__ as it is
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=tuple(signature.parameters.values())[1:])
    call.__name__ = tool.__name__  # also names the argument model, which validation errors quote
    return call


def _register(server: RecallMCP) -> None:
    for tool, _, description in TOOLS:
        server.add_tool(_bound(server, tool), description=description)

    # Listed for discovery; read_resource above serves them with the content's own type.
    @server.resource("recall://triggers/{id}/payload", description="A trigger's full payload.")
    async def payload(id: str) -> bytes:
        return (await server.binding().client.read(id)).data

    @server.resource("recall://reports/{id}/body", description="A report's full body.")
    async def body(id: str) -> bytes:
        return (await server.binding().client.read(id)).data


def serve_stdio(url: str | None, key: str | None, run: str | None) -> None:
    """`recall-server mcp`: the tools on stdin/stdout, acting through a client of the server at url."""
    import anyio

    async def main() -> None:
        async with AsyncRecallClient(url, key, run=run or new_run()) as client:
            await RecallMCP(Binding(client), log_level="WARNING").run_stdio_async()

    anyio.run(main)


class HttpEndpoint:
    """/mcp on the server, in front of the framework (asgi.Mount): the caller's Origin, key, method and
    body are checked here, in that order, then the MCP session manager (which must run for the app's
    lifetime: `lifespan`) answers.

    - A present `Origin` must be allowed (RECALL_MCP_ALLOWED_ORIGINS; by default loopback origins only),
      else 403: the transport spec's guard against DNS rebinding. No Origin is a client that is not
      a browser, and is allowed.
    - The key is checked with the database before the body is read (a forged key costs one lookup).
    - Stateless JSON responses leave nothing to stream: GET (an SSE stream) and DELETE (a session)
      are 405, as the transport spec allows, instead of a stream held open until a timeout cuts it.
    - The body is bounded more tightly than the API's, before the SDK parses anything: over
      RECALL_MAX_BODY_BYTES it is not read (a 413 problem); over RECALL_MCP_MAX_BODY_BYTES bytes or
      RECALL_MCP_MAX_ITEMS keys and array items it is refused in JSON-RPC (`refusal`); JSON that is
      malformed, nests too deeply or repeats a key is a 400 problem.
    """

    path = "/mcp"
    origin = "http://recall.in-process"  # what the tools' in-process requests are addressed to

    def __init__(self, max_body_bytes: int, max_json_items: int, allowed_origins: str | None = None,
                 mcp_max_body_bytes: int = 1024 * 1024, mcp_max_items: int = 4096) -> None:
        # The SDK's own DNS-rebinding check wants exact Host values; the Origin check here replaces it.
        self.server = RecallMCP(stateless_http=True, json_response=True, max_request_body_size=max_body_bytes,
                                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                                log_level="WARNING")
        self.server.streamable_http_app()  # creates the session manager
        self.max_body_bytes = max_body_bytes
        self.max_bytes = min(mcp_max_body_bytes, max_body_bytes)
        self.max_items = min(mcp_max_items, max_json_items)
        self.origins = origins(allowed_origins)
        self.app: Any = None  # the framework app the tools call in-process (bind)
        self.inner: Any = None

    def bind(self, app: Any) -> None:
        """The framework app the tools call; their calls go through its request IDs, access log and metrics."""
        self.app = app
        self.inner = ObservabilityMiddleware(app)

    @asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        async with self.server.session_manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        try:
            origin = headers.get(b"origin")
            if origin is not None and not allowed(origin.decode("latin-1"), self.origins):
                raise errors.Forbidden("This Origin may not call /mcp (RECALL_MCP_ALLOWED_ORIGINS).")
            run = trace.run_of(scope) or new_run()  # the API's run grammar, and its 400
        except errors.Problem as problem:
            await errors.send(send, problem, self.path, request_id(scope))
            return
        forwarded = {"Authorization": headers[b"authorization"].decode("latin-1")} if b"authorization" in headers \
            else {}
        # The key check talks to the bare app: it is part of this /mcp request, not an API request of its own.
        async with AsyncRecallClient(self.origin, None, transport=httpx.ASGITransport(app=self.app),
                                     headers=forwarded, max_retries=0) as check:
            try:
                writable = await check.can_write()
            except RecallError as exc:
                await self._problem(scope, send, exc)
                return
        try:
            if scope["method"] != "POST":
                raise errors.MethodNotAllowed("/mcp answers POST only: its responses are JSON, never a stream.",
                                              headers={"Allow": "POST"})
            body = await self._body(headers, receive)
            refused = self.refusal(body)
            if refused is None:
                jsonbody.decode(body, self.max_items)
        except errors.Problem as problem:
            await errors.send(send, problem, self.path, request_id(scope))
            return
        if refused is not None:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json"), (b"content-length", str(len(refused)).encode())]})
            await send({"type": "http.response.body", "body": refused})
            return
        async with AsyncRecallClient(self.origin, None, run=run, transport=httpx.ASGITransport(app=self.inner),
                                     headers=forwarded, max_retries=0) as client:
            scope.setdefault("state", {})[_STATE] = Binding(client, writable)  # type: ignore[typeddict-item]
            await self.server.session_manager.handle_request(scope, replay(body, receive), send)

    async def _body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        """The request's body within the API's size limit, or the problem."""
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise errors.PayloadTooLarge(f"The request body is larger than {self.max_body_bytes} bytes.")
        return await read_body(receive, self.max_body_bytes)  # limits.BodyGuard bounds the time

    def refusal(self, body: bytes) -> bytes | None:
        """None for a message within /mcp's bounds. Else the JSON-RPC answer refusing it, made from its id and
        method alone: a tool error for tools/call (a model reads it and can send less), an invalid-params
        error for any other request; a message without an id (a notification, a batch) is a 413 problem.

        The SDK parses a message with the standard library, then validates, dumps and validates it again with
        pydantic, each step holding the event loop every request shares (a 99,000-key call, profiled: 41 ms
        validating, 18 parsing, 15 dumping, 11 pre-parsing the arguments); a tools/call of 99,000 items held it
        130-435 ms (bench/mcp_stall.py), while a tool call a model writes holds hundreds. The bounds are counted
        in C (jsonbody.items) and the id read by msgspec skipping the rest (~2 ms for 8 MB), so a refused
        message is never decoded (tests/test_mcp.py::test_refusing_a_message_decodes_none_of_it).
        """
        if len(body) > self.max_bytes:  # its items are not counted: ~2 ms a MB
            what = f"is {len(body)} bytes"
        elif jsonbody.items(body, self.max_items) > self.max_items:
            what = f"holds more than {self.max_items} keys and array items"
        else:
            return None
        detail = (f"This /mcp message {what}: one message may hold at most {self.max_bytes} bytes and "
                  f"{self.max_items} keys and array items (RECALL_MCP_MAX_BODY_BYTES, RECALL_MCP_MAX_ITEMS).")
        try:
            envelope = _ENVELOPE.decode(body)
        except msgspec.ValidationError:  # a batch, or an id that is neither a number nor a string
            raise errors.PayloadTooLarge(detail) from None
        except msgspec.DecodeError as exc:
            raise errors.BadRequest(f"The request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise errors.BadRequest("The request body is not valid JSON: nested too deeply") from None
        if envelope.id is None:
            raise errors.PayloadTooLarge(detail)
        if envelope.method == "tools/call":
            text = (f"{detail} Nothing was done. Call the tool again with less: split a long list or a large "
                    "value over several calls, or write large content through the HTTP API.")
            answer: dict[str, Any] = {"result": {"content": [{"type": "text", "text": text}], "isError": True}}
        else:
            answer = {"error": {"code": INVALID_PARAMS, "message": detail}}
        return _encode({"jsonrpc": "2.0", "id": envelope.id, **answer})

    async def _problem(self, scope: Scope, send: Send, exc: RecallError) -> None:
        """The key check's problem, with the API's members, for this request."""
        body = msgspec.json.encode({
            "type": exc.type, "title": exc.title, "status": exc.status, "detail": exc.detail, "instance": self.path,
            **exc.extra, **({"request_id": rid} if (rid := scope.get("state", {}).get("request_id")) else {}),
        })
        headers = [(b"content-type", errors.PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode())]
        headers += [(name.encode(), exc.headers[name].encode()) for name in ("www-authenticate", "retry-after")
                    if name in exc.headers]
        await send({"type": "http.response.start", "status": exc.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


class _Envelope(msgspec.Struct):
    """What a refused /mcp message is answered by: its id and method (the rest is skipped, not decoded)."""

    id: int | str | None = None
    method: str | None = None


_ENVELOPE = msgspec.json.Decoder(_Envelope)

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})


def origins(setting: str | None) -> frozenset[str] | None:
    """The allowed origins of RECALL_MCP_ALLOWED_ORIGINS (lower-cased, without a trailing slash); `*`: any
    (None); unset: loopback only (an empty set, see `allowed`)."""
    if setting is None:
        return frozenset()
    found = frozenset(o.strip().rstrip("/").lower() for o in setting.split(",") if o.strip())
    return None if "*" in found else found


def allowed(origin: str, allow: frozenset[str] | None) -> bool:
    """Whether a browser at `origin` may call /mcp: a listed origin, or with no list, a loopback one
    (http or https on localhost, 127.0.0.1 or [::1], any port)."""
    origin = origin.strip().rstrip("/").lower()
    if allow is None or origin in (allow or ()):
        return True
    if allow:
        return False
    try:
        where = urlsplit(origin)
        where.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    return where.scheme in ("http", "https") and where.hostname in LOOPBACK and not where.path
