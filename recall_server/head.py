"""HEAD on every GET route: the GET's status and headers (ETag, Content-Length, ...), no body."""

from __future__ import annotations

from typing import Any


class HeadAsGet:
    """ASGI middleware: a HEAD request runs as the GET it asks about, and the body is dropped.

    Litestar routes HEAD only to handlers declared for it; declaring it on each GET would double
    the route table and the OpenAPI document. Content-Length stays the GET's (RFC 9110 9.3.2).
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headless(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        scope["method"] = "GET"
        try:
            await self.app(scope, receive, headless)
        finally:
            scope["method"] = "HEAD"  # the access log and metrics record what was asked
