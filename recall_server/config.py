"""Settings, built once from environment variables and CLI flags; nothing else reads os.environ."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import msgspec
import platformdirs

ENV_PREFIX = "RECALL_"


class Settings(msgspec.Struct, kw_only=True, frozen=True):
    database_url: str | None = None  # the owner's DSN (migrations, operator CLI); None: embedded PostgreSQL
    app_database_url: str | None = None  # requests connect as recall_app; None: database_url with that user
    data_dir: Path = Path(platformdirs.user_data_dir("recall-server"))
    host: str = "127.0.0.1"
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] = 8000
    workers: Annotated[int, msgspec.Meta(ge=1)] | None = None  # None: default_workers()
    max_body_bytes: int = 8 * 1024 * 1024
    webhook_max_body_bytes: int = 8 * 1024 * 1024  # webhook deliveries (GitHub sends at most 25 MB)
    # Keys and array items one JSON body may hold (jsonbody.MAX_ITEMS: decoding costs per item); more is a 413.
    max_json_items: Annotated[int, msgspec.Meta(ge=1)] = 100_000
    # One /mcp message's bytes and keys and array items (mcp_http.HttpEndpoint.refusal); more is refused in JSON-RPC.
    mcp_max_body_bytes: Annotated[int, msgspec.Meta(ge=1024)] = 1024 * 1024
    mcp_max_items: Annotated[int, msgspec.Meta(ge=1)] = 4096
    # Origins a browser may call /mcp from (comma-separated; `*`: any). None: loopback origins only.
    mcp_allowed_origins: str | None = None
    # Request limits: granian enforces all but the body timeout (limits.BodyGuard); README has the table.
    # Request line + headers in bytes; more (or more than 100 headers) is a 431.
    max_header_bytes: Annotated[int, msgspec.Meta(ge=8192)] = 64 * 1024
    # Seconds to send a request head; also how long an idle keep-alive connection stays open.
    header_timeout: Annotated[float, msgspec.Meta(ge=1, le=60)] = 10.0
    # Seconds the whole body may take, from the first read, before a 408.
    body_timeout: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    # Open connections per worker process; more wait in the listen backlog.
    max_connections: Annotated[int, msgspec.Meta(ge=1)] = 512
    # Connections a process keeps open (None: all of pool_max, opened at start). Above this floor a
    # connection idle 60 s is closed, and a request that needs one again waits for it to be opened.
    pool_min: int | None = None
    pool_max: int = 10
    db_timeout: float = 5.0  # seconds: connect, acquire and statement time before a 503
    # A request finding the pool busy is refused (503) when the longest waiter has waited queue_wait
    # seconds, or queue_limit requests per process already wait (pool.Database).
    queue_wait: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    queue_limit: int = 512
    metrics_dir: str | None = None  # PROMETHEUS_MULTIPROC_DIR: worker processes share metrics there
    migrate_on_start: bool = True
    idempotency_ttl: int = 86_400  # seconds an Idempotency-Key's outcome is kept
    content_cache_bytes: int = 64 * 1024 * 1024  # per process: payloads/bodies served without reading them again
    sweep_interval: float = 60.0  # seconds between purges of expired objects inside serve (0: never)
    log_level: str = "info"
    log_format: Literal["auto", "text", "json"] = "auto"  # auto: text on a terminal, JSON lines otherwise
    trace_flush_interval: float = 1.0  # seconds between trace writes per process; pages show reads 2x this old
    trace_buffer: int = 10_000  # traced reads per process awaiting a write; beyond it they are dropped (counted)
    trace_ttl: int = 30 * 86_400  # seconds a trace read is kept (the sweep purges older ones)
    audit_ttl: int = 30 * 86_400  # seconds an audited request is kept where its tenant sets no audit retention
    delivery_ttl: int = 7 * 86_400  # seconds a webhook delivery is kept to answer its redelivery (then purged)
    # Search by meaning (recall_server/embedders.py): the model that turns text into vectors.
    embedder: Literal["minilm", "wordllama", "openai", "none"] = "minilm"
    embed_url: str | None = None  # openai: base URL of the server, as OpenAI's SDKs take it (.../v1)
    embed_model: str | None = None  # openai: the model name sent with each request
    embed_dims: Annotated[int, msgspec.Meta(ge=1)] | None = None  # openai: sent as `dimensions`
    embed_key: str | None = None  # openai: the bearer key; never logged
    # Memories extracted from conversations (recall_server/extractors.py, docs/conversations.md#extraction).
    extractor: Literal["none", "openai"] = "none"  # none: no conversation is sent anywhere
    extract_url: str | None = None  # openai: base URL of an OpenAI-compatible chat-completions server (.../v1)
    extract_model: str | None = None  # openai: the model name sent with each request
    extract_key: str | None = None  # openai: the bearer key; never logged
    extract_timeout: Annotated[float, msgspec.Meta(gt=0)] = 60.0  # seconds one request to the model may take
    # A message's characters the model is shown at most; a longer one is cut to it (bound) or left out (skip).
    extract_max_chars: Annotated[int, msgspec.Meta(ge=100)] = 4000
    extract_oversized: Literal["bound", "skip"] = "bound"
    extract_tool_messages: Literal["skip", "bound"] = "skip"  # tool results: left out, or shown bounded
    extract_attempts: Annotated[int, msgspec.Meta(ge=1)] = 6  # tries of a job the model did not answer
    extract_backoff: Annotated[float, msgspec.Meta(gt=0)] = 5.0  # seconds before the first retry; doubles
    extract_lease: Annotated[float, msgspec.Meta(gt=0)] = 300.0  # seconds a claimed job is its worker's
    extract_concurrency: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4  # jobs a process runs at once

    @property
    def pool_floor(self) -> int:
        """The connections a process opens at start and keeps: pool_min, or all of pool_max."""
        return self.pool_max if self.pool_min is None else self.pool_min


# Settings field -> environment variable. DATABASE_URL is the conventional name; the rest are prefixed.
ENV_NAMES = {
    name: {"database_url": "DATABASE_URL", "app_database_url": "RECALL_APP_DATABASE_URL",
           "metrics_dir": "PROMETHEUS_MULTIPROC_DIR"}.get(
        name, ENV_PREFIX + name.upper())
    for name in Settings.__struct_fields__
}


# The most worker processes `serve` starts by default: each holds up to pool_max connections (embedded
# PostgreSQL allows 100) and its own copy of the embedder (~270 MB with MiniLM).
MAX_DEFAULT_WORKERS = 4


def default_workers() -> int:
    """One worker per core this process may use, at most MAX_DEFAULT_WORKERS."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1,
                      MAX_DEFAULT_WORKERS))


