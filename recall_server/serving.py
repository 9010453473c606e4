"""What `serve` does around the HTTP server in its own process: hold the address until granian binds it, say
where everything is, and configure granian."""

from __future__ import annotations

import logging
import socket
import sys
from pathlib import Path

import click

from recall_server import __version__
from recall_server.config import Settings


def banner(settings: Settings, embedded: bool, key: Path) -> None:
    """Where everything is, once: the API, the console, the reference, and where the key is (never the key).
    To a person at a terminal, as lines on stdout; otherwise one log line (`serving`, with these fields), so
    that a log collector reads only log lines."""
    from recall_server.observability import JsonFormatter, TextFormatter  # prometheus_client: after serve's setup

    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    base = f"http://{'127.0.0.1' if settings.host in ('0.0.0.0', '::') else host}:{settings.port}"
    where = {"version": __version__, "workers": settings.workers, "url": base, "console": f"{base}/console",
             "reference": f"{base}/schema/swagger",
             "store": f"embedded PostgreSQL in {settings.data_dir}" if embedded else "DATABASE_URL",
             **({"key_file": str(key)} if embedded and key.is_file() else {})}
    if sys.stdout.isatty():
        click.echo("\n".join([
            f"recall-server {__version__}, {settings.workers} worker{'s' if settings.workers > 1 else ''}",
            *(f"  {label:<10} {where[name]}" for label, name in (("API", "url"), ("console", "console"),
                                                                  ("reference", "reference"), ("store", "store"))),
            *([f"  key        {key} (a write key for tenant 'default')"] if "key_file" in where else [])]))
        return
    record = logging.LogRecord("recall_server", logging.INFO, __file__, 0, "serving", None, None)
    record.fields = where
    formatter = TextFormatter() if settings.log_format == "text" else JsonFormatter()
    click.echo(formatter.format(record), err=True)


def hold_address(settings: Settings) -> socket.socket:
    """The server's address, bound (not listening) until granian binds it, or exit: "address in use".

    granian binds with SO_REUSEPORT, so a second server on a port in use would start anyway and the
    kernel would share the connections between two stores. This socket sets no SO_REUSEPORT, so its
    bind fails while any server holds the port, and while it is held no other `serve` gets past here.
    """
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    held = socket.socket(family, socket.SOCK_STREAM)
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a closed server's TIME_WAIT is no conflict
    try:
        held.bind((settings.host, settings.port))
    except OSError as exc:
        held.close()
        raise click.ClickException(f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}") from None
    return held


def granian(settings: Settings, logging: dict[str, object]) -> object:
    """The HTTP server: granian, for the request-head limits it enforces before the app sees a byte.

    uvicorn with httptools has no header size limit (a 128 MB header grew a worker past 180 MB),
    and neither of its parsers bounds the time to send a request head (slowloris). granian (hyper)
    answers 431 past `max_header_bytes` or 100 headers, closes a connection whose head (or next
    head, on keep-alive) has not arrived within `header_timeout`, and accepts at most
    `max_connections` connections per worker (the rest wait in the listen backlog).
    """
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server import Server

    return Server(
        "recall_server.asgi:from_env", factory=True, interface=Interfaces.ASGI, address=settings.host,
        port=settings.port, workers=settings.workers, loop=Loops.uvloop, http=HTTPModes.http1, websockets=False,
        backpressure=settings.max_connections,
        http1_settings=HTTP1Settings(header_read_timeout=int(settings.header_timeout * 1000),
                                     max_buffer_size=settings.max_header_bytes),
        log_level=LogLevels(settings.log_level), log_dictconfig=logging, log_access=False,
        respawn_failed_workers=True, workers_kill_timeout=10,  # in-flight requests get 10 s to finish
    )
