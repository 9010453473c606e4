"""Request-body limits the HTTP server does not enforce: a read timeout, a client that leaves mid-body, and
the unread rest of a body refused early.

granian bounds the request head (size, count, time) and the connections; the body is read by the
application, one ASGI `receive()` at a time, so its bounds live here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from recall_server.errors import ClientClosedRequest, PayloadTooLarge, RequestTimeout

CLIENT_GONE = "client_gone"  # scope["state"] flag: the client disconnected before its body arrived

# After an answer sent before the body was read (401, 413, ...), the rest of the body is read and dropped,
# up to this much, within the body timeout. Closing at once while the client still sends resets the
# connection, and ordinary clients (urllib, requests), which read only after sending, see a broken pipe
# instead of the answer (tests/test_edge.py sends 64 MB to a write route with http.client).
DRAIN_BYTES = 128 * 1024 * 1024


def has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request's (ASGI) headers announce a body."""
    return any(k == b"transfer-encoding" or (k == b"content-length" and v.strip() not in (b"0", b""))
               for k, v in headers)


class BodyGuard:
    """ASGI middleware around the app:

    - the whole body must arrive within `timeout` seconds of the first read, else the request is a
      408 problem (a per-read timeout would let a client trickle one byte at a time forever);
    - a disconnect before the body is complete raises ClientClosedRequest (status 499, never sent),
      so a client that hangs up is counted as such, not as a 500 with a traceback;
    - a response sent before the body was read to its end says `Connection: close` (a keep-alive
      client must not reuse the connection), and the unread rest is then read and dropped, up to
      DRAIN_BYTES within the same timeout, so that the client gets to read the answer;
    - once the body is complete, `receive()` waits without a bound: what waits then (a streamed
      response listening for the disconnect) is not a slow body.
    """

    def __init__(self, app: Any, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        unread = has_body(scope["headers"])
        state = scope.setdefault("state", {})
        deadline: float | None = None

        async def bounded_receive() -> dict[str, Any]:
            nonlocal unread, deadline
            if not unread:
                return await receive()  # the body is complete: only a disconnect can come
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + self.timeout
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(f"The request body did not arrive within {self.timeout:g} seconds.") from None
            if message["type"] == "http.disconnect":
                if unread:
                    state[CLIENT_GONE] = True
                    raise ClientClosedRequest("The client disconnected before sending the whole body.")
                return message
            if not message.get("more_body", False):
                unread = False
            return message

        answered_early = False

        async def closing_send(message: dict[str, Any]) -> None:
            nonlocal answered_early
            if message["type"] == "http.response.start" and unread:
                answered_early = True
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            await send(message)

        try:  # a request without a body can never answer before reading it: `send` needs no wrapper
            await self.app(scope, bounded_receive, closing_send if unread else send)
        except Exception:
            if not state.get(CLIENT_GONE):
                raise
            # nobody is left to answer: writing the response to the closed connection may fail too
            return
        if answered_early and unread:
            if deadline is None:
                deadline = asyncio.get_running_loop().time() + self.timeout
            await _drain(receive, deadline)


async def _drain(receive: Any, deadline: float) -> None:
    """Read and drop the rest of a body already answered, up to DRAIN_BYTES, until `deadline`."""
    dropped = 0
    try:
        async with asyncio.timeout_at(deadline):
            while dropped < DRAIN_BYTES:
                message = await receive()
                dropped += len(message.get("body", b""))
                if message["type"] != "http.request" or not message.get("more_body", False):
                    return
    except TimeoutError:
        return  # the answer was sent; a client that stops sending gets nothing more


async def read_body(receive: Any, limit: int | None = None) -> bytes:
    """A request's whole body, from its http.request messages; 413 past `limit` bytes (none: the caller
    knows the length is within it)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if limit is not None and size > limit:
            raise PayloadTooLarge(f"The request body is larger than {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay(body: bytes, receive: Any) -> Any:
    """`receive` for the next app: the body already read, then whatever comes next (a disconnect)."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        return pending.pop() if pending else await receive()

    return replayed