def load(**flags: object) -> Settings:
    """Settings from the environment, overridden by any flag that was given (not None)."""
    raw: dict[str, object] = {}
    for name, env in ENV_NAMES.items():
        if os.environ.get(env):
            raw[name] = os.environ[env]
    raw.update({k: v for k, v in flags.items() if v is not None})
    return msgspec.convert(raw, Settings, strict=False, dec_hook=_dec_hook)


def key_file(settings: Settings) -> Path:
    """Where `serve` keeps the write key it creates for the embedded store's `default` tenant."""
    return settings.data_dir / "api-key"


def client_target(url: str | None = None, key: str | None = None,
                  data_dir: Path | None = None) -> tuple[str, str | None]:
    """Where a client connects, and with which key: the arguments, else RECALL_URL / RECALL_API_KEY,
    else the local server `serve` starts by default and the key it saved (in `data_dir`, if given).

    The saved key is only used when the URL is also the local default: it must never be sent to a
    server someone else named.
    """
    url = url or os.environ.get("RECALL_URL") or None
    key = key or os.environ.get("RECALL_API_KEY") or None
    if url is None:
        settings = load(data_dir=data_dir)
        host = "127.0.0.1" if settings.host in ("", "0.0.0.0", "::") else settings.host
        url = f"http://{host}:{settings.port}"
        path = key_file(settings)
        if key is None and path.is_file():
            key = path.read_text().strip() or None
    return url.rstrip("/"), key


def no_key_advice(url: str | None = None) -> str:
    """What a client without a key is told when the server answers 401: why it sent none, what to do."""
    named = url or os.environ.get("RECALL_URL")
    if named:
        saved = key_file(load())
        withheld = (f" The key the local `recall-server serve` saved ({saved}) is withheld on purpose: it is only "
                    "ever sent to the local server, never to one named by RECALL_URL or --url.") if saved.is_file() \
            else ""
        return (f"No API key was sent to {named.rstrip('/')}.{withheld} Set RECALL_API_KEY (or pass --key) to a "
                "key that server issued.")
    return (f"No API key was sent, and the local server has saved none in {key_file(load())}: start it with "
            "`recall-server serve` (it saves one), or set RECALL_API_KEY (or pass --key).")


def to_env(settings: Settings) -> dict[str, str]:
    """The environment that makes `load()` in a child process return these settings."""
    env = {}
    for name, var in ENV_NAMES.items():
        value = getattr(settings, name)
        if value is not None:
            env[var] = str(value).lower() if isinstance(value, bool) else str(value)
    return env


def _dec_hook(type_: type, value: object) -> object:
    if type_ is Path and isinstance(value, (str, Path)):
        return Path(value).expanduser()
    raise NotImplementedError
