"""/mcp on the server: the MCP tools of mcp.py as streamable HTTP, behind the caller's Origin, key, method
and body checks (stateless, JSON responses: any worker process answers any request)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec
from litestar.types import Receive, Scope, Send
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INVALID_PARAMS

from recall_server import errors, jsonbody
from recall_server.client import AsyncRecallClient, RecallError
from recall_server.limits import read_body, replay
from recall_server.mcp import STATE_KEY, Binding, RecallMCP, new_run
from recall_server.observability import ObservabilityMiddleware, request_id
from recall_server.service import trace

_encode = msgspec.json.encode


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
            scope.setdefault("state", {})[STATE_KEY] = Binding(client, writable)  # type: ignore[typeddict-item]
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
