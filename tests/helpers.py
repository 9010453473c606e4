"""Test helpers: real server processes, unique IDs, an object factory, the problem assertion."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m recall_server serve` on a free loopback port, as a user would start it."""

    def __init__(self, database_url: str, log: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {**os.environ, "DATABASE_URL": database_url, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServerProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "recall_server", "serve", "--port", str(self.port)],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server did not become ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def uid(prefix: str) -> str:
    """A fresh ID of a kind, so tests never collide on a shared store."""
    return f"{prefix}_t{uuid.uuid4().hex[:16]}"


class Graph:
    """Creates objects over HTTP and checks each create succeeded."""

    def __init__(self, client: httpx.Client) -> None:
        self.c = client

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = self.c.post(path, json=body)
        assert r.status_code == 201, r.text
        return r.json()

    def worker(self, **kw: Any) -> dict[str, Any]:
        return self._post("/workers", {"id": uid("wkr"), "name": "w", "summary": "a worker", **kw})

    def thread(self, **kw: Any) -> dict[str, Any]:
        return self._post("/threads", {"id": uid("thr"), "title": "t", "summary": "a thread", **kw})

    def trigger(self, **kw: Any) -> dict[str, Any]:
        return self._post("/triggers", {"id": uid("trg"), "source": "test", "summary": "a trigger",
                                        "payload": {"k": 1}, **kw})

    def report(self, worker_id: str, thread_id: str, **kw: Any) -> dict[str, Any]:
        return self._post(f"/workers/{worker_id}/reports",
                          {"id": uid("rpt"), "thread_id": thread_id, "summary": "a report", "body": "text", **kw})

    def note(self, thread_id: str, summary: str = "note") -> dict[str, Any]:
        return self._post(f"/threads/{thread_id}/events", {"summary": summary})


def assert_problem(response: httpx.Response, status: int, mentions: str | None = None) -> dict[str, Any]:
    """Every error is RFC 9457 problem+json with the full member set."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body = response.json()
    assert {"type", "title", "status", "detail", "instance"} <= body.keys(), body
    assert body["status"] == status
    if mentions is not None:
        assert mentions in response.text, body
    return body
