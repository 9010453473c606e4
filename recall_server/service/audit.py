"""The request audit: what a tenant's keys wrote, deleted, administered and searched, and what it returned.

`AuditRequests`, a middleware of the protected routes, records every authenticated request that is not a
read (POST, PUT, PATCH, DELETE) and every search (GET handlers marked `opt=SEARCH`); reads stay in the
trace. A row is appended to the trace's process buffer (service/trace.py) and written with its batches,
off the request path: the request runs exactly the statements it runs unaudited, and a key's tenant is
found by the flush from its verified key (recall_record_requests), never carried. Never a 401 (no
tenant to file it in).

A row holds IDs, never content: the route template, method, status, key, subject and run (its
X-Recall-Run), the IDs in the path and the ID of the object the answer is about, the namespace it
wrote or searched; for a search its parameters without the question and the IDs it returned, best
first. What became of the work a request started (the embedding of each object it names) is read
when the audit is read, from the indexer's tables: queued, retrying or failed with the error's class,
indexed. Pages (`GET /requests`) settle and page exactly once as the trace's reads do.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from recall_server import ids
from recall_server.auth import Credential
from recall_server.db import queries as q
from recall_server.errors import NotFound
from recall_server.models import AuditedRequest, RequestPage
from recall_server.observability import request_id
from recall_server.service import trace

log = logging.getLogger("recall_server.audit")

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SEARCH = {"audit": "search"}  # the opt of a GET route that is audited as a search (routes/lens.py)
MAX_BODY = 1 << 20  # an answer read for its IDs up to this many bytes; past it only the path's IDs are kept
# A search's parameters kept in its row: its filters and options, never `q` (the question is user content).
# `q` goes to the buffer, and into a row only where its tenant opted in (recall_record_requests drops it).
PARAMS = ("q", "mode", "type", "status", "namespace", "since", "until", "limit", "min_score", "rerank", "explain",
          "app_id", "agent_id", "run_id", "tag", "cursor")
_MULTI = frozenset({"type", "tag"})


class _Hit(msgspec.Struct):
    id: Any = None


class _Answer(msgspec.Struct):
    """What the audit reads of an answer: the object's ID and namespace, or a search page's hits (read only
    for a search)."""

    id: Any = None
    namespace: Any = None
    data: msgspec.Raw = msgspec.Raw(b"null")


_answer = msgspec.json.Decoder(_Answer)
_hits = msgspec.json.Decoder(list[_Hit])


def _joined(namespace: Any) -> str | None:
    if isinstance(namespace, list) and all(isinstance(s, str) for s in namespace):
        return "/".join(namespace)
    return namespace if isinstance(namespace, str) else None


def row(scope: dict[str, Any], status: int, body: bytes | None, search: bool) -> tuple[Any, ...]:
    """The audited fields of a request once answered: (object IDs, namespace, params, returned)."""
    found = [v for v in (scope.get("path_params") or {}).values() if isinstance(v, str) and ids.kind_of(v)]
    namespace = params = returned = None
    answer = _Answer()
    if body is not None and status < 300:
        try:
            answer = _answer.decode(body)
        except msgspec.DecodeError:
            pass
    if search:
        query: dict[str, Any] = {}
        for name, value in parse_qsl(scope.get("query_string", b"").decode("latin-1")):
            if name in PARAMS:
                query.setdefault(name, []).append(value) if name in _MULTI else query.setdefault(name, value)
        params = query
        namespace = query.get("namespace")
        if bytes(answer.data) != b"null":
            try:
                returned = [h.id for h in _hits.decode(answer.data) if isinstance(h.id, str)]
            except msgspec.DecodeError:
                returned = None
    else:
        if isinstance(answer.id, str) and answer.id not in found:
            found.append(answer.id)
        namespace = _joined(answer.namespace)
    return found, namespace, params, returned


def record(audit: trace.Trace, cred: Credential, run: str | None, at_us: int, scope: dict[str, Any], status: int,
           body: bytes | None, search: bool = False) -> None:
    """Buffer one answered request (no I/O); never a 401's."""
    if status == 401:
        return
    try:
        fields = row(scope, status, body, search)
    except Exception:  # the answer is sent: a fault here must never reach the client, and is counted
        trace.AUDIT_DROPPED.labels("unreadable").inc()
        log.warning("an audited answer could not be read", exc_info=True)
        return
    audit.record_request(cred, run, at_us, scope["method"], scope.get("path_template") or scope["path"], status,
                         *fields, request_id(scope))


class AuditRequests:
    """Middleware of the protected routes (after RequireKey): audits each write and search.

    A read costs one set lookup; an audited request a wrapped `send` that keeps the status and up to
    MAX_BODY bytes of the answer, and an append to the buffer at the end. (direct.Direct audits the writes
    it answers itself with `record`.)"""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        method = scope["method"]
        search = method == "GET" and scope["route_handler"].opt.get("audit") == "search"
        if method not in WRITES and not search:
            await self.app(scope, receive, send)
            return
        run = trace.run_of(scope)
        at_us = time.time_ns() // 1000
        status, chunks, size = 500, [], 0

        async def keeping(message: dict[str, Any]) -> None:
            nonlocal status, size
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and size <= MAX_BODY:
                part = message.get("body", b"")
                size += len(part)
                chunks.append(part)
            await send(message)

        try:
            await self.app(scope, receive, keeping)
        finally:
            record(scope["app"].state.service.trace, scope["state"]["credential"], run, at_us, scope, status,
                   b"".join(chunks) if size <= MAX_BODY else None, search)


class Audit:
    """The audit's pages, over the trace's buffer and cursors."""

    def __init__(self, recorder: trace.Trace) -> None:
        self.trace = recorder

    async def requests(self, cred: Credential, match: q.RequestFilter, cursor: str | None, limit: int
                       ) -> RequestPage:
        """The tenant's settled requests in order (a key with grants: its own); always a next cursor, to tail."""
        pager = self.trace.cursors.pager(cursor, q.RequestPosition, "requests", msgspec.json.encode(match).decode())
        async with self.trace.db.connection() as conn:
            tenant, rows = await q.list_requests(conn, cred, self.trace.settle, pager.after, limit + 1, match)
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, lambda r: list(r[1]),
                                                  tail=list(pager.after or trace.START))
        return RequestPage(data=[r for r, _ in shown], next_cursor=next_cursor, has_more=has_more)

    async def request(self, cred: Credential, request_id: str) -> AuditedRequest:
        """The audited request with this ID (the latest, if a client reused an X-Request-ID); 404 when none is
        written yet: it is written with the next flush."""
        async with self.trace.db.connection() as conn:
            found = await q.requests_by_id(conn, cred, request_id)
        if not found:
            raise NotFound(f"No audited request {request_id!r} (yet: requests are written within a trace flush "
                           "interval).", request_id=request_id)
        return found[-1]


def filter_of(since: datetime | None, until: datetime | None, route: str | None, status: str | None,
              key_id: str | None, subject: str | None, run: str | None, object_id: str | None,
              method: str | None) -> q.RequestFilter:
    return q.RequestFilter(since=since, until=until, route=route,
                           status_class=None if status is None else int(status[0]), key_id=key_id,
                           subject=subject, run=run, object_id=object_id, method=method)
