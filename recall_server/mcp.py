"""The MCP server: one tool set, written against AsyncRecallClient, on stdio and at /mcp.

`recall-server mcp` serves it on stdio through a client of a running server (`serve_stdio`).
`mcp_http.HttpEndpoint` mounts it in the server itself as streamable HTTP (stateless, JSON responses,
so any worker process can answer any request); its tools call the very same Litestar app in-process
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
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any, Literal, NamedTuple

import httpx
import msgspec
from mcp.server.fastmcp import FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp.types import CallToolResult, LoggingLevel, ResourceLink, TextContent, ToolAnnotations
from mcp.types import Tool as MCPTool
from pydantic import AnyUrl, Field, ValidationError

from recall_server import __version__, ids
from recall_server.client import AsyncRecallClient, Content, RecallError, Unreachable
from recall_server.models import ReportView, SearchHit, TriggerView

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
STATE_KEY = "recall.mcp"  # where the /mcp gate (mcp_http) leaves the caller's binding in the scope state
_CONTENT_URI = re.compile(r"^recall://(triggers|reports)/([^/]+)/(payload|body)$")
_VIEW_URI = re.compile(r"^recall://([^/]+)$")
_encode = msgspec.json.encode

Id = str  # a recall ID (thr_, wkr_, trg_, rpt_, mem_): the tools' descriptions say which
NamespaceArg = list[str] | str  # segments, as a list or joined by '/'
Budget = Annotated[int | None, Field(ge=4096, le=1048576)]  # bytes
CursorArg = str | None  # next_cursor of the previous page
LimitArg = Annotated[int | None, Field(ge=1, le=500)]


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
    """A tool's result: the view as structured content and as compact JSON text (for clients before
    structured content), a resource link per spilled content; a miss is a tool error."""
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
    structured = {"text": value} if isinstance(value, str) else msgspec.to_builtins(value)
    return CallToolResult(content=content, structuredContent=structured, isError=False)


def _issues(exc: ValidationError) -> str:
    """pydantic's issues as the API lists a request's: `where: what`, joined by '; '."""
    return "; ".join(f"{'.'.join(str(p) for p in issue['loc']) or 'arguments'}: {issue['msg']}"
                     for issue in exc.errors(include_url=False))


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
        self._listed: list[MCPTool] | None = None
        self._mcp_server.set_logging_level()(self.set_logging_level)
        _register(self)

    def binding(self) -> Binding:
        """stdio: the one binding of this process. /mcp: the one the gate made for this request."""
        if self._local is not None:
            return self._local
        request = self.get_context().request_context.request
        return request.scope["state"][STATE_KEY]

    async def list_tools(self) -> list[MCPTool]:
        if self._listed is None:
            outputs = {spec.fn.__name__: spec.output for spec in TOOLS}
            self._listed = [tool.model_copy(update={"inputSchema": _lean(tool.inputSchema),
                                                    "outputSchema": outputs[tool.name]})
                            for tool in await super().list_tools()]
        if await self.binding().can_write():
            return self._listed
        return [tool for tool in self._listed if tool.name not in WRITE_TOOLS]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """A tool's call; arguments it does not take, or of the wrong shape, are a 400 tool error worded as the
        API words a bad parameter (never pydantic's text, which links its website)."""
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            unknown = sorted(set(arguments) - set(tool.parameters.get("properties", {})))
            if unknown:
                takes = ", ".join(tool.parameters.get("properties", {}))
                return _failed(f"400 Bad Request: {name} takes no argument {', '.join(map(repr, unknown))}; "
                               f"its arguments are {takes}.")
        try:
            return await super().call_tool(name, arguments)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                return _failed(f"400 Bad Request: Invalid arguments for {name}: {_issues(exc.__cause__)}")
            raise

    async def set_logging_level(self, level: LoggingLevel) -> None:
        """logging/setLevel: accepted (declaring the capability). The tools send no log messages, so every level
        is met as it is; their failures are tool errors, which a client sees at any level."""

    async def read_resource(self, uri: AnyUrl | str) -> Iterable[ReadResourceContents]:
        """recall://{id}: the ID's inline view (JSON, as recall_get answers); recall://triggers/{id}/payload and
        recall://reports/{id}/body, with their own content types."""
        content, view = _CONTENT_URI.match(str(uri)), _VIEW_URI.match(str(uri))
        if content is None and view is None:
            return await super().read_resource(uri)
        try:
            if view is not None:
                found = await self.binding().client.get(view.group(1))
                return [ReadResourceContents(content=_encode(found).decode(), mime_type="application/json")]
            read = await self.binding().client.read(content.group(2))  # type: ignore[union-attr]
        except RecallError as exc:
            raise ValueError(problem_text(exc)) from None
        data: str | bytes = read.data.decode(errors="replace") if _textual(read.content_type) else read.data
        return [ReadResourceContents(content=data, mime_type=read.content_type.split(";")[0].strip())]


# The tools, one call of the caller's client each. FastMCP reads a tool's input schema from its parameters
# after `client` (see `_bound`): their names, annotations and defaults are what MCP clients see.

async def recall_get(client: AsyncRecallClient, id: Id, budget: Budget = None) -> CallToolResult:
    return await _answer(client.get(id, budget))


AsOf = Annotated[str | None, Field(description="RFC 3339: as it was then.")]


async def recall_events(client: AsyncRecallClient, thread_id: Id, cursor: CursorArg = None,
                        limit: LimitArg = None, as_of: AsOf = None) -> CallToolResult:
    return await _answer(client.list_events(thread_id, cursor, limit, as_of=as_of))


async def recall_read(client: AsyncRecallClient, id: Id,
                      start: Annotated[int | None, Field(ge=0)] = None,
                      end: Annotated[int | None, Field(ge=0)] = None,  # inclusive
                      pattern: Annotated[str | None, Field(description="Literal unless regex (RE2).")] = None,
                      regex: bool = False,
                      context: Annotated[int, Field(ge=0, le=10, description="Lines around a match.")] = 0,
                      max: Annotated[int | None, Field(ge=1, le=100)] = None,
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


async def recall_search(client: AsyncRecallClient, q: Annotated[str, Field(description="What to find.")],
                        mode: Literal["hybrid", "lexical", "semantic", "exact"] | None = None,
                        type: Annotated[list[str] | str | None, Field(
                            description="Kinds: trigger thread worker report memory message.")] = None,
                        status: str | None = None,
                        since: Annotated[str | None, Field(description="RFC 3339.")] = None,
                        until: str | None = None,
                        cursor: CursorArg = None,
                        limit: Annotated[int | None, Field(ge=1, le=100, description="Default 10.")] = None,
                        min_score: Annotated[float | None, Field(ge=0, le=1, description="Default 0.5.")] = None,
                        as_of: AsOf = None,
                        ) -> CallToolResult:
    async def found() -> dict[str, Any]:
        page = await client.search(q, mode=mode, type=type, status=status, since=since, until=until,
                                   cursor=cursor, limit=limit or 10, min_score=min_score, as_of=as_of)
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
                             description="A worker ID.")] = None,
                         app_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                         cursor: CursorArg = None, limit: LimitArg = None) -> CallToolResult:
    return await _answer(client.list_threads(status=status, owner=owner, app_id=app_id, agent_id=agent_id,
                                             run_id=run_id, cursor=cursor, limit=limit))


