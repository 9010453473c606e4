"""Thin HTTP handlers: typed input -> one service call -> Struct out. No SQL here."""

from __future__ import annotations

import re
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode

from litestar import Request, Response
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import HeaderParameter, Parameter
from litestar.types import ASGIApp, Empty, Receive, Scope, Send

from recall_server import auth, content, jsonbody, spill
from recall_server.auth import Credential
from recall_server.cursor import PAGE_BYTES
from recall_server.errors import PROBLEM_JSON, BadRequest
from recall_server.limits import has_body
from recall_server.models import ProblemBody
from recall_server.rows import Content, Labels, Outcome
from recall_server.service import Service

Budget = Annotated[
    int,
    Parameter(
        ge=spill.MIN_BUDGET, le=spill.MAX_BUDGET,
        description="Upper bound, in bytes, of the inline view; what does not fit is spilled behind hrefs.",
    ),
]
Limit = Annotated[int, Parameter(ge=1, le=500, description="Page size.")]
# The lists whose items can be large (checkpoints, messages, memories): cursor.PAGE_BYTES ends a page early.
SizedLimit = Annotated[int, Parameter(ge=1, le=500, description=(
    f"Page size. A page also ends before its items' JSON would pass {PAGE_BYTES // 1024 ** 2} MiB (an item "
    "larger than that comes alone), with has_more and next_cursor: follow next_cursor while has_more, "
    "never stop at a page shorter than limit."))]
# A read as of an instant: the state that held then (docs/memories.md#as-of). Erased data is gone at every time.
AsOf = Annotated[str | None, Parameter(max_length=64, description=(
    "RFC 3339 date-time with an offset: the state at that instant (what was current, expired or appended "
    "by then). What is erased is gone at every time."))]
