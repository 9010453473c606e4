"""The /schema router: the API reference for people at /schema/swagger (Swagger UI over /schema/openapi.json).

Swagger UI's script and style sheet come from the fastapi-offline package, which ships them; this server
serves them, so the page loads with no network. Its folder is found without importing the package (that
would import FastAPI, which nothing here uses). The page, its start-up script and its header's style live
in recall_server/reference/.

Every response of the reference carries a Content-Security-Policy as strict as Swagger UI allows: scripts,
styles and fetches from this origin only (no inline script, no eval), images also as data: URLs (the icons
in swagger-ui.css) and blob: URLs (an image or file a "Try it out" response holds), nothing else, never
framed. Unlike the console's, it does not enforce Trusted Types: Swagger UI renders the document's
Markdown descriptions (sanitized by its DOMPurify) through innerHTML, which Trusted Types would refuse.
tests/test_reference.py loads the page in Chromium and checks that no request leaves the origin.

The /schema router is ours: Litestar adds the documents (openapi.json, openapi.yaml) and its own
/schema/{path} catch-all to it. That catch-all answers text/html; every miss here is raised as a 404
instead, so it is a problem+json like every other error (app.py renders it).
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

from litestar import Request, Response, Router, get
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from recall_server.errors import NotFound
from recall_server.routes.console import page_headers

PATH = "/schema/swagger"
CSP = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "connect-src 'self'",
    "img-src 'self' data: blob:",
    "media-src blob:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
])
HEADERS = page_headers(CSP)
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
SWAGGER_UI = ("swagger-ui-bundle.js", "swagger-ui.css")  # the files taken from fastapi-offline


def _swagger_ui_folder() -> Path:
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the API reference needs the fastapi-offline package (a dependency): pip install fastapi-offline")
    return Path(spec.submodule_search_locations[0]) / "static"


def _files() -> MappingProxyType[str, tuple[bytes, str, str]]:
    """name -> (bytes, media type, ETag) of every file the reference serves, read once."""
    ours = resources.files("recall_server") / "reference"
    entries = [*(e for e in ours.iterdir() if e.is_file()), *(_swagger_ui_folder() / name for name in SWAGGER_UI)]
    found = {}
    for entry in entries:
        suffix = "." + entry.name.rpartition(".")[2]
        if suffix in _TYPES:
            body = entry.read_bytes()
            found[entry.name] = (body, _TYPES[suffix], '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return MappingProxyType(found)


FILES = _files()


class _Files:
    """The reference's files as responses: gzipped where the browser takes it (Swagger UI's script: 1.5 MB, 0.4 MB
    gzipped), each compressed once, when first asked for (not at import: ~50 ms of CPU), validated by ETag."""

    def __init__(self) -> None:
        self._gzipped: dict[str, bytes] = {}

    def response(self, name: str, request: Request[Any, Any, Any]) -> Response[bytes]:
        body, media_type, etag = FILES[name]
        headers = {**HEADERS, "Vary": "Accept-Encoding"}
        if _takes_gzip(request.headers.get("accept-encoding", "")):
            if name not in self._gzipped:
                self._gzipped[name] = gzip.compress(body, 6, mtime=0)
            body, etag = self._gzipped[name], etag[:-1] + '-gzip"'  # another representation, another strong ETag
            headers["Content-Encoding"] = "gzip"
        headers["ETag"] = etag
        held = {tag.strip().removeprefix("W/") for tag in request.headers.get("if-none-match", "").split(",")}
        if etag in held or "*" in held:  # a reload fetches Swagger UI's script once per version
            return Response(b"", status_code=304, headers=headers)
        return Response(body, media_type=media_type, headers=headers)


def _takes_gzip(accept_encoding: str) -> bool:
    """Accept-Encoding allows gzip: named, or else *, with a weight above 0 (RFC 9110, 12.5.3)."""
    weights = {}
    for item in accept_encoding.lower().split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        weight = next((p[2:] for p in params if p.startswith("q=")), "1")
        try:
            weights[coding] = float(weight)
        except ValueError:
            weights[coding] = 0.0
    return weights.get("gzip", weights.get("*", 0.0)) > 0


def _misses_are_problems(response: Response[Any]) -> Response[Any]:
    """Litestar's /schema/{path} catch-all answers an HTML 404; raised, the miss renders as problem+json."""
    if response.status_code == 404:
        raise NotFoundException()
    return response


def schema_router() -> Router:
    """/schema: the reference; Litestar adds the documents its render plugins serve (app.py)."""
    files = _Files()

    @get(PATH.removeprefix("/schema"), sync_to_thread=False)
    def page(request: Request[Any, Any, Any]) -> Response[bytes]:
        """The reference's one page."""
        return files.response("index.html", request)

    @get(PATH.removeprefix("/schema") + "/{name:str}", sync_to_thread=False)
    def asset(name: FromPath[str], request: Request[Any, Any, Any]) -> Response[bytes]:
        """Swagger UI's script and style sheet, and the page's own."""
        if name not in FILES or name == "index.html":
            raise NotFound(f"The API reference has no file {name!r}.")
        return files.response(name, request)

    return Router("/schema", route_handlers=[page, asset], include_in_schema=False,
                  after_request=_misses_are_problems)


@get("/docs", include_in_schema=False, sync_to_thread=False)
def docs() -> Response[bytes]:
    """Where people look for an API's reference first."""
    return Response(b"", status_code=302, headers={"Location": PATH})


ROUTES: list[Any] = [docs]
