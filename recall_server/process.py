"""Start and stop `recall-server serve` as a child process, as a user would (tests, contract suite, bench),
and what a worker does for itself once started (die with serve, freeze its start-up heap)."""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def die_with_parent() -> None:
    """In a server worker: get SIGTERM when the serve process dies, even by SIGKILL (Linux).

    granian's workers are forked children; when serve is SIGKILLed they would live on as orphans,
    still accepting on the port, and a restarted serve would share it with them.
    """
    if not sys.platform.startswith("linux"):
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # the parent died before the request above took effect
        os.kill(os.getpid(), signal.SIGTERM)


def freeze_heap() -> None:
    """In a server worker, once started: exempt what start-up built from every later garbage collection.

    The modules, classes and app a worker builds are ~100k objects that live as long as it does. Left
    in the oldest generation, each full collection walks them all: under load one ran every ~1 s and
    took 60-100 ms, stalling every request in flight (closed-loop `GET /threads/{id}` p99 70-80 ms, of
    which 60 ms were the collector). Frozen, full collections walk only what was built since.
    """
    gc.collect()  # start-up's own garbage goes first, so it is not kept forever
    gc.freeze()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m recall_server serve` on a free loopback port, logging to a file."""

    def __init__(self, log: Path, *args: str, command: list[str] | None = None, port: int | None = None,
                 **env: str) -> None:
        self.command = command or [sys.executable, "-m", "recall_server"]
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.args = args
        # One worker unless told: the suites and benchmarks start many servers side by side, and count on one
        # process per server (its trace buffer, its metrics); `serve` alone defaults to one per core.
        self.env = {"RECALL_WORKERS": "1", **os.environ, **env}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60) -> ServerProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*self.command, "serve", "--port", str(self.port), *self.args],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as response:
                    if response.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not become ready:\n{self.log.read_text()[-3000:]}")

    def kill(self, timeout: float = 15) -> None:
        """SIGKILL serve, as a crash would; return once its workers (SIGTERMed by the kernel) are gone,
        so that a restart on the same port is not answered by a worker still draining."""
        import psutil

        assert self.proc is not None
        workers = psutil.Process(self.proc.pid).children()
        self.proc.kill()
        self.proc.wait()
        _, alive = psutil.wait_procs(workers, timeout)
        if alive:
            raise RuntimeError(f"workers outlived a SIGKILLed serve: {[p.pid for p in alive]}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
