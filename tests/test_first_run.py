"""What a person meets first, through the CLI as a subprocess: the start banner, worker processes by core,
readable logs on a terminal and JSON lines elsewhere, `keys create` without `--tenant` in a one-tenant store,
`mcp --data-dir`, and a cursor that is not one."""

from __future__ import annotations

import asyncio
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec
import psutil
import pytest
from helpers import ServerProcess, assert_problem, cli
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client

from recall_server import config
from recall_server.process import free_port

pytestmark = pytest.mark.slow


def test_serve_says_where_everything_is_and_starts_a_worker_per_core(fresh_database: str, tmp_path: Path) -> None:
    """Left to itself (no RECALL_WORKERS), serve starts one worker per core up to the cap; to a file, the log
    is JSON lines only, the first of them (`serving`) naming the API, the console and the reference, which
    answer."""
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if k != "RECALL_WORKERS"}
    server = ServerProcess(fresh_database, log, RECALL_SWEEP_INTERVAL="0")
    server.env = {**env, "DATABASE_URL": fresh_database, "RECALL_SWEEP_INTERVAL": "0"}
    server.start()
    try:
        expected = config.default_workers()
        lines = [msgspec.json.decode(line) for line in log.read_text().splitlines()]  # each one JSON
        serving = next(line for line in lines if line["message"] == "serving")
        assert serving["workers"] == expected and serving["store"] == "DATABASE_URL", serving
        for name, path in (("url", ""), ("console", "/console"), ("reference", "/schema/swagger")):
            assert serving[name] == server.url + path, serving
            assert httpx.get(server.url + path, follow_redirects=True).status_code == 200
        workers = psutil.Process(server.proc.pid).children()
        assert len(workers) == expected, workers
    finally:
        server.stop()


def _read_until(fd: int, wanted: re.Pattern[str], timeout: float) -> str:
    seen, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline and not wanted.search(seen):
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 65536).decode(errors="replace")
            except OSError:  # the child closed the terminal
                break
    return seen


def test_on_a_terminal_the_log_is_text_and_json_when_asked(fresh_database: str) -> None:
    """serve with its output on a pseudo-terminal prints where everything is, then logs
    `HH:MM:SS.mmm level logger: message key=value`; --log-format json keeps JSON lines there too."""
    for flag, line in (([], re.compile(r"^\d\d:\d\d:\d\d\.\d{3} info +recall_server\.access: request .*"
                                       r"method=GET .*route=/readyz .*status=200", re.M)),
                       (["--log-format", "json"], re.compile(r'^\{"ts":.*"route":"/readyz"', re.M))):
        port = free_port()
        main, child = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "recall_server", "serve", "--port", str(port), *flag],
                                env={**os.environ, "DATABASE_URL": fresh_database, "RECALL_WORKERS": "1",
                                     "RECALL_SWEEP_INTERVAL": "0"},
                                stdin=subprocess.DEVNULL, stdout=child, stderr=child, close_fds=True)
        os.close(child)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.2)
            out = _read_until(main, line, 15)
            assert line.search(out), out[-3000:]
            for label, path in (("API", ""), ("console", "/console"), ("reference", "/schema/swagger")):
                assert re.search(rf"^  {label} +http://127\.0\.0\.1:{port}{path}\r?$", out, re.M), out[:2000]
        finally:
            proc.terminate()
            proc.wait(30)
            os.close(main)


def test_keys_create_needs_no_tenant_in_a_store_of_one(fresh_database: str) -> None:
    from click.testing import CliRunner

    from recall_server.cli import main

    def keys_create() -> tuple[int, str]:
        done = CliRunner(env={"DATABASE_URL": fresh_database}).invoke(main, ["keys", "create", "--scope", "read"])
        return done.exit_code, done.output

    ServerProcess(fresh_database, Path(os.devnull)).start().stop()  # migrated: a store of tenant `default`
    code, out = keys_create()
    assert code == 0 and "for tenant default, scope read" in out, out
    cli(fresh_database, "tenants", "create", "second")
    code, out = keys_create()
    assert code == 1 and "several tenants (default, second): name one with --tenant" in out, out


def test_mcp_takes_the_key_serve_saved_in_the_data_dir_it_is_given(
        base_url: str, api_key: str, tmp_path: Path) -> None:
    (tmp_path / "api-key").write_text(api_key + "\n")
    port = base_url.rsplit(":", 1)[1]

    async def tools() -> list[str]:
        command = str(Path(sys.executable).with_name("recall-server"))
        params = StdioServerParameters(command=command, args=["mcp", "--data-dir", str(tmp_path)],
                                       env={**get_default_environment(), "RECALL_PORT": port,
                                            "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return [t.name for t in (await s.list_tools()).tools]

    assert "recall_get" in asyncio.run(tools())


def test_a_cursor_that_is_not_one_says_so(client: httpx.Client, graph) -> None:
    thread = graph.thread()["id"]
    problem = assert_problem(client.get(f"/threads/{thread}/events", params={"cursor": "no such cursor"}), 400)
    assert "cursor: not a cursor this server issued" in problem["detail"] and "regex" not in problem["detail"]
