"""The one entry point: serve, migrate, openapi, demo."""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.error
from pathlib import Path

import click
import msgspec

from recall_server import config
from recall_server.config import ENV_NAMES, Settings


def _settings(**flags: object) -> Settings:
    return config.load(**flags)


def _dsn(settings: Settings) -> str:
    if settings.database_url:
        return settings.database_url
    from recall_server.db import embedded

    return embedded.start(settings.data_dir)


data_dir_option = click.option(
    "--data-dir", type=click.Path(path_type=Path), default=None,
    help=f"Embedded PostgreSQL data directory (env {ENV_NAMES['data_dir']}); ignored when DATABASE_URL is set.",
)


@click.group()
def main() -> None:
    """recall-server: the Chain-of-Recall reference graph server."""


@main.command()
@click.option("--host", default=None, help=f"Bind address (env {ENV_NAMES['host']}, default 127.0.0.1).")
@click.option("--port", type=int, default=None, help=f"Port (env {ENV_NAMES['port']}, default 8000).")
@click.option("--workers", type=int, default=None, help=f"Worker processes (env {ENV_NAMES['workers']}, default 1).")
@data_dir_option
def serve(host: str | None, port: int | None, workers: int | None, data_dir: Path | None) -> None:
    """Start the HTTP server (migrating the database first)."""
    import uvicorn

    from recall_server.db.migrate import migrate

    settings = _settings(host=host, port=port, workers=workers, data_dir=data_dir)
    settings = msgspec.structs.replace(settings, database_url=_dsn(settings))
    if settings.migrate_on_start:
        asyncio.run(migrate(settings.database_url))
    os.environ.update(config.to_env(settings))  # worker processes build their settings from it
    uvicorn.run(
        "recall_server.app:from_env", factory=True, host=settings.host, port=settings.port,
        workers=settings.workers, loop="uvloop", http="httptools", log_level=settings.log_level,
        access_log=False, proxy_headers=False, server_header=False, timeout_graceful_shutdown=10,
    )


@main.command("migrate")
@data_dir_option
def migrate_command(data_dir: Path | None) -> None:
    """Apply schema.sql (idempotent) and print the schema version."""
    from recall_server.db.migrate import migrate

    settings = _settings(data_dir=data_dir)
    version = asyncio.run(migrate(_dsn(settings)))
    click.echo(f"schema version {version}")


@main.command()
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None, help="Write here instead of stdout.")
def openapi(output: Path | None) -> None:
    """Print the OpenAPI document the server serves, as YAML (this is how openapi.yaml is made)."""
    from recall_server.app import create_app
    from recall_server.openapi import document_yaml

    text = document_yaml(create_app(msgspec.structs.replace(config.load(), database_url="postgresql://unused")))
    if output is None:
        click.echo(text, nl=False)
    else:
        output.write_text(text)


@main.command()
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="Base URL of a running server.")
def demo(url: str) -> None:
    """Load the PR #412 story into a running server and print the hop-by-hop recall."""
    from recall_server.demo import run

    try:
        run(url.rstrip("/"), click.echo)
    except urllib.error.URLError as exc:
        click.echo(f"cannot reach {url}: {exc.reason}; start it with `recall-server serve`", err=True)
        sys.exit(1)


