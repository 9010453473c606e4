"""A local server on a fresh embedded database, for the contract suites."""

from __future__ import annotations

import os
from pathlib import Path

from recall_server.process import ServerProcess


def fresh_server(home: Path, command: list[str] | None = None) -> ServerProcess:
    """Started on a new data directory, whatever DATABASE_URL says: contracts start from nothing."""
    server = ServerProcess(home / "server.log", "--data-dir", str(home / "data"), command=command)
    server.env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    return server.start()