async def recall_messages(client: AsyncRecallClient, thread_id: Id, cursor: CursorArg = None, limit: LimitArg = None,
                          role: Literal["user", "assistant", "system", "tool"] | None = None,
                          order: Annotated[Literal["asc", "desc"] | None, Field(
                              description="desc: newest first.")] = None,
                          include_retracted: bool = False) -> CallToolResult:
    return await _answer(client.list_messages(thread_id, cursor, limit, role=role, order=order,
                                              include_retracted=include_retracted))


# The roles a model may write through MCP: what it hears, says and is told by its tools. A system message
# steers every later turn of whoever replays the thread, so it is written only through the API, by whoever
# holds the key outright (tests/test_mcp.py::test_recall_say_refuses_a_system_message_and_appends_nothing).
SAY_ROLES = ("user", "assistant", "tool")


async def recall_say(client: AsyncRecallClient, thread_id: Id, messages: Annotated[list[dict[str, Any]], Field(
                         min_length=1, max_length=100)]) -> CallToolResult:
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
                            description="Omit to list the namespace.")] = None,
                        cursor: CursorArg = None, limit: LimitArg = None,
                        as_of: AsOf = None,
                        ) -> CallToolResult:
    if key is not None:
        return await _answer(client.current_memory(namespace, key, as_of=as_of))
    return await _answer(client.list_memories(namespace=namespace, cursor=cursor, limit=limit, as_of=as_of))


async def recall_remember(client: AsyncRecallClient, namespace: NamespaceArg, key: str, value: Any, summary: str = "",
                          kind: ids.MemoryKind = "fact",
                          sources: Annotated[list[str] | None, Field(description="IDs it was learned from.")] = None,
                          tags: dict[str, str] | None = None,
                          confirmed: Literal["user", "agent", "unconfirmed"] = "unconfirmed",
                          ) -> CallToolResult:
    segments = namespace.split("/") if isinstance(namespace, str) else namespace
    return await _answer(client.remember(namespace=segments, key=key, value=value, summary=summary, kind=kind,
                                         sources=sources or [], tags=tags or {}, confirmed=confirmed))


