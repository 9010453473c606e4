"""The edge of the server, against real server processes: the key before any request-dependent work,
bounded JSON on every route and on /mcp, /mcp's transport rules, one server per port, and a refused
body the client can still read the answer to."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from helpers import ServerProcess, assert_problem, create_key, uid

FORGED = f"rk_{'0' * 16}.{'A' * 43}"  # well-formed, unknown
JSON = {"content-type": "application/json"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", **JSON}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def tool_call(arguments: bytes | dict, name: str = "recall_get") -> bytes:
    """A tools/call request whose arguments are `arguments` (raw JSON bytes are inserted as they are)."""
    raw = arguments if isinstance(arguments, bytes) else json.dumps(arguments).encode()
    return (b'{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "' + name.encode()
            + b'", "arguments": ' + raw + b"}}")


@pytest.fixture(scope="module")
def read_key(database_url: str, server: ServerProcess) -> str:
    return create_key(database_url, "default", "read")


# ---- the key before the body, the pattern, anything the request asks for ---------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", ["/threads", "/triggers", "/workers", "/memories"])
def test_a_forged_key_is_401_before_its_body_is_read(base_url: str, path: str) -> None:
    """Malformed JSON and a body over the item bound would be a 400 and a 413 if parsed: the key comes first."""
    for body in (b'{"title": ', json.dumps({f"k{i}": i for i in range(150_000)}).encode()):
        r = httpx.post(base_url + path, content=body, headers={**bearer(FORGED), **JSON}, timeout=30)
        assert_problem(r, 401)


def test_a_forged_key_is_401_before_a_pattern_is_compiled(base_url: str) -> None:
    for path in ("/triggers/trg_x/payload/grep", "/reports/rpt_x/body/grep"):
        r = httpx.get(base_url + path, params={"pattern": "(", "regex": "true"}, headers=bearer(FORGED))
        assert_problem(r, 401)


def test_a_body_of_too_many_keys_is_a_413_problem_and_writes_nothing(base_url: str, api_key: str, sql) -> None:
    trigger = uid("trg")
    payload = {f"k{i}": i for i in range(120_000)}
    for path, body in (("/triggers", {"id": trigger, "source": "s", "summary": "s", "payload": payload}),
                       ("/threads", {"title": "t", **payload})):
        r = httpx.post(base_url + path, json=body, headers=bearer(api_key), timeout=30)
        assert "keys and array items" in assert_problem(r, 413)["detail"]
    assert sql("SELECT count(*) FROM triggers WHERE id = $1", trigger)[0][0] == 0


def test_commas_inside_strings_are_not_items(base_url: str, api_key: str) -> None:
    payload = "a, b, c: " * 60_000  # 180k commas, all in one string
    r = httpx.post(base_url + "/triggers", json={"source": "s", "summary": "s", "payload": payload,
                                                  "content_type": "text/plain"}, headers=bearer(api_key), timeout=30)
    assert r.status_code == 201, r.text


# ---- /mcp -----------------------------------------------------------------------------------------------


def test_mcp_bounds_the_json_it_is_sent(base_url: str, read_key: str) -> None:
    headers = {**bearer(read_key), **MCP_HEADERS}
    deep = httpx.post(base_url + "/mcp", content=tool_call(b"[" * 100_000 + b"]" * 100_000), headers=headers,
                      timeout=30)
    assert_problem(deep, 400)
    wide = httpx.post(base_url + "/mcp", content=tool_call({f"k{i}": i for i in range(150_000)}), headers=headers,
                      timeout=30)  # over /mcp's own bounds too: a tool error (tests/test_mcp.py)
    assert wide.status_code == 200 and wide.json()["result"]["isError"], wide.text
    assert "(RECALL_MCP_MAX_BODY_BYTES, RECALL_MCP_MAX_ITEMS)" in wide.json()["result"]["content"][0]["text"]
    big = httpx.post(base_url + "/mcp", content=tool_call({"id": "x" * (9 << 20)}), headers=headers, timeout=30)
    assert_problem(big, 413)
    ok = httpx.post(base_url + "/mcp", json=INITIALIZE, headers=headers, timeout=30)
    assert ok.status_code == 200 and ok.json()["result"]["serverInfo"]["name"] == "recall"


def test_mcp_refuses_a_foreign_origin_and_allows_loopback_and_none(base_url: str, read_key: str) -> None:
    headers = {**bearer(read_key), **MCP_HEADERS}
    for origin in ("http://evil.example", "http://localhost.evil.example", "null"):
        r = httpx.post(base_url + "/mcp", json=INITIALIZE, headers={**headers, "Origin": origin})
        assert_problem(r, 403)
    for origin in ("http://localhost:3000", "http://127.0.0.1", None):
        r = httpx.post(base_url + "/mcp", json=INITIALIZE, headers={**headers, **({"Origin": origin} if origin else {})})
        assert r.status_code == 200, (origin, r.text)


@pytest.mark.slow
def test_mcp_allowed_origins_are_a_setting(database_url: str, tmp_path, read_key: str) -> None:
    server = ServerProcess(database_url, tmp_path / "server.log", RECALL_SWEEP_INTERVAL="0",
                           RECALL_MCP_ALLOWED_ORIGINS="https://app.example, https://other.example").start()
    try:
        headers = {**bearer(read_key), **MCP_HEADERS}
        good = httpx.post(server.url + "/mcp", json=INITIALIZE, headers={**headers, "Origin": "https://app.example"})
        assert good.status_code == 200, good.text
        assert_problem(httpx.post(server.url + "/mcp", json=INITIALIZE,
                                  headers={**headers, "Origin": "http://localhost:3000"}), 403)
    finally:
        server.stop()


def test_get_mcp_is_a_prompt_405_not_a_stream_cut_later(base_url: str, read_key: str, server: ServerProcess) -> None:
    started = time.monotonic()
    r = httpx.get(base_url + "/mcp", headers={**bearer(read_key), "Accept": "text/event-stream"}, timeout=10)
    assert time.monotonic() - started < 5
    assert_problem(r, 405)
    assert r.headers["allow"] == "POST"


def test_mcp_requests_are_logged_and_counted_as_mcp(base_url: str, read_key: str, server: ServerProcess) -> None:
    rid = "edge-mcp-" + uid("x")[2:]
    r = httpx.post(base_url + "/mcp", json=INITIALIZE, headers={**bearer(read_key), **MCP_HEADERS,
                                                                "X-Request-ID": rid})
    assert r.status_code == 200
    deadline = time.monotonic() + 5
    while rid not in server.log.read_text():
        assert time.monotonic() < deadline, "no access-log line"
        time.sleep(0.1)
    line = next(json.loads(x) for x in server.log.read_text().splitlines() if rid in x and '"request"' in x)
    assert (line["path"], line["route"], line["status"]) == ("/mcp", "/mcp", 200)
    metrics = httpx.get(base_url + "/metrics").text
    assert 'recall_http_requests_total{method="POST",route="/mcp",status="200"}' in metrics


def test_mcp_keeps_a_run_id_of_up_to_128_characters_and_refuses_a_malformed_one(
        base_url: str, api_key: str, sql) -> None:
    made = httpx.post(base_url + "/threads", json={"title": "t"}, headers=bearer(api_key))
    run = "r" * 100 + uid("x")[2:]
    assert 64 < len(run) <= 128
    headers = {**bearer(api_key), **MCP_HEADERS}
    r = httpx.post(base_url + "/mcp", content=tool_call({"id": made.json()["id"]}),
                   headers={**headers, "X-Recall-Run": run}, timeout=30)
    assert r.status_code == 200 and not r.json()["result"]["isError"], r.text
    deadline = time.monotonic() + 10
    while not sql("SELECT count(*) FROM trace_reads WHERE run_id = $1", run)[0][0]:
        assert time.monotonic() < deadline, "the read was not traced under the run the caller named"
        time.sleep(0.2)
    assert_problem(httpx.post(base_url + "/mcp", json=INITIALIZE, headers={**headers, "X-Recall-Run": "a b"}), 400)


# ---- the process: one server per port, flags checked first -------------------------------------------


def test_a_port_out_of_range_is_refused_before_anything_starts(database_url: str) -> None:
    run = subprocess.run([sys.executable, "-m", "recall_server", "serve", "--port", "99999"], capture_output=True,
                         text=True, timeout=60, env={"DATABASE_URL": database_url, "PATH": "/usr/bin:/bin"})
    assert run.returncode == 2, run.stderr
    assert "99999" in run.stderr and "Traceback" not in run.stderr


def test_a_second_server_on_a_port_in_use_fails_to_start(database_url: str, server: ServerProcess, tmp_path) -> None:
    """granian binds with SO_REUSEPORT: the second would start and share the port's connections."""
    log = tmp_path / "second.log"
    with log.open("wb") as out:
        second = subprocess.Popen([sys.executable, "-m", "recall_server", "serve", "--port", str(server.port)],
                                  env={**os.environ, "DATABASE_URL": database_url, "RECALL_SWEEP_INTERVAL": "0"},
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        assert second.wait(60) != 0
    finally:
        if second.poll() is None:
            second.kill()
            second.wait()
    assert "address already in use" in log.read_text().lower(), log.read_text()[-2000:]
    assert httpx.get(server.url + "/healthz").status_code == 200


# ---- a body refused early: the client reads the answer ------------------------------------------------


def test_a_64_mb_body_gets_a_413_the_client_can_read(base_url: str, api_key: str, server: ServerProcess) -> None:
    """http.client sends the whole body before it reads: were the connection closed mid-body, it would see
    a broken pipe or a reset instead of the answer."""
    body = b'{"title": "' + b"x" * (64 << 20) + b'"}'
    port = int(base_url.rsplit(":", 1)[1])
    for path in ("/threads", "/triggers"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", path, body=body, headers={**bearer(api_key), **JSON})
        response = conn.getresponse()
        problem = json.loads(response.read())
        assert (response.status, problem["status"]) == (413, 413), problem
        assert response.getheader("content-type") == "application/problem+json"
        conn.close()