Cursor = Annotated[
    str | None,
    Parameter(description="Opaque cursor from a previous page's next_cursor.", max_length=512,
              pattern=r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\Z"),
]

_LABEL = r"^(\*|[A-Za-z0-9._:-]{1,64})\Z"
# A namespace in a URL: 1-8 segments joined by '/'.
NAMESPACE = r"^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64}){0,7}\Z"

_DESCRIPTIONS = {
    400: "Malformed JSON, wrong field types, a bad cursor, or an out-of-range parameter.",
    401: "Missing, malformed, unknown or revoked API key (see WWW-Authenticate).",
    403: "The API key's scope does not allow this operation.",
    404: "No object with this ID (unknown, malformed, or of another kind).",
    409: "The ID exists with a different body, or is retired; or a request with this Idempotency-Key is in flight.",
    410: "The object was deleted or has expired; its ID is retired.",
    413: "The request body is larger than the configured limit.",
    415: "A JSON body not sent as application/json (or +json); or grep of content that is not text or JSON.",
    416: "The byte range cannot be satisfied.",
    422: "The body names a wrong-kind or missing (dangling) ID, or the Idempotency-Key was used for another request.",
    503: "The database is unavailable or overloaded; retry after Retry-After seconds.",
}


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI entries for the problem+json errors a route can return (415 wherever a body is, i.e. 413)."""
    if 413 in statuses:
        statuses = (*statuses, 415)
    return {
        status: ResponseSpec(
            data_container=ProblemBody, media_type=PROBLEM_JSON, description=_DESCRIPTIONS[status],
            generate_examples=False,
        )
        for status in statuses
    }


class Caller(Request[Any, Any, Any]):
    """The request as handlers see it: the service, the caller's key, and JSON that decodes or is a 400.

    Handlers take the service and key from here rather than as two injected dependencies:
    Litestar resolves two or more dependencies of a handler in an anyio task group, a cost per
    request (litestar#4563) that the profile put at ~9% of GET /threads/{id}.
    """

    @property
    def service(self) -> Service:
        return self.app.state.service

    @property
    def cred(self) -> Credential:
        """The key RequireKey parsed (the database checks it with the request's own statement)."""
        return self.scope["state"]["credential"]

    async def json(self) -> Any:
        """The body as JSON: 415 unless sent as application/json or +json; 400 when it is not JSON,
        nests too deeply or repeats a key (jsonbody.decode)."""
        if self._json is Empty:
            jsonbody.require_json(self.headers.get("content-type"))
            self._json = jsonbody.decode(await self.body(), self.app.state.settings.max_json_items)
        return self._json

    async def require_booleans(self, *fields: str) -> None:
        """400 unless each of these body fields, when present, is a JSON true or false: the framework converts
        bodies leniently (0 would pass as false), and the schema says boolean."""
        body = await self.json()
        for field in fields:
            if field in body and not isinstance(body[field], bool):
                raise BadRequest(f"{field} must be true or false.", field=field)


async def caller_key(scope: Any, state: Any) -> Credential:
    """The request's key, or 401 (the one key check of every keyed route, the framework's and direct.Direct's).

    A well-formed Bearer key; the database checks it in the request's own statement. A request with a
    body, or a grep (a pattern to compile), has its key checked with the database first (a check this
    process made within auth.REVOCATION_WINDOW counts): with a forged key, no byte of the body is read
    and no pattern compiled (tests/test_edge.py).
    """
    cred = auth.from_headers(scope["headers"], state.key_cache)
    if scope["path"].endswith("/grep") or has_body(scope["headers"]):
        await state.service.admin.check_key(cred)
    return cred


class RequireKey:
    """Middleware of the protected routes: the caller's key (caller_key) or 401, before the body is read.

    Middleware rather than a Litestar guard: Litestar copies the route handler for every guard call.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "OPTIONS":  # OPTIONS says which methods exist, nothing about data
            scope.setdefault("state", {})["credential"] = await caller_key(scope, scope["app"].state)
        await self.app(scope, receive, send)


class WholeNumbers:
    """Middleware of the protected routes: `budget` and `limit` are written as whole numbers (digits)
    or the request is a 400. Litestar would take 1e6 or 4096.0 for an int and run with it."""

    NAMES = ("budget", "limit")

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        query: bytes = scope.get("query_string", b"")
        if query and (b"budget" in query or b"limit" in query):
            for name, value in parse_qsl(query.decode("latin-1"), keep_blank_values=True, errors="replace"):
                if name in self.NAMES and not _DIGITS.match(value):
                    raise BadRequest(f"Query parameter {name} must be a whole number of at most 7 digits, "
                                     f"not {value[:40]!r}.")
        await self.app(scope, receive, send)


_DIGITS = re.compile(r"^[0-9]{1,7}\Z")


def labels(
    app_id: Annotated[str | None, Parameter(description="Only objects with this app_id (`*`: any).", pattern=_LABEL)] = None,
    agent_id: Annotated[str | None, Parameter(description="Only objects with this agent_id (`*`: any).", pattern=_LABEL)] = None,
    run_id: Annotated[str | None, Parameter(description="Only objects with this run_id (`*`: any).", pattern=_LABEL)] = None,
) -> Labels:
    """The app/agent/run filter of a list; `*` or absent means any."""
    return Labels(*(None if v in (None, "*") else v for v in (app_id, agent_id, run_id)))


LabelFilter = NamedDependency[Labels]  # injected as `labels`


IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(name="Idempotency-Key", min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+\Z",
              description="Retries with the same key and request replay the first outcome (24 h by default)."),
]


def sent(outcome: Outcome) -> Response[Any]:
    """A write's outcome: its status and exact body, Location for creates, the replay marker."""
    headers = {"Location": outcome.location} if outcome.location else {}
    if outcome.replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(outcome.body, status_code=outcome.status, media_type="application/json", headers=headers)


def paged(request: Request[Any, Any, Any], page: Any) -> Response[Any]:
    """A page with an RFC 8288 Link to the next one when there is more."""
    headers = {}
    if page.has_more:
        query = {k: v for k, v in request.query_params.items() if k != "cursor"}
        query["cursor"] = page.next_cursor
        headers["Link"] = f'<{request.url.path}?{urlencode(query)}>; rel="next"'
    return Response(page, headers=headers)


def serve_content(request: Request[Any, Any, Any], found: Content) -> Response[bytes]:
    """A payload or body as stored, under its own content type, made inert for a browser (content.INERT)."""
    served = content.serve(
        found.data, found.sha256,
        if_none_match=request.headers.get("if-none-match"),
        range_=request.headers.get("range"),
        if_range=request.headers.get("if-range"),
    )
    return Response(served.data, status_code=served.status, media_type=found.content_type,
                    headers=served.headers)
