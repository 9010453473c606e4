"""The console for people (recall_server/console/): its page and files, and `/` pointing at it.

Public routes: the files hold no data; everything the console shows it reads through the API with the
key the person signs in with. Every response carries a Content-Security-Policy that allows only the
console's own script, style and API calls (no inline script, no eval, nothing from another origin, never
framed), and enforces Trusted Types, so no HTML sink can parse a string (tests/test_console.py).
"""

from __future__ import annotations

from importlib import resources
from types import MappingProxyType
from typing import Any

from litestar import Response, get
from litestar.params import FromPath

from recall_server.errors import NotFound

CSP = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "connect-src 'self'",
    "img-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
    "require-trusted-types-for 'script'",
    "trusted-types 'none'",
])


def page_headers(csp: str) -> MappingProxyType[str, str]:
    """The headers of every page this server serves to a browser (the console, the API reference): its CSP,
    never framed, never sniffed, no referrer, nothing shared across origins, revalidated on each load."""
    return MappingProxyType({
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cross-Origin-Resource-Policy": "same-origin",
        "Cache-Control": "no-cache",
    })


HEADERS = page_headers(CSP)
_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
          ".svg": "image/svg+xml"}  # the framework adds charset=utf-8


def _files() -> MappingProxyType[str, tuple[bytes, str]]:
    """name -> (bytes, media type) of every file the console ships, read once from the package."""
    folder = resources.files("recall_server") / "console"
    found = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    return MappingProxyType(found)


FILES = _files()


def _file(name: str) -> Response[bytes]:
    if name not in FILES:
        raise NotFound(f"The console has no file {name!r}.")
    body, media_type = FILES[name]
    return Response(body, media_type=media_type, headers=dict(HEADERS))


@get(["/console", "/console/"], include_in_schema=False, sync_to_thread=False)
def page() -> Response[bytes]:
    """The console's one page; it routes on the URL fragment, which never reaches the server."""
    return _file("index.html")


@get("/console/{name:str}", include_in_schema=False, sync_to_thread=False)
def asset(name: FromPath[str]) -> Response[bytes]:
    """The console's script and style sheet."""
    return _file(name)


@get("/", include_in_schema=False, sync_to_thread=False)
def root() -> Response[bytes]:
    """A person opening the server lands on the console (the API's reference is at /schema/swagger)."""
    return Response(b"", status_code=302, headers={"Location": "/console", **HEADERS})


ROUTES: list[Any] = [page, asset, root]
