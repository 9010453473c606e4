"""The Python client: one typed method per API operation, over httpx, sync and async.

One module although long: every operation is written once for both the sync and the async client,
which share the path escaping, retries and problem decoding defined here.

    RecallError (status, title, detail, type, instance, request_id, extra: the problem+json members)
     ├── BadRequest            400
     ├── Unauthorized          401
     ├── Forbidden             403
     ├── NotFound              404
     ├── MethodNotAllowed      405
     ├── RequestTimeout        408
     ├── Conflict              409
     ├── Gone                  410
     ├── PayloadTooLarge       413
     ├── UnsupportedMediaType  415
     ├── RangeNotSatisfiable   416
     ├── Unprocessable         422
     ├── Unavailable           503  (after the retries ran out)
     └── Unreachable           no answer: no connection to the URL (after the retries ran out)

The names and statuses are errors.py's: a server Problem arrives here as the client class of the
same name. Unreachable is the client's own: its message names the URL and what to do. Other transport
failures that outlast the retries (a connection lost mid-answer, a read timeout) are httpx's own.

Retries: a call is retried `max_retries` times (8 by default) after a failure that is safe to retry,
waiting 0.1 s, 0.2 s, 0.4 s, 0.8 s, then 1 s each (5.5 s in all: a restart leaves the port closed for
about 2 s, more on a loaded machine; tests/test_client.py restarts a server under a client), or
what Retry-After says (at most `max_retry_wait`). A connection that could not be opened is retried for
every call (nothing was sent); a lost answer or a 503 only for calls that are safe to repeat. Every
write sends an Idempotency-Key generated once per call, so the retries of a call that may have reached
the server (a dropped connection, a 503, a 409 "in flight") are replayed, never redone.
Every call sends `X-Recall-Run: <run>` when a run is given (constructor or per call): the trace records
the run's reads, the audit its writes and searches.

Paths: every segment a method puts in a URL (an ID, a run) is escaped in one place (`_path`), so
whatever a string holds ("/", "..", "?", "#") it reaches the route the method names as one segment.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from urllib.parse import quote
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

import httpx
import msgspec

from recall_server import config, errors, ids
from recall_server.models import (
    AssignOwner,
    AuditedRequest,
    Backlink,
    BacklinkPage,
    CheckpointCount,
    CheckpointPage,
    CheckpointRef,
    CheckpointTupleView,
    CopyCheckpoints,
    DeleteCheckpointRuns,
    PruneCheckpoints,
    RefreshedMemories,
    PutCheckpoint,
    PutWrites,
    CreateHook,
    CreateKey,
    CreateMemory,
    CreateNote,
    CreateReport,
    CreateThread,
    CreateTrigger,
    CreateWorker,
    Event,
    EventPage,
    GrepResult,
    Health,
    HookList,
    HookView,
    KeyList,
    KeyView,
    MemoryIndexEntry,
    MemoryPage,
    MemoryVersion,
    MemoryVersionPage,
    MemoryView,
    AppendedMessages,
    ExtractionPage,
    AppendMessages,
    Message,
    MessagePage,
    NamespacePage,
    NewMessage,
    Retraction,
    RetractMessages,
    NewHook,
    NewKey,
    Read,
    ReadPage,
    RequestPage,
    ReportIndexEntry,
    ReportPage,
    ReportView,
    Resolved,
    SearchHit,
    SearchPage,
    ThreadIndexEntry,
    ThreadPage,
    ThreadView,
    TriggerView,
    UpdateThread,
    WorkerView,
)

RUN_HEADER = "X-Recall-Run"
T = TypeVar("T")


# ---- errors ----------------------------------------------------------------------------------


class RecallError(Exception):
    """A problem+json answer (or another non-2xx one), with its members as attributes."""

    status = 0

    def __init__(self, status: int, title: str, detail: str, *, type: str = "about:blank", instance: str = "",
                 request_id: str | None = None, extra: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {title}: {detail}")
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.instance = instance
        self.request_id = request_id
        self.extra = extra or {}
        self.headers = headers or {}


class BadRequest(RecallError):
    status = 400


class Unauthorized(RecallError):
    status = 401


class Forbidden(RecallError):
    status = 403


class NotFound(RecallError):
    status = 404


class MethodNotAllowed(RecallError):
    status = 405


class RequestTimeout(RecallError):
    status = 408


class Conflict(RecallError):
    status = 409


class Gone(RecallError):
    status = 410


class PayloadTooLarge(RecallError):
    status = 413


class UnsupportedMediaType(RecallError):
    status = 415


class RangeNotSatisfiable(RecallError):
    status = 416


class Unprocessable(RecallError):
    status = 422


class Unavailable(RecallError):
    status = 503


class Unreachable(RecallError):
    """No answer at all: the server at `url` could not be connected to, through every retry."""

    def __init__(self, url: str, cause: Exception) -> None:
        detail = (f"Cannot reach the recall server at {url} ({type(cause).__name__}: {cause}). Start it with "
                  "`recall-server serve`, or point RECALL_URL (or --url) at a running one.")
        super().__init__(0, "Unreachable", detail)
        self.args = (detail,)
        self.url = url
        self.cause = cause

    def __str__(self) -> str:
        return self.detail


BY_STATUS: dict[int, type[RecallError]] = {
    cls.status: cls
    for cls in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, RequestTimeout, Conflict, Gone,
                PayloadTooLarge, UnsupportedMediaType, RangeNotSatisfiable, Unprocessable, Unavailable)
}
_PROBLEM_MEMBERS = ("type", "title", "status", "detail", "instance", "request_id")


def problem_from(response: httpx.Response) -> RecallError:
    """The exception for a non-2xx response: the problem's members, or the status and a bit of the body."""
    cls = BY_STATUS.get(response.status_code, RecallError)
    body: Any = None
    if response.headers.get("content-type", "").startswith((errors.PROBLEM_JSON, "application/json")):
        try:
            body = msgspec.json.decode(response.content)
        except msgspec.DecodeError:
            body = None
    if not isinstance(body, dict):
        return cls(response.status_code, response.reason_phrase, response.text[:500], headers=dict(response.headers))
    return cls(
        response.status_code, str(body.get("title", response.reason_phrase)), str(body.get("detail", "")),
        type=str(body.get("type", "about:blank")), instance=str(body.get("instance", "")),
        request_id=body.get("request_id"), extra={k: v for k, v in body.items() if k not in _PROBLEM_MEMBERS},
        headers=dict(response.headers),
    )


