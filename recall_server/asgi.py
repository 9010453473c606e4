"""The whole ASGI stack around the framework app, in order: what every request passes through.

Outermost first:

1. `observability.ObservabilityMiddleware`: request ID, the access-log line and the metrics, for
   every request (unmatched ones and /mcp too);
2. `head.HeadAsGet`: HEAD runs as the GET it asks about;
3. `limits.BodyGuard`: the body timeout, a client that leaves mid-body, and the unread rest of a body
   answered early (read and dropped, bounded, so the client reads the answer);
4. `/mcp` to `mcp_http.HttpEndpoint` (its own key check, then the Origin, size and JSON bounds);
5. `direct.Direct`: the hottest routes in plain ASGI, on the framework's routes, key check and
   problem renderer;
6. the framework (app.create_app): `routes.RequireKey` (routes.caller_key: the key before the body),
   routing, the handlers, the one error handler.
"""

from __future__ import annotations

import logging
from typing import Any

from recall_server import config
from recall_server.app import create_app
from recall_server.config import Settings
from recall_server.direct import Direct
from recall_server.head import HeadAsGet
from recall_server.limits import BodyGuard
from recall_server.mcp_http import HttpEndpoint
from recall_server.observability import ObservabilityMiddleware
from recall_server.process import die_with_parent


class Mount:
    """`path` to `endpoint`, labelled with its path in the access log and metrics; the rest to `app`."""

    def __init__(self, app: Any, path: str, endpoint: Any) -> None:
        self.app, self.path, self.endpoint = app, path, endpoint

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == self.path:
            scope["path_template"] = self.path
            await self.endpoint(scope, receive, send)
        else:
            await self.app(scope, receive, send)


def stack(settings: Settings) -> ObservabilityMiddleware:
    """The framework app of `settings` inside every layer, outermost first (this module's docstring)."""
    app = create_app(settings)
    mcp: HttpEndpoint = app.state.mcp
    inner = Mount(Direct(app, settings.max_body_bytes, settings.max_json_items), mcp.path, mcp)
    return ObservabilityMiddleware(HeadAsGet(BodyGuard(inner, settings.body_timeout)))


def from_env() -> ObservabilityMiddleware:
    """The ASGI factory worker processes import: settings come from the environment the CLI set."""
    die_with_parent()
    # A library's warning (from any thread: the embedder loads in one) is a JSON log line like the
    # rest, not bare text on stderr; before any thread starts, so a thread's catch_warnings keeps it.
    logging.captureWarnings(True)
    return stack(config.load())
