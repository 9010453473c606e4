"""The whole error vocabulary, the SQLSTATE map, and rendering as RFC 9457 problem+json.

    Problem (HTTP status, title, detail, optional extension members)
     ├── BadRequest            400  malformed JSON, wrong types, bad cursor, bad limit/budget
     ├── Unauthorized          401  missing, malformed, unknown or revoked API key (WWW-Authenticate)
     ├── Forbidden             403  the key's scope does not allow this route
     ├── NotFound              404  unknown, malformed or wrong-kind ID; unknown route
     ├── MethodNotAllowed      405  (carries Allow)
     ├── RequestTimeout        408  the request body did not arrive in time
     ├── Conflict              409  same ID with a different body; a retired ID; Idempotency-Key in flight
     ├── Gone                  410  the object was deleted or has expired (its ID stays retired)
     ├── PayloadTooLarge       413  body over the configured limit
     ├── UnsupportedMediaType  415  a JSON body sent as another content type; grep of content that is not text
     ├── RangeNotSatisfiable   416  (carries Content-Range: bytes */N)
     ├── Unprocessable         422  wrong-kind ID in a body, dangling link, bad content type
     ├── ClientClosedRequest   499  the client left before its body arrived (counted, never sent)
     └── Unavailable           503  database down, pool exhausted, timeout (carries Retry-After)

Anything else is a bug and becomes a logged 500 problem without internals in the body.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from recall_server import ids

log = logging.getLogger("recall_server")

PROBLEM_JSON = "application/problem+json"


class Problem(Exception):
    status = 500
    title = "Internal Server Error"
    slug = "internal"

    def __init__(self, detail: str, *, headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def body(self, instance: str) -> dict[str, Any]:
        return {
            "type": f"urn:recall-server:problem:{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "instance": instance,
            **self.extra,
        }


class BadRequest(Problem):
    status, title, slug = 400, "Bad Request", "bad-request"


class Unauthorized(Problem):
    status, title, slug = 401, "Unauthorized", "unauthorized"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="recall"'}, **extra)


class Forbidden(Problem):
    status, title, slug = 403, "Forbidden", "forbidden"


class NotFound(Problem):
    status, title, slug = 404, "Not Found", "not-found"


class MethodNotAllowed(Problem):
    status, title, slug = 405, "Method Not Allowed", "method-not-allowed"


class RequestTimeout(Problem):
    status, title, slug = 408, "Request Timeout", "request-timeout"


class Conflict(Problem):
    status, title, slug = 409, "Conflict", "conflict"


class Gone(Problem):
    status, title, slug = 410, "Gone", "gone"


class PayloadTooLarge(Problem):
    status, title, slug = 413, "Content Too Large", "too-large"


class UnsupportedMediaType(Problem):
    status, title, slug = 415, "Unsupported Media Type", "unsupported-media-type"


class RangeNotSatisfiable(Problem):
    status, title, slug = 416, "Range Not Satisfiable", "range-not-satisfiable"


class Unprocessable(Problem):
    status, title, slug = 422, "Unprocessable Content", "unprocessable"


class ClientClosedRequest(Problem):
    status, title, slug = 499, "Client Closed Request", "client-closed-request"


class Unavailable(Problem):
    status, title, slug = 503, "Service Unavailable", "unavailable"

    def __init__(self, detail: str, *, retry_after: int = 1, **extra: Any) -> None:
        super().__init__(detail, headers={"Retry-After": str(retry_after)}, **extra)


BY_STATUS: dict[int, type[Problem]] = {
    cls.status: cls
    for cls in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, RequestTimeout, Conflict, Gone,
                PayloadTooLarge, UnsupportedMediaType, RangeNotSatisfiable, Unprocessable, Unavailable)
}


def from_sqlstate(sqlstate: str | None, message: str) -> Problem | None:
    """Map a database error class to the problem a client should see, or None for a bug."""
    if not sqlstate:
        return None
    if sqlstate == "23505":
        return Conflict("The object was created concurrently with a different body; retry to see it.")
    if sqlstate == "40001" or sqlstate == "40P01":
        return Unavailable("The write collided with a concurrent one; retry.", retry_after=0)
    if sqlstate.startswith(("08", "53", "57")):
        return Unavailable("The database is unavailable; retry shortly.")
    if sqlstate == "RG403":  # a write the key's grants do not cover (recall_grants_cover names the namespace)
        return Forbidden(message)
    if sqlstate == "23514":  # a CHECK in schema.sql: the field limits recall_server/models also states
        return BadRequest("A value in the request breaks a field limit (length, characters or count).")
    if sqlstate.startswith("22"):  # data exceptions: a value the client sent that PostgreSQL cannot hold
        return BadRequest("A value in the request cannot be stored (out of range, or text with a NUL character).")
    return None


def not_found(value: str, expected_kind: str) -> NotFound:
    """The loud miss: names the ID, and says where a wrong-kind ID actually lives."""
    kind = ids.kind_of(value)
    if kind is None:
        return NotFound(
            f"{value!r} is not a recall ID: expected <prefix>_<body> with prefix trg, thr, wkr, rpt or mem "
            "and a body of 1-64 characters from [A-Za-z0-9_-].",
            id=value,
        )
    if kind != expected_kind:
        return NotFound(
            f"{value} is a {kind} ID, not a {expected_kind} ID; {kind}s live at {ids.href(value)}.",
            id=value,
            kind=kind,
        )
    return NotFound(f"No {expected_kind} with ID {value} exists.", id=value)


def unknown_key() -> Unauthorized:
    """A well-formed key the database does not know, or has revoked (the two are not told apart)."""
    return Unauthorized("The API key is unknown or has been revoked.")


def bad_signature() -> Unauthorized:
    """A webhook delivery whose X-Hub-Signature-256 is missing, malformed or wrong."""
    problem = Unauthorized("X-Hub-Signature-256 is missing, malformed, or not the HMAC-SHA256 of this body "
                           "under the hook's secret.")
    problem.headers = {"WWW-Authenticate": 'HMAC-SHA256 realm="recall-hooks", header="X-Hub-Signature-256"'}
    return problem


def unknown_hook(hook_id: str) -> NotFound:
    """Unknown and revoked hooks are not told apart."""
    return NotFound(f"No webhook {hook_id} exists (unknown or revoked).", id=hook_id)


def reused_delivery(delivery: str) -> Conflict:
    return Conflict(f"Delivery {delivery} was already received by this hook with other content; a delivery GUID "
                    "names one delivery. Nothing was stored.", delivery=delivery)


def gone(value: str) -> Gone:
    """A miss that is not a mistake: the object existed and was removed on purpose (or expired)."""
    return Gone(f"{value} was deleted or has expired; its content is gone and the ID is never reused.", id=value)


def require_live(state: ids.State, value: str, expected_kind: str) -> None:
    """The one turn from an ID's state to a miss: 404 if it never existed, 410 if it is gone."""
    if state is ids.State.MISSING:
        raise not_found(value, expected_kind)
    if state is ids.State.GONE:
        raise gone(value)


def encode(problem: Problem, instance: str, request_id: str | None = None) -> bytes:
    body = problem.body(instance)
    if request_id:
        body["request_id"] = request_id
    return msgspec.json.encode(body)


async def send(send: Any, problem: Problem, instance: str, request_id: str | None = None) -> None:
    """A problem as a whole ASGI response, for the layers in front of the framework (direct.Direct,
    mcp_http.HttpEndpoint); the framework's handler renders the same headers and body (app._problem_response)."""
    body = encode(problem, instance, request_id)
    headers = [*((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in problem.headers.items()),
               (b"content-type", PROBLEM_JSON.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": problem.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def as_problem(exc: Exception, method: str, path: str) -> Problem:
    """The problem for an exception that is not the framework's: ours as it is, a database error by its
    SQLSTATE, anything else a logged 500 without internals in the body."""
    if isinstance(exc, Problem):
        return exc
    mapped = from_sqlstate(getattr(exc, "sqlstate", None), str(exc))  # asyncpg.PostgresError carries it
    if mapped is not None:
        return mapped
    log.exception("unhandled error on %s %s", method, path, exc_info=exc)
    return Problem("An unexpected error occurred; it has been logged.")