# ---- calls -------------------------------------------------------------------------------------


class Content(msgspec.Struct, frozen=True):
    """A payload or body (or the requested byte range of it) and its content type."""

    data: bytes
    content_type: str


class _Call(NamedTuple):
    """One API operation, built once and sent by either client (the retry loop is theirs)."""

    method: str
    path: tuple[str, ...]  # the path's segments, each escaped by _path: an ID can never be more than one
    into: Any  # a Struct type to decode, bytes, Content, or None (no body)
    params: dict[str, Any] | None = None
    body: bytes | None = None
    headers: dict[str, str] | None = None
    run: str | None = None
    idempotency: bool = False  # sends an Idempotency-Key: the server replays a retry instead of redoing it
    replayable: bool = True  # retrying after the request may have reached the server is harmless


_DECODERS: dict[Any, msgspec.json.Decoder[Any]] = {
    t: msgspec.json.Decoder(t)
    for t in (AppendedMessages, ExtractionPage, MessagePage, Retraction, BacklinkPage, CheckpointCount, CheckpointPage, CheckpointRef, CheckpointTupleView, Event, EventPage, GrepResult, Health, HookList, HookView, KeyList, KeyView, MemoryPage,
              MemoryVersionPage, MemoryView, NamespacePage, NewHook, NewKey, ReadPage, RefreshedMemories, RequestPage,
              AuditedRequest, ReportPage, ReportView, Resolved,
              SearchPage, ThreadPage, ThreadView, TriggerView, WorkerView)
}
_RETRY_ERRORS = (httpx.NetworkError, httpx.RemoteProtocolError, httpx.TimeoutException)
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)  # the request never reached the server
MAX_RETRIES = 8
BACKOFF_CAP = 1.0  # seconds between attempts at most (without a Retry-After): 5.5 s over 8 retries
MAX_IN_FLIGHT = 100  # the async client's requests at once: its pool's connections (see AsyncRecallClient)


def _segment(value: str) -> str:
    """One path segment, whatever it holds: it reaches the route the method names as exactly one segment.

    Percent-encoding alone is not enough: the server routes on the decoded path (ASGI's `path`), so an
    ID holding "/" (sent as %2F) would become two segments there, and "." or ".." would be dot segments
    to httpx and to any proxy that normalises. So "/" and a segment of dots go one level deeper (%252F,
    %252E): the server decodes them to the literal text %2F or %2E and answers its own loud miss for it.
    """
    value = str(value)
    if value == "":
        raise ValueError("an empty string is no ID (it would name the collection, not one of its members)")
    if value.strip(".") == "":
        return "%252E" * len(value)
    return quote(value, safe="").replace("%2F", "%252F")


def _path(segments: tuple[str, ...]) -> str:
    """The URL path of a call: every segment escaped here, the one place paths are built."""
    return "/" + "/".join(_segment(s) for s in segments)


