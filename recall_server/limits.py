"""Request-body limits the HTTP server does not enforce: a read timeout, and a client that leaves mid-body.

granian bounds the request head (size, count, time) and the connections; the body is read by the
application, one ASGI `receive()` at a time, so its bounds live here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from recall_server.errors import ClientClosedRequest, RequestTimeout

CLIENT_GONE = "client_gone"  # scope["state"] flag: the client disconnected before its body arrived


class BodyGuard:
    """ASGI middleware around the app:

    - the whole body must arrive within `timeout` seconds of the first read, else the request is a
      408 problem (a per-read timeout would let a client trickle one byte at a time forever);
    - a disconnect before the body is complete raises ClientClosedRequest (status 499, never sent),
      so a client that hangs up is counted as such, not as a 500 with a traceback;
    - a response sent before the body was read to its end says `Connection: close` (the server
      drops the unread rest, and a keep-alive client must not reuse the connection).
    """

    def __init__(self, app: Any, timeout: float) -> None:
        self.app = app
        self.timeout = timeout

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        unread = any(k == b"transfer-encoding" or (k == b"content-length" and v.strip() not in (b"0", b""))
                     for k, v in scope["headers"])
        state = scope.setdefault("state", {})
        deadline: float | None = None

        async def bounded_receive() -> dict[str, Any]:
            nonlocal unread, deadline
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

        async def closing_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and unread:
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            await send(message)

        try:  # a request without a body can never answer before reading it: `send` needs no wrapper
            await self.app(scope, bounded_receive, closing_send if unread else send)
        except Exception:
            if not state.get(CLIENT_GONE):
                raise
            # nobody is left to answer: writing the response to the closed connection may fail too
