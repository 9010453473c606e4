"""A local server on a fresh embedded database, for the contract suites."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from recall_server.process import ServerProcess


def scratch_dir() -> Path:
    """Outside pytest's basetemp, which a starting pytest process resets to mode 0700 (see tests/helpers.py)."""
    return Path(tempfile.mkdtemp(prefix="recall-contract-"))


def fresh_server(home: Path, command: list[str] | None = None) -> ServerProcess:
    """Started on a new data directory, whatever DATABASE_URL says: contracts start from nothing."""
    server = ServerProcess(home / "server.log", "--data-dir", str(home / "data"), command=command)
    server.env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "RECALL_API_KEY")}
    return server.start()


def admin_key(server: ServerProcess, home: Path) -> str:
    """An admin key for tenant `default`, made with the operator CLI on the running embedded store."""
    run = subprocess.run(
        [sys.executable, "-m", "recall_server", "keys", "create", "--tenant", "default", "--scope", "admin",
         "--label", "contract suite", "--data-dir", str(home / "data")],
        env=server.env, capture_output=True, text=True, timeout=60, check=True,
    )
    return run.stdout.strip().splitlines()[-1]