def _query(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _range(start: int | None, end: int | None) -> dict[str, str]:
    """A Range header for bytes start..end, inclusive as in HTTP (start defaults to 0, end to the last byte)."""
    if start is None and end is None:
        return {}
    return {"Range": f"bytes={start or 0}-{'' if end is None else end}"}


def _namespace(namespace: str | list[str] | tuple[str, ...] | None) -> str | None:
    """A namespace for a URL: its segments joined by '/' (a string is taken as already joined)."""
    if namespace is None or isinstance(namespace, str):
        return namespace
    return "/".join(namespace)


def _tags(tags: dict[str, str] | list[str] | None) -> list[str] | None:
    """Tag filters as repeated `tag=key:value` parameters."""
    if tags is None:
        return None
    return [f"{k}:{v}" for k, v in tags.items()] if isinstance(tags, dict) else list(tags)


def _value_contains(value: dict[str, Any] | str | None) -> str | None:
    return value if value is None or isinstance(value, str) else msgspec.json.encode(value).decode()


def _moment(value: datetime | str | None) -> str | None:
    """A `since`/`until` bound: a datetime (with its offset) as RFC 3339, a string as given."""
    return value.isoformat() if isinstance(value, datetime) else value


def _body(struct: msgspec.Struct | None, kind: type[msgspec.Struct], fields: dict[str, Any]) -> bytes:
    if struct is not None and fields:
        raise TypeError("pass either a request Struct or its fields, not both")
    return msgspec.json.encode(struct if struct is not None else kind(**fields))


class _Operations:
    """Every operation, written once: each method returns what `_run` returns (a value, or an awaitable)."""

    def __init__(self, url: str | None, key: str | None, run: str | None, max_retries: int,
                 max_retry_wait: float) -> None:
        self.url, self.key = config.client_target(url, key)
        self._named_url = url
        self._no_key: str | None = None  # said with a 401 when no key is sent at all (see _default_headers)
        self.run = run
        self.max_retries = max_retries
        self.max_retry_wait = max_retry_wait

    def _run(self, call: _Call) -> Any:
        raise NotImplementedError

    def _default_headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        out = {"Accept": "application/json", "User-Agent": "recall-server-client"}
        if self.key:
            out["Authorization"] = f"Bearer {self.key}"
        out.update(headers or {})
        if "Authorization" not in out:
            self._no_key = config.no_key_advice(self._named_url)
        return out

    def _headers(self, call: _Call) -> dict[str, str]:
        """Per logical call: the Idempotency-Key every attempt of it shares, the run (the trace records its reads,
        the audit its writes and searches)."""
        headers = dict(call.headers or {})
        if call.body is not None:
            headers["Content-Type"] = "application/json"
        if call.idempotency:
            headers.setdefault("Idempotency-Key", f"rc-{uuid.uuid4().hex}")
        run = call.run or self.run
        if run:
            headers[RUN_HEADER] = run
        return headers

    def _retry_after(self, call: _Call, attempt: int, response: httpx.Response | None = None,
                     error: Exception | None = None) -> float | None:
        """Seconds to wait before retrying, or None: this outcome is final."""
        if attempt >= self.max_retries:
            return None
        if error is not None:
            if not isinstance(error, _NOT_SENT if not call.replayable else _RETRY_ERRORS):
                return None
        else:
            assert response is not None
            transient = response.status_code == 503 or (
                response.status_code in (409, 429) and "retry-after" in response.headers)
            if not transient or not call.replayable:
                return None
            try:
                return min(float(response.headers.get("retry-after", "")), self.max_retry_wait)
            except ValueError:
                pass
        return min(0.1 * 2 ** attempt, BACKOFF_CAP, self.max_retry_wait)

    def _failed(self, error: httpx.TransportError) -> Exception:
        """What a transport failure that outlasted the retries is raised as."""
        return Unreachable(self.url, error) if isinstance(error, _NOT_SENT) else error

    def _result(self, call: _Call, response: httpx.Response) -> Any:
        if response.status_code >= 300:
            problem = problem_from(response)
            if isinstance(problem, Unauthorized) and self._no_key:
                problem.detail = f"{problem.detail} {self._no_key}"
                problem.args = (f"{problem.status} {problem.title}: {problem.detail}",)
            raise problem
        if call.into is None:
            return None
        if call.into is bytes:
            return response.content
        if call.into is Content:
            return Content(response.content, response.headers.get("content-type", "application/octet-stream"))
        return _DECODERS[call.into].decode(response.content)

    # ---- by ID -------------------------------------------------------------------------------

    def get(self, object_id: str, budget: int | None = None, *, run: str | None = None) -> Any:
        """The inline view of any ID (ThreadView, WorkerView, TriggerView, ReportView or MemoryView), by its prefix.

        A string that is no ID at all goes to /ids/, so the server's loud miss names what is wrong."""
        read = {"thread": self.get_thread, "worker": self.get_worker, "trigger": self.get_trigger,
                "report": self.get_report, "memory": self.get_memory}.get(ids.kind_of(object_id) or "")
        if read is None:
            return self.resolve(object_id, run=run)
        return read(object_id, budget, run=run)

    def resolve(self, object_id: str, *, run: str | None = None) -> Resolved:
        """{id, type, href, summary} of any ID."""
        return self._run(_Call("GET", ("ids", object_id), Resolved, run=run))

    def read(self, object_id: str, start: int | None = None, end: int | None = None, *,
             run: str | None = None) -> Content:
        """A trigger's payload or a report's body (bytes start..end, inclusive, when given), with its type."""
        kind = ids.kind_of(object_id)
        path = ("reports", object_id, "body") if kind == "report" else ("triggers", object_id, "payload")
        return self._run(_Call("GET", path, Content, headers=_range(start, end), run=run))

    # ---- triggers ----------------------------------------------------------------------------

    def create_trigger(self, trigger: CreateTrigger | None = None, /, **fields: Any) -> TriggerView:
        return self._run(_Call("POST", ("triggers",), TriggerView, body=_body(trigger, CreateTrigger, fields),
                               idempotency=True))

    def get_trigger(self, trigger_id: str, budget: int | None = None, *, run: str | None = None) -> TriggerView:
        return self._run(_Call("GET", ("triggers", trigger_id), TriggerView, _query(budget=budget), run=run))

    def read_payload(self, trigger_id: str, start: int | None = None, end: int | None = None, *,
                     run: str | None = None) -> bytes:
        """The trigger's payload, or bytes start..end of it (inclusive)."""
        return self._run(_Call("GET", ("triggers", trigger_id, "payload"), bytes, headers=_range(start, end), run=run))

    def delete_trigger(self, trigger_id: str) -> None:
        return self._run(_Call("DELETE", ("triggers", trigger_id), None))

    # ---- threads -----------------------------------------------------------------------------

    def create_thread(self, thread: CreateThread | None = None, /, **fields: Any) -> ThreadView:
        return self._run(_Call("POST", ("threads",), ThreadView, body=_body(thread, CreateThread, fields),
                               idempotency=True))

    def get_thread(self, thread_id: str, budget: int | None = None, *, run: str | None = None) -> ThreadView:
        return self._run(_Call("GET", ("threads", thread_id), ThreadView, _query(budget=budget), run=run))

    def update_thread(self, thread_id: str, update: UpdateThread | None = None, /, **fields: Any) -> ThreadView:
        """Change title, summary or status (setting the same values again changes nothing: safe to retry)."""
        return self._run(_Call("PATCH", ("threads", thread_id), ThreadView, body=_body(update, UpdateThread, fields)))

    def delete_thread(self, thread_id: str) -> None:
        return self._run(_Call("DELETE", ("threads", thread_id), None))

    def list_threads(self, *, status: str | None = None, owner: str | None = None, app_id: str | None = None,
                     agent_id: str | None = None, run_id: str | None = None,
                     namespace: str | list[str] | tuple[str, ...] | None = None, cursor: str | None = None,
                     limit: int | None = None, run: str | None = None) -> ThreadPage:
        """A page of live threads, newest first; `namespace`: only threads in it or under it."""
        params = _query(status=status, owner=owner, app_id=app_id, agent_id=agent_id, run_id=run_id,
                        namespace=_namespace(namespace), cursor=cursor, limit=limit)
        return self._run(_Call("GET", ("threads",), ThreadPage, params, run=run))

    def list_events(self, thread_id: str, cursor: str | None = None, limit: int | None = None, *,
                    run: str | None = None, as_of: datetime | str | None = None) -> EventPage:
        """A page of the thread's log in seq order; `as_of`: of the events appended by then."""
        return self._run(_Call("GET", ("threads", thread_id, "events"), EventPage,
                               _query(cursor=cursor, limit=limit, as_of=_moment(as_of)), run=run))

    def add_note(self, thread_id: str, summary: str, ref: str | None = None) -> Event:
        return self._run(_Call("POST", ("threads", thread_id, "events"), Event,
                               body=msgspec.json.encode(CreateNote(summary=summary, ref=ref)), idempotency=True))

    def assign_owner(self, thread_id: str, worker_id: str) -> ThreadView:
        return self._run(_Call("POST", ("threads", thread_id, "owners"), ThreadView,
                               body=msgspec.json.encode(AssignOwner(worker_id=worker_id)), idempotency=True))

    # ---- messages: a conversation on a thread ------------------------------------------------------

    def append_messages(self, thread_id: str, messages: list[NewMessage | dict[str, Any]], *,
                        idempotency_key: str | None = None, extract: str | None = None) -> AppendedMessages:
        """Append up to 100 messages in one transaction ({role, content, name?, tool_call_id?, at?, metadata?}
        each); their seqs, in the order given. One Idempotency-Key per call (or the one given) makes retries land once.
        extract="sync": when the thread extracts memories, wait for them (`extraction` of the answer)."""
        body = AppendMessages(messages=[m if isinstance(m, NewMessage) else msgspec.convert(m, NewMessage)
                                        for m in messages])
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._run(_Call("POST", ("threads", thread_id, "messages"), AppendedMessages, _query(extract=extract),
                               body=msgspec.json.encode(body), headers=headers, idempotency=True))

    def list_extractions(self, thread_id: str, cursor: str | None = None, limit: int | None = None, *,
                         run: str | None = None) -> ExtractionPage:
        """A page of the thread's extraction jobs, newest first, and where its extracted memories go."""
        return self._run(_Call("GET", ("threads", thread_id, "extractions"), ExtractionPage,
                               _query(cursor=cursor, limit=limit), run=run))

    def list_messages(self, thread_id: str, cursor: str | None = None, limit: int | None = None, *,
                      role: str | None = None, since: datetime | str | None = None, until: datetime | str | None = None,
                      include_retracted: bool = False, order: str | None = None, run: str | None = None) -> MessagePage:
        """A page of the thread's messages in seq order (order="desc": newest first), retracted ones left out
        unless include_retracted."""
        params = _query(cursor=cursor, limit=limit, role=role, since=_moment(since), until=_moment(until),
                        include_retracted="true" if include_retracted else None, order=order)
        return self._run(_Call("GET", ("threads", thread_id, "messages"), MessagePage, params, run=run))

    def retract_messages(self, thread_id: str, *, seqs: list[int] | None = None, newest: int | None = None,
                         through: int | None = None) -> Retraction:
        """Take messages out of the conversation (these seqs, the newest n, or every one through a seq) by
        appending a retraction; the log keeps them."""
        body = RetractMessages(seqs=seqs, newest=newest, through=through)
        return self._run(_Call("POST", ("threads", thread_id, "messages", "retractions"), Retraction,
                               body=msgspec.json.encode(body), idempotency=True))

    def message_content(self, thread_id: str, seq: int, start: int | None = None, end: int | None = None, *,
                        run: str | None = None) -> bytes:
        """A message's content as stored (UTF-8 text, or its JSON), or bytes start..end of it (inclusive)."""
        return self._run(_Call("GET", ("threads", thread_id, "messages", str(seq), "content"), bytes,
                               headers=_range(start, end), run=run))

    def grep_message(self, thread_id: str, seq: int, pattern: str, regex: bool = False, context: int = 0,
                     max: int | None = None, *, run: str | None = None) -> GrepResult:
        """Matching lines of a message's content (as grep_payload)."""
        params = _query(pattern=pattern, regex="true" if regex else None, context=context or None, max=max)
        return self._run(_Call("GET", ("threads", thread_id, "messages", str(seq), "content", "grep"), GrepResult,
                               params, run=run))

    # ---- workers and reports -------------------------------------------------------------------

    def create_worker(self, worker: CreateWorker | None = None, /, **fields: Any) -> WorkerView:
        return self._run(_Call("POST", ("workers",), WorkerView, body=_body(worker, CreateWorker, fields),
                               idempotency=True))

    def get_worker(self, worker_id: str, budget: int | None = None, *, run: str | None = None) -> WorkerView:
        return self._run(_Call("GET", ("workers", worker_id), WorkerView, _query(budget=budget), run=run))

    def delete_worker(self, worker_id: str) -> None:
        return self._run(_Call("DELETE", ("workers", worker_id), None))

    def list_reports(self, worker_id: str, *, app_id: str | None = None, agent_id: str | None = None,
                     run_id: str | None = None, cursor: str | None = None, limit: int | None = None,
                     run: str | None = None) -> ReportPage:
        params = _query(app_id=app_id, agent_id=agent_id, run_id=run_id, cursor=cursor, limit=limit)
        return self._run(_Call("GET", ("workers", worker_id, "reports"), ReportPage, params, run=run))

    def create_report(self, worker_id: str, report: CreateReport | None = None, /, **fields: Any) -> ReportView:
        return self._run(_Call("POST", ("workers", worker_id, "reports"), ReportView,
                               body=_body(report, CreateReport, fields), idempotency=True))

    def get_report(self, report_id: str, budget: int | None = None, *, run: str | None = None) -> ReportView:
        return self._run(_Call("GET", ("reports", report_id), ReportView, _query(budget=budget), run=run))

    def read_body(self, report_id: str, start: int | None = None, end: int | None = None, *,
                  run: str | None = None) -> bytes:
        """The report's body, or bytes start..end of it (inclusive)."""
        return self._run(_Call("GET", ("reports", report_id, "body"), bytes, headers=_range(start, end), run=run))

    def delete_report(self, report_id: str) -> None:
        return self._run(_Call("DELETE", ("reports", report_id), None))

    # ---- memories ----------------------------------------------------------------------------

    def remember(self, memory: CreateMemory | None = None, /, **fields: Any) -> MemoryView:
        """POST /memories: a new version of (namespace, key); the pair's current version is superseded by it."""
        return self._run(_Call("POST", ("memories",), MemoryView, body=_body(memory, CreateMemory, fields),
                               idempotency=True))

    def get_memory(self, memory_id: str, budget: int | None = None, *, run: str | None = None) -> MemoryView:
        """Any version by ID, current or superseded (`status` says which)."""
        return self._run(_Call("GET", ("memories", memory_id), MemoryView, _query(budget=budget), run=run))

    def current_memory(self, namespace: str | list[str] | tuple[str, ...], key: str, budget: int | None = None, *,
                       run: str | None = None, as_of: datetime | str | None = None) -> MemoryView:
        """The current version of (namespace, key): NotFound if it never had one, Gone if deleted or expired.
        `as_of`: the version current at that time (NotFound if none yet, Gone if expired or deleted by then)."""
        params = _query(namespace=_namespace(namespace), key=key, budget=budget, as_of=_moment(as_of))
        return self._run(_Call("GET", ("memories", "current"), MemoryView, params, run=run))

    def memory_value(self, memory_id: str, start: int | None = None, end: int | None = None, *,
                     run: str | None = None) -> bytes:
        """The version's value as stored (JSON text for a JSON value), or bytes start..end of it (inclusive)."""
        return self._run(_Call("GET", ("memories", memory_id, "value"), bytes, headers=_range(start, end), run=run))

    def list_memories(self, *, namespace: str | list[str] | tuple[str, ...] | None = None, kind: str | None = None,
                      tags: dict[str, str] | list[str] | None = None, value_contains: dict[str, Any] | str | None = None,
                      app_id: str | None = None, agent_id: str | None = None, run_id: str | None = None,
                      cursor: str | None = None, limit: int | None = None, run: str | None = None,
                      as_of: datetime | str | None = None) -> MemoryPage:
        """A page of current memories in (namespace, key) order. `namespace` is a prefix of whole segments;
        `tags` all must match ({key: value} or ["key:value"]); `value_contains` a JSON object the value contains;
        `as_of`: the memories current at that time."""
        params = _query(namespace=_namespace(namespace), kind=kind, tag=_tags(tags),
                        value_contains=_value_contains(value_contains), app_id=app_id, agent_id=agent_id,
                        run_id=run_id, cursor=cursor, limit=limit, as_of=_moment(as_of))
        return self._run(_Call("GET", ("memories",), MemoryPage, params, run=run))

    def memory_versions(self, memory_id: str, cursor: str | None = None, limit: int | None = None, *,
                        run: str | None = None, as_of: datetime | str | None = None) -> MemoryVersionPage:
        """A page of the chain the version belongs to, newest first; `as_of`: the versions written by then, as
        they were then (NotFound if this one was not written yet)."""
        return self._run(_Call("GET", ("memories", memory_id, "versions"), MemoryVersionPage,
                               _query(cursor=cursor, limit=limit, as_of=_moment(as_of)), run=run))

    def memory_namespaces(self, *, prefix: str | list[str] | tuple[str, ...] | None = None,
                          suffix: str | list[str] | tuple[str, ...] | None = None, max_depth: int | None = None,
                          cursor: str | None = None, limit: int | None = None, run: str | None = None) -> NamespacePage:
        """A page of the distinct namespaces of current memories (as segment lists), in order."""
        params = _query(prefix=_namespace(prefix), suffix=_namespace(suffix), max_depth=max_depth, cursor=cursor,
                        limit=limit)
        return self._run(_Call("GET", ("memories", "namespaces"), NamespacePage, params, run=run))

    def refresh_memories(self, memory_ids: list[str]) -> RefreshedMemories:
        """POST /memories/refresh: each live memory written with a ttl expires that ttl from now (the ones it
        extended answer; repeating it is harmless)."""
        return self._run(_Call("POST", ("memories", "refresh"), RefreshedMemories,
                               body=msgspec.json.encode({"ids": memory_ids})))

    def delete_memory(self, memory_id: str) -> None:
        """Erase every version of the memory's (namespace, key); a later write starts a new chain."""
        return self._run(_Call("DELETE", ("memories", memory_id), None))

    # ---- LangGraph checkpoints (recall_server.langgraph.RecallSaver) ---------------------------------

    def put_checkpoint(self, checkpoint: PutCheckpoint) -> CheckpointRef:
        """Store a checkpoint and its new channel values (a retry of the same put is a no-op: safe to repeat)."""
        return self._run(_Call("POST", ("checkpoints",), CheckpointRef, body=msgspec.json.encode(checkpoint)))

    def put_checkpoint_writes(self, writes: PutWrites) -> None:
        """Store a task's pending writes against a checkpoint (once per (task_id, idx): safe to repeat)."""
        return self._run(_Call("POST", ("checkpoints", "writes"), None, body=msgspec.json.encode(writes)))

    def checkpoint_tuple(self, thread_id: str, checkpoint_ns: str = "",
                         checkpoint_id: str | None = None) -> CheckpointTupleView:
        """A checkpoint with its values and writes (the newest of the namespace without an ID); NotFound, Gone."""
        params = _query(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id)
        return self._run(_Call("GET", ("checkpoints", "tuple"), CheckpointTupleView, params))

    def checkpoint_value(self, thread_id: str, checkpoint_ns: str, channel: str, version: str) -> bytes:
        """A channel value too large to inline in a tuple (ChannelValue.href): its serialised bytes."""
        params = _query(thread_id=thread_id, checkpoint_ns=checkpoint_ns, channel=channel, version=version)
        return self._run(_Call("GET", ("checkpoints", "value"), bytes, params))

    def checkpoint_write_value(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, task_id: str,
                               idx: int) -> bytes:
        """A pending write too large to inline in a tuple (PendingWrite.href): its serialised bytes."""
        params = _query(thread_id=thread_id, checkpoint_ns=checkpoint_ns, checkpoint_id=checkpoint_id,
                        task_id=task_id, idx=idx)
        return self._run(_Call("GET", ("checkpoints", "writes", "value"), bytes, params))

    def list_checkpoints(self, *, thread_id: str | None = None, checkpoint_ns: str | None = None,
                         before: str | None = None, metadata_contains: dict[str, Any] | str | None = None,
                         cursor: str | None = None, limit: int | None = None) -> CheckpointPage:
        """A page of checkpoints, newest first; Gone for an erased thread."""
        params = _query(thread_id=thread_id, checkpoint_ns=checkpoint_ns, before=before,
                        metadata_contains=_value_contains(metadata_contains), cursor=cursor, limit=limit)
        return self._run(_Call("GET", ("checkpoints",), CheckpointPage, params))

    def delete_checkpoint_thread(self, thread_id: str) -> None:
        """Erase a LangGraph thread's checkpoints; its checkpoints answer 410 (Gone) from now on."""
        return self._run(_Call("DELETE", ("checkpoints",), None, _query(thread_id=thread_id)))

    def delete_checkpoint_runs(self, run_ids: list[str]) -> CheckpointCount:
        return self._run(_Call("POST", ("checkpoints", "delete-runs"), CheckpointCount,
                               body=msgspec.json.encode(DeleteCheckpointRuns(run_ids=list(run_ids)))))

    def copy_checkpoint_thread(self, source_thread_id: str, target_thread_id: str) -> CheckpointCount:
        body = CopyCheckpoints(source_thread_id=source_thread_id, target_thread_id=target_thread_id)
        return self._run(_Call("POST", ("checkpoints", "copy"), CheckpointCount, body=msgspec.json.encode(body)))

    def prune_checkpoints(self, thread_ids: list[str], keep: int = 1) -> CheckpointCount:
        """Keep the newest `keep` checkpoints of each (thread, namespace) of these threads (0: none)."""
        return self._run(_Call("POST", ("checkpoints", "prune"), CheckpointCount,
                               body=msgspec.json.encode(PruneCheckpoints(thread_ids=list(thread_ids), keep=keep))))

    # ---- finding and navigating: search, backlinks, grep ------------------------------------------

    def search(self, q: str, *, mode: str | None = None, explain: bool = False, type: str | list[str] | None = None,
               status: str | None = None, app_id: str | None = None, agent_id: str | None = None,
               run_id: str | None = None, since: datetime | str | None = None, until: datetime | str | None = None,
               namespace: str | list[str] | tuple[str, ...] | None = None, cursor: str | None = None,
               limit: int | None = None, run: str | None = None, rerank: bool = True,
               min_score: float | None = None, as_of: datetime | str | None = None) -> SearchPage:
        """A page of live objects matching q (a question, or words), best first: IDs to start hopping from.
        `mode`: hybrid (the server's default with an embedder), lexical, semantic or exact (docs/search.md);
        `explain`: each hit says which arm found it. `type`: one kind or several (trigger, thread, worker,
        report, memory); `namespace`: memories in it or under it; since/until bound created_at. Ranked modes
        rerank for relevance in [0, 1] and leave out hits below `min_score` (default 0.5; a page without one
        has note "no close match" and `nearest`); `rerank=False`: the arms' fused ranking, every hit. `as_of`: the
        memory versions current then with every word of q, newest first (memories only)."""
        params = _query(q=q, mode=mode, explain="true" if explain else None, rerank=None if rerank else "false",
                        min_score=min_score,
                        type=[type] if isinstance(type, str) else type, status=status, app_id=app_id,
                        agent_id=agent_id, run_id=run_id, namespace=_namespace(namespace), since=_moment(since),
                        until=_moment(until), cursor=cursor, limit=limit, as_of=_moment(as_of))
        return self._run(_Call("GET", ("search",), SearchPage, params, run=run))

    def backlinks(self, object_id: str, cursor: str | None = None, limit: int | None = None, *,
                  run: str | None = None) -> BacklinkPage:
        """A page of the live objects that link to this ID, and how (relation), in (relation, id) order."""
        return self._run(_Call("GET", ("ids", object_id, "backlinks"), BacklinkPage, _query(cursor=cursor, limit=limit),
                               run=run))

    def grep(self, object_id: str, pattern: str, regex: bool = False, context: int = 0, max: int | None = None, *,
             run: str | None = None) -> GrepResult:
        """Matching lines of a trigger's payload or a report's body (by the ID's prefix); see grep_payload."""
        path = ("reports", object_id, "body", "grep") if ids.kind_of(object_id) == "report" \
            else ("triggers", object_id, "payload", "grep")
        params = _query(pattern=pattern, regex="true" if regex else None, context=context or None, max=max)
        return self._run(_Call("GET", path, GrepResult, params, run=run))

    def grep_payload(self, trigger_id: str, pattern: str, regex: bool = False, context: int = 0,
                     max: int | None = None, *, run: str | None = None) -> GrepResult:
        """Matching lines of the payload (a literal pattern, or RE2 with regex=True), `context` lines around
        each, at most `max` matches: line numbers, byte offsets and a Range for each."""
        params = _query(pattern=pattern, regex="true" if regex else None, context=context or None, max=max)
        return self._run(_Call("GET", ("triggers", trigger_id, "payload", "grep"), GrepResult, params, run=run))

    def grep_body(self, report_id: str, pattern: str, regex: bool = False, context: int = 0,
                  max: int | None = None, *, run: str | None = None) -> GrepResult:
        """Matching lines of the report's body (as grep_payload)."""
        params = _query(pattern=pattern, regex="true" if regex else None, context=context or None, max=max)
        return self._run(_Call("GET", ("reports", report_id, "body", "grep"), GrepResult, params, run=run))

    # ---- the recall trace -------------------------------------------------------------------------

    def run_reads(self, run_id: str, cursor: str | None = None, limit: int | None = None) -> ReadPage:
        """A page of the run's reads in the order they were made (older than the settle horizon). There is
        always a next_cursor: poll with it to tail a live run."""
        return self._run(_Call("GET", ("runs", run_id, "reads"), ReadPage, _query(cursor=cursor, limit=limit)))

    def object_reads(self, object_id: str, cursor: str | None = None, limit: int | None = None) -> ReadPage:
        """A page of the traced reads of this ID, each naming its run (served for a deleted one too)."""
        return self._run(_Call("GET", ("ids", object_id, "reads"), ReadPage, _query(cursor=cursor, limit=limit)))

    # ---- the request audit ------------------------------------------------------------------------

    def list_requests(self, cursor: str | None = None, limit: int | None = None, **filters: str | None
                      ) -> RequestPage:
        """A page of the tenant's audited writes, deletes, administration and searches in order (a key with
        grants: its own). Filters: since, until, route, method, status ('4xx'), key_id, subject, run,
        object_id. There is always a next_cursor, to tail."""
        return self._run(_Call("GET", ("requests",), RequestPage, _query(cursor=cursor, limit=limit, **filters)))

    def get_request(self, request_id: str) -> AuditedRequest:
        """The audited request with this X-Request-ID (written within a trace flush interval)."""
        return self._run(_Call("GET", ("requests", request_id), AuditedRequest))

    # ---- webhook endpoints (admin scope) ----------------------------------------------------------

    def create_hook(self, source: str = "github", label: str = "") -> NewHook:
        """A webhook endpoint in the caller's tenant; the only time its secret is shown. Not retried once
        it may have been sent, as create_key: a retry would make a second hook."""
        return self._run(_Call("POST", ("admin", "hooks"), NewHook,
                               body=msgspec.json.encode(CreateHook(source=source, label=label)),  # type: ignore[arg-type]
                               replayable=False))

    def list_hooks(self) -> HookList:
        return self._run(_Call("GET", ("admin", "hooks"), HookList))

    def revoke_hook(self, hook_id: str) -> HookView:
        """Revoke a hook: its deliveries get 404 from the next one on."""
        return self._run(_Call("DELETE", ("admin", "hooks", hook_id), HookView))

    # ---- keys and health -------------------------------------------------------------------------

    def create_key(self, scope: str, label: str = "") -> NewKey:
        """A new key in the caller's tenant (admin scope). Not retried once it may have been sent: the
        server stores no outcome for it (the secret is never kept), so a retry would make a second key."""
        return self._run(_Call("POST", ("admin", "keys"), NewKey, body=msgspec.json.encode(CreateKey(scope=scope,
                                                                                                 label=label)),
                               replayable=False))

    def list_keys(self) -> KeyList:
        return self._run(_Call("GET", ("admin", "keys"), KeyList))

    def revoke_key(self, key_id: str) -> KeyView:
        return self._run(_Call("DELETE", ("admin", "keys", key_id), KeyView))

    def health(self) -> Health:
        """GET /healthz: the process is up."""
        return self._run(_Call("GET", ("healthz",), Health))

    def ready(self) -> Health:
        """GET /readyz: the database answers (Unavailable if not)."""
        return self._run(_Call("GET", ("readyz",), Health))

    def own_key(self) -> KeyView:
        """GET /key: the key this client sends (ID, tenant, scope, label); Unauthorized if it is no valid key."""
        return self._run(_Call("GET", ("key",), KeyView))


class RecallClient(_Operations):
    """Blocking client. `RecallClient()` talks to the local `recall-server serve` with the key it saved."""

    def __init__(self, url: str | None = None, key: str | None = None, *, run: str | None = None,
                 timeout: float = 30.0, max_retries: int = MAX_RETRIES, max_retry_wait: float = 30.0,
                 transport: httpx.BaseTransport | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(url, key, run, max_retries, max_retry_wait)
        self.http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport,
                                 headers=self._default_headers(headers))

    def _run(self, call: _Call) -> Any:
        headers = self._headers(call)
        attempt = 0
        while True:
            try:
                response = self.http.request(call.method, _path(call.path), params=call.params,
                                             content=call.body, headers=headers)
            except httpx.TransportError as exc:
                if (delay := self._retry_after(call, attempt, error=exc)) is None:
                    raise self._failed(exc) from None
            else:
                if (delay := self._retry_after(call, attempt, response=response)) is None:
                    return self._result(call, response)
            time.sleep(delay)
            attempt += 1

    def can_write(self) -> bool:
        """Whether this key may write (write or admin scope); Unauthorized if it is no valid key."""
        return self.own_key().scope in ("write", "admin")

    def _walk(self, fetch: Callable[[str | None], Any], cursor: str | None = None) -> Iterator[Any]:
        """Every entry of every page once, from `cursor`, following next_cursor while has_more."""
        while True:
            page = fetch(cursor)
            yield from page.data
            if not page.has_more:
                return
            cursor = page.next_cursor

    def iter_events(self, thread_id: str, after: str | None = None, follow: bool = False, *, limit: int = 500,
                    poll_interval: float = 1.0, run: str | None = None) -> Iterator[Event]:
        """Every event of the thread once, in seq order, from cursor `after` (the start by default);
        with follow=True keep tailing the live thread, polling every poll_interval seconds."""
        cursor = after
        while True:
            page = self.list_events(thread_id, cursor, limit, run=run)
            yield from page.data
            cursor = page.next_cursor or cursor
            if not page.has_more:
                if not follow:
                    return
                time.sleep(poll_interval)

    def iter_messages(self, thread_id: str, *, limit: int = 500, run: str | None = None,
                      **filters: Any) -> Iterator[Message]:
        """Every message of the thread once, in order (filters as list_messages)."""
        return self._walk(lambda cursor: self.list_messages(thread_id, cursor, limit, run=run, **filters), None)

    def iter_threads(self, *, limit: int = 500, run: str | None = None, **filters: str | None) -> Iterator[ThreadIndexEntry]:
        """Every thread of the index (filters as list_threads), newest first."""
        return self._walk(lambda cursor: self.list_threads(cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_reports(self, worker_id: str, *, limit: int = 500, run: str | None = None,
                     **filters: str | None) -> Iterator[ReportIndexEntry]:
        """Every report the worker filed (filters as list_reports), newest first."""
        return self._walk(lambda cursor: self.list_reports(worker_id, cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_memories(self, *, limit: int = 500, run: str | None = None, **filters: Any) -> Iterator[MemoryIndexEntry]:
        """Every current memory once, in (namespace, key) order (filters as list_memories)."""
        return self._walk(lambda cursor: self.list_memories(cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_memory_versions(self, memory_id: str, *, limit: int = 500,
                             run: str | None = None) -> Iterator[MemoryVersion]:
        """Every version of the memory's chain, newest first."""
        return self._walk(lambda cursor: self.memory_versions(memory_id, cursor, limit, run=run), None)

    def iter_memory_namespaces(self, *, limit: int = 500, run: str | None = None,
                               **filters: Any) -> Iterator[list[str]]:
        """Every namespace of current memories once, in order (filters as memory_namespaces)."""
        return self._walk(lambda cursor: self.memory_namespaces(cursor=cursor, limit=limit, run=run, **filters))

    def iter_search(self, q: str, *, limit: int = 100, run: str | None = None, **filters: Any) -> Iterator[SearchHit]:
        """Every hit once, best first (filters as search)."""
        return self._walk(lambda cursor: self.search(q, cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_backlinks(self, object_id: str, *, limit: int = 500, run: str | None = None) -> Iterator[Backlink]:
        """Every live object linking to this ID once, in (relation, id) order."""
        return self._walk(lambda cursor: self.backlinks(object_id, cursor, limit, run=run), None)

    def iter_run_reads(self, run_id: str, after: str | None = None, *, limit: int = 500) -> Iterator[Read]:
        """Every settled read of the run once, in order, from cursor `after` (the start by default)."""
        return self._walk(lambda cursor: self.run_reads(run_id, cursor, limit), after)

    def iter_object_reads(self, object_id: str, after: str | None = None, *, limit: int = 500) -> Iterator[Read]:
        """Every settled read of the ID once, in order."""
        return self._walk(lambda cursor: self.object_reads(object_id, cursor, limit), after)

    def iter_requests(self, after: str | None = None, *, limit: int = 500,
                      **filters: str | None) -> Iterator[AuditedRequest]:
        """Every settled audited request once, in order (filters as list_requests)."""
        return self._walk(lambda cursor: self.list_requests(cursor, limit, **filters), after)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RecallClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRecallClient(_Operations):
    """The same operations, awaited: `view = await client.get_thread("thr_pr_412")`."""

    def __init__(self, url: str | None = None, key: str | None = None, *, run: str | None = None,
                 timeout: float = 30.0, max_retries: int = MAX_RETRIES, max_retry_wait: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None, headers: dict[str, str] | None = None,
                 max_in_flight: int = MAX_IN_FLIGHT) -> None:
        super().__init__(url, key, run, max_retries, max_retry_wait)
        self.http = httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport,
                                      headers=self._default_headers(headers),
                                      limits=httpx.Limits(max_connections=max_in_flight))
        # Requests beyond the pool wait here, not in httpcore's pool queue: it is scanned on every
        # release, so thousands of gathered calls crawl (1,000 `aput`s at once: 22.5 s unbounded,
        # 2.1 s with 100 in flight), and the ones queued longest hit the pool timeout and retry.
        self._in_flight = asyncio.Semaphore(max_in_flight)

    async def _run(self, call: _Call) -> Any:
        headers = self._headers(call)
        attempt = 0
        while True:
            try:
                async with self._in_flight:
                    response = await self.http.request(call.method, _path(call.path), params=call.params,
                                                       content=call.body, headers=headers)
            except httpx.TransportError as exc:
                if (delay := self._retry_after(call, attempt, error=exc)) is None:
                    raise self._failed(exc) from None
            else:
                if (delay := self._retry_after(call, attempt, response=response)) is None:
                    return self._result(call, response)
            await asyncio.sleep(delay)
            attempt += 1

    async def can_write(self) -> bool:
        """Whether this key may write (write or admin scope); Unauthorized if it is no valid key."""
        return (await self.own_key()).scope in ("write", "admin")

    async def _walk(self, fetch: Callable[[str | None], Awaitable[Any]],
                    cursor: str | None = None) -> AsyncIterator[Any]:
        """Every entry of every page once, from `cursor`, following next_cursor while has_more."""
        while True:
            page = await fetch(cursor)
            for entry in page.data:
                yield entry
            if not page.has_more:
                return
            cursor = page.next_cursor

    async def iter_events(self, thread_id: str, after: str | None = None, follow: bool = False, *,
                          limit: int = 500, poll_interval: float = 1.0,
                          run: str | None = None) -> AsyncIterator[Event]:
        """Every event of the thread once, in seq order (see RecallClient.iter_events)."""
        cursor = after
        while True:
            page = await self.list_events(thread_id, cursor, limit, run=run)
            for event in page.data:
                yield event
            cursor = page.next_cursor or cursor
            if not page.has_more:
                if not follow:
                    return
                await asyncio.sleep(poll_interval)

    def iter_messages(self, thread_id: str, *, limit: int = 500, run: str | None = None,
                      **filters: Any) -> AsyncIterator[Message]:
        """Every message of the thread once, in order (filters as list_messages)."""
        return self._walk(lambda cursor: self.list_messages(thread_id, cursor, limit, run=run, **filters), None)

    def iter_threads(self, *, limit: int = 500, run: str | None = None,
                           **filters: str | None) -> AsyncIterator[ThreadIndexEntry]:
        return self._walk(lambda cursor: self.list_threads(cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_reports(self, worker_id: str, *, limit: int = 500, run: str | None = None,
                           **filters: str | None) -> AsyncIterator[ReportIndexEntry]:
        return self._walk(lambda cursor: self.list_reports(worker_id, cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_memories(self, *, limit: int = 500, run: str | None = None,
                            **filters: Any) -> AsyncIterator[MemoryIndexEntry]:
        """Every current memory once, in (namespace, key) order (filters as list_memories)."""
        return self._walk(lambda cursor: self.list_memories(cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_memory_versions(self, memory_id: str, *, limit: int = 500,
                                   run: str | None = None) -> AsyncIterator[MemoryVersion]:
        return self._walk(lambda cursor: self.memory_versions(memory_id, cursor, limit, run=run), None)

    def iter_memory_namespaces(self, *, limit: int = 500, run: str | None = None,
                                     **filters: Any) -> AsyncIterator[list[str]]:
        return self._walk(lambda cursor: self.memory_namespaces(cursor=cursor, limit=limit, run=run, **filters))

    def iter_search(self, q: str, *, limit: int = 100, run: str | None = None,
                          **filters: Any) -> AsyncIterator[SearchHit]:
        return self._walk(lambda cursor: self.search(q, cursor=cursor, limit=limit, run=run, **filters), None)

    def iter_backlinks(self, object_id: str, *, limit: int = 500,
                             run: str | None = None) -> AsyncIterator[Backlink]:
        return self._walk(lambda cursor: self.backlinks(object_id, cursor, limit, run=run), None)

    def iter_run_reads(self, run_id: str, after: str | None = None, *,
                             limit: int = 500) -> AsyncIterator[Read]:
        return self._walk(lambda cursor: self.run_reads(run_id, cursor, limit), after)

    def iter_object_reads(self, object_id: str, after: str | None = None, *,
                                limit: int = 500) -> AsyncIterator[Read]:
        return self._walk(lambda cursor: self.object_reads(object_id, cursor, limit), after)

    def iter_requests(self, after: str | None = None, *, limit: int = 500,
                            **filters: str | None) -> AsyncIterator[AuditedRequest]:
        return self._walk(lambda cursor: self.list_requests(cursor, limit, **filters), after)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncRecallClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
