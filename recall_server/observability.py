"""Request IDs, structured JSON logs and Prometheus metrics.

Every request gets an ID (a sane incoming X-Request-ID, else a new one), echoed in the
X-Request-ID response header, put in problem bodies, and written in one JSON access-log line
(method, path, route template, status, duration; never headers, bodies, keys or payloads).
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

access_log = logging.getLogger("recall_server.access")

_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

REQUESTS = Counter("recall_http_requests_total", "HTTP requests by route template and status",
                   ["method", "route", "status"])
LATENCY = Histogram("recall_http_request_duration_seconds", "HTTP request latency by route template",
                    ["method", "route"],
                    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
POOL = Gauge("recall_db_pool_connections", "Pool connections by state (per process, summed)", ["state"],
             multiprocess_mode="livesum")
DB_ERRORS = Counter("recall_db_errors_total", "Database calls (of requests and of background "
                    "work such as the indexer) that failed because it was unreachable, timed out or was saturated", ["reason"])
CONTENT_CACHE = Counter("recall_content_cache_total", "Payload/body reads served from this process's cache (hit) "
                        "or with the bytes from the database (miss)", ["result"])
EMBEDDED = Counter("recall_embeddings_total", "Objects the indexer embedded and stored (all processes)")
EMBED_FAILURES = Counter("recall_embedding_failures_total", "Objects the embedder failed on, by kind of failure: "
                         "retried later (unavailable) or not until a reindex (rejected)", ["reason"])
EMBED_QUEUE = Gauge("recall_embedding_queue", "Embedding queue entries: due now, waiting to retry, refused",
                    ["state"], multiprocess_mode="max")
EMBED_LAG = Gauge("recall_embedding_lag_seconds", "Age of the oldest embedding queue entry that is due",
                  multiprocess_mode="max")
EMBED_SECONDS = Histogram("recall_embedding_batch_seconds", "Wall time to embed one batch of texts",
                          buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))

EXTRACTIONS = Counter("recall_extractions_total", "Extraction jobs finished, by outcome: done, failed (by error "
                      "class: ExtractRejected, ExtractUnavailable after its attempts, KeyRevoked, Forbidden...), "
                      "retried", ["outcome", "error_class"])
EXTRACTED = Counter("recall_extracted_memories_total", "Memory versions extraction wrote (all processes)")
EXTRACT_QUEUE = Gauge("recall_extraction_queue", "Extraction jobs: due now, waiting for a retry or a lease, failed",
                      ["state"], multiprocess_mode="max")
EXTRACT_LAG = Gauge("recall_extraction_lag_seconds", "Age of the oldest extraction job not yet done or failed",
                    multiprocess_mode="max")
EXTRACT_SECONDS = Histogram("recall_extraction_seconds", "From a job's append to its memories written",
                            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300))


def _request_ids() -> Iterator[str]:
    """Request IDs unique across processes and restarts: a random prefix per process, then a
    counter (a uuid4 per request costs a getrandom() call)."""
    prefix = os.urandom(8).hex()
    return (f"{prefix}{n:08x}" for n in itertools.count())


def request_id(scope: dict[str, Any]) -> str | None:
    return scope.get("state", {}).get("request_id")


class ObservabilityMiddleware:
    """Pure ASGI wrapper: request ID, access log line, request metrics."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.ids = _request_ids()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        rid = incoming if _REQUEST_ID.match(incoming) else next(self.ids)
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            if scope["state"].get("client_gone"):  # see limits.BodyGuard: not an error of ours
                status = 499
            route = scope.get("path_template") or "unmatched"
            method = scope["method"]
            REQUESTS.labels(method, route, str(status)).inc()
            LATENCY.labels(method, route).observe(elapsed)
            access_log.info("request", extra={"fields": {
                "request_id": rid, "method": method, "path": scope["path"], "route": route, "status": status,
                "duration_ms": round(elapsed * 1000, 3),
            }})


def metrics_body(multiprocess_dir: str | None) -> bytes:
    """The Prometheus exposition, aggregated over worker processes when they share a directory."""
    if multiprocess_dir:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=multiprocess_dir)
        return generate_latest(registry)
    return generate_latest(REGISTRY)


METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST.split("; charset=")[0]  # Litestar adds the charset to text/* types


def forget_processes(multiprocess_dir: str | None, *, including_this_one: bool = False) -> None:
    """Drop the pool gauges of worker processes that have exited (or of this one, as it exits).

    Otherwise a reloaded or crashed worker's last pool state is summed into the gauges forever;
    its request counts stay, as they should.
    """
    if not multiprocess_dir:
        return
    me = os.getpid()
    for path in Path(multiprocess_dir).glob("gauge_live*_*.db"):
        pid = int(path.stem.rpartition("_")[2])
        if pid == me and not including_this_one:
            continue
        if pid == me or not _alive(pid):
            multiprocess.mark_process_dead(pid, multiprocess_dir)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, under another user
        return True
    return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, and any structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return msgspec.json.encode(entry).decode()


JsonFormatter.converter = time.gmtime


class TextFormatter(logging.Formatter):
    """For a person at a terminal: local time, level, logger, message, then the same fields as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "fields", {}).items())
        line = (f"{self.formatTime(record, '%H:%M:%S')}.{int(record.msecs):03d} {record.levelname.lower():<7} "
                f"{record.name}: {record.getMessage()}{' ' + fields if fields else ''}")
        return f"{line}\n{self.formatException(record.exc_info)}" if record.exc_info else line


def log_format(chosen: str) -> str:
    """`text` or `json`: `auto` is text when stderr is a terminal, JSON lines for a file, a pipe, a collector."""
    if chosen != "auto":
        return chosen
    return "text" if sys.stderr.isatty() else "json"


def log_config(level: str, fmt: str = "json") -> dict[str, Any]:
    """logging.dictConfig for serve: everything (ours and the HTTP server's) on stderr, as JSON lines or as
    text (`fmt`, resolved by log_format)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}, "text": {"()": TextFormatter}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": fmt, "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {
            "_granian": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "granian.access": {"handlers": [], "propagate": False},
            "asyncpg": {"level": "WARNING"},
            "mcp": {"level": "WARNING"},  # the MCP SDK logs every /mcp message at INFO
            # httpx logs every request's full URL at INFO (query strings: search terms, grep patterns,
            # memory keys), httpcore every step at DEBUG: the /mcp tools' in-process calls go through it.
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
        },
    }