ToolFn = Callable[..., Awaitable[CallToolResult]]


def _object(*required: str) -> dict[str, Any]:
    """A compact output schema: an object holding these members (any others too). Each tool's result is the
    API's view or page (openapi.yaml and docs/mcp.md have their members): tools/list stays small."""
    return {"type": "object", **({"required": list(required)} if required else {})}


VIEW, PAGE = _object("id"), _object("data")


class Spec(NamedTuple):
    """A tool: its function, the key scope it needs, what repeating it does, its description (one or two lines:
    a model reads it in every context; docs/mcp.md has the long form) and its output schema."""

    fn: ToolFn
    scope: Literal["read", "write"]
    idempotent: bool
    description: str
    output: dict[str, Any]


# The tool set in tools/list order.
TOOLS: tuple[Spec, ...] = (
    Spec(recall_get, "read", True,
         "View of any ID (thr_ wkr_ trg_ rpt_ mem_): fields, linked IDs, recent events. Start from a thread; follow "
         "IDs.", VIEW),
    Spec(recall_events, "read", True, "A page of a thread's event log, oldest first.", PAGE),
    Spec(recall_read, "read", True,
         "A trigger's payload or report's body. Grep first: with pattern, the matching lines and their byte "
         "ranges; else bytes start-end.",
         _object()),
    Spec(recall_search, "read", True,
         "Find an ID to start from when you hold none, best first. Note \"no close match\": nearest are not the "
         "answer.",
         _object("hits")),
    Spec(recall_backlinks, "read", True, "What links to an ID, and how.",
         _object("links")),
    Spec(recall_threads, "read", True, "Threads, newest first.", PAGE),
    Spec(recall_messages, "read", True, "A page of a thread's conversation, oldest first.", PAGE),
    Spec(recall_say, "write", False,
         "Append messages {role: user|assistant|tool, content, name?, tool_call_id?, metadata?} to a thread; "
         "another role (system too) appends nothing.",
         _object("messages")),
    Spec(recall_note, "write", False, "Append a one-line note to a thread's log, citing ref.",
         _object("seq")),
    Spec(recall_file_trigger, "write", False, "File an incoming event (a trigger).", VIEW),
    Spec(recall_file_report, "write", False, "File a worker's report on a thread.", VIEW),
    Spec(recall_assign, "write", True, "Make a worker an owner of a thread.", VIEW),
    Spec(recall_set_status, "write", True, "Set a thread's status.", VIEW),
    Spec(recall_recall, "read", True,
         "The current memory at (namespace, key), or without key the namespace's.",
         _object()),
    Spec(recall_remember, "write", False,
         "Write the memory at (namespace, key); it supersedes the current one.",
         VIEW),
)
WRITE_TOOLS = frozenset(spec.fn.__name__ for spec in TOOLS if spec.scope == "write")


def _annotations(spec: Spec) -> ToolAnnotations:
    """Hints a client may act on (auto-approving reads). Every tool acts on this server only (openWorldHint
    false); a write destroys nothing (destructiveHint false: a new version keeps the old one readable) and
    repeating assign or set_status changes nothing (idempotentHint). A hint is sent where it differs from
    the spec's default (readOnlyHint and idempotentHint false, destructiveHint and openWorldHint true), and
    destructiveHint and idempotentHint not for a read, where the spec gives them no meaning."""
    if spec.scope == "read":
        return ToolAnnotations(readOnlyHint=True, openWorldHint=False)
    return ToolAnnotations(destructiveHint=False, idempotentHint=spec.idempotent or None, openWorldHint=False)


def _lean(schema: Any) -> Any:
    """An input schema as a model needs it: without pydantic's titles, `null` alternatives, null defaults (an
    omitted argument is the same) and `additionalProperties: true` (JSON Schema's default)."""
    if isinstance(schema, list):
        return [_lean(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    options = schema.get("anyOf")
    if isinstance(options, list) and {"type": "null"} in options:
        rest = [o for o in options if o != {"type": "null"}]
        schema = {**{k: v for k, v in schema.items() if k != "anyOf"}, **(rest[0] if len(rest) == 1 else
                                                                             {"anyOf": rest})}
    return {k: _lean(v) for k, v in schema.items()
            if k != "title" and not (k == "default" and v is None) and not (k == "additionalProperties" and v is True)}


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
    for spec in TOOLS:
        server.add_tool(_bound(server, spec.fn), description=spec.description, annotations=_annotations(spec),
                        structured_output=False)

    # Listed for discovery; read_resource above serves them (content with its own type).
    @server.resource("recall://{id}", mime_type="application/json",
                     description="The inline view of any ID (thr_, wkr_, trg_, rpt_, mem_), as recall_get answers.")
    async def view(id: str) -> str:
        return _encode(await server.binding().client.get(id)).decode()

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
