"""The hottest requests answered in plain ASGI: GET /threads/{id}, GET /workers/{id}, GET /memories/{id},
POST /triggers, POST /threads/{id}/events.

An agent's recall is mostly the fetches by ID, and what workers write is mostly plain triggers and
notes. Through the framework each paid Python per request beyond the service call and the
database (three middlewares, routing, parameter and body extraction and validation, the response
pipeline): on the benchmark, the framework route against `Direct` (back to back, same store),
get_thread 0.604 -> 0.739 of the fetch ceiling. `Direct` answers them
itself, with the same service call, the same problem renderer and the same headers;
tests/test_direct.py checks that its answers are the framework route's, byte for byte, over hits,
misses, gone IDs, budgets, bad keys and generated bodies.

It takes only the plain case and passes everything else to the framework unchanged:
- a GET with a query other than a single `budget=<digits>` within range (so every validation
  message stays the framework's), or of a path segment that is not an ID of the collection's kind
  (`/memories/current` and `/memories/namespaces` are the framework's routes, and sub-paths and
  malformed or wrong-kind IDs the framework's answers). A read with X-Recall-Run is traced exactly
  as trace.TraceReads traces the framework's (the same two functions), after the same 401 and 400
  checks in the same order;
- a POST with a query, an Idempotency-Key, no Content-Length or one over the limit, a non-JSON media
  type, or a body that is not a valid CreateTrigger (CreateNote): the framework gets the request
  with the body it was sent, and answers with its own messages.

What it shares with the framework rather than copies: its routes are the framework's handlers' (their
path templates), the key check is routes.caller_key (checked with the database before a body is read),
and problems are rendered by errors.send.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec

from recall_server import errors, ids, jsonbody, spill
from recall_server.service import audit, trace
from recall_server.models import CreateNote, CreateTrigger
from recall_server.limits import read_body, replay
from recall_server.observability import request_id
from recall_server.routes import caller_key, memories, threads, triggers, workers

_HEADERS = [(b"content-type", b"application/json")]


def template(handler: Any) -> str:
    """A route handler's path as the framework reports it in `path_template` (without the `:str` types)."""
    (path,) = handler.paths
    return re.sub(r":\w+}", "}", path)


class Direct:
    """ASGI middleware in front of the framework app; `app.state.service` is the service its lifespan made."""

    ROUTES = {  # the kind of the ID in the path -> (the framework's route template, the method of service.views)
        "thread": (template(threads.get_thread), "get_thread"),
        "worker": (template(workers.get_worker), "get_worker"),
        "memory": (template(memories.get_memory), "get_memory"),
    }

    def __init__(self, app: Any, max_body_bytes: int, max_json_items: int = jsonbody.MAX_ITEMS) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_json_items = max_json_items
        self.encode = msgspec.json.Encoder().encode

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
        elif scope["method"] == "GET":
            collection, _, object_id = scope["path"][1:].partition("/")
            kind = ids.kind_of(object_id)
            route = self.ROUTES.get(kind) if kind and ids.PLURAL[kind] == collection else None
            budget = _budget(scope["query_string"]) if route is not None else None
            if budget is None:
                await self.app(scope, receive, send)
                return
            scope["path_template"] = route[0]  # what the access log and the metrics label it with
            await self._answer(scope, send, route[0], route[1], object_id, budget)
        elif (scope["method"] == "POST" and not scope["query_string"] and (write := _write(scope["path"]))
              and self._plain_body(scope["headers"])):
            scope["path_template"], scope["path_params"] = write[0], write[3]
            await self._create(scope, receive, send, write[1], write[2])
        else:
            await self.app(scope, receive, send)

    def _plain_body(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """A JSON body of a stated length within the limit, and no Idempotency-Key (which takes the
        transaction anyway)."""
        found = dict(headers)
        length = found.get(b"content-length", b"")
        if b"idempotency-key" in found or b"transfer-encoding" in found or not length.isdigit() \
                or int(length) > self.max_body_bytes:
            return False
        try:
            jsonbody.require_json(found.get(b"content-type", b"").decode("latin-1"))
        except errors.UnsupportedMediaType:
            return False
        return True

    async def _create(self, scope: dict[str, Any], receive: Any, send: Any, model: type, create: Any) -> None:
        at_us = time.time_ns() // 1000
        try:
            cred = await caller_key(scope, self.app.state)
            run = trace.run_of(scope)  # after the key's 401, as AuditRequests
            body = await read_body(receive)  # BodyGuard bounds it: 408 when it does not arrive in time
        except Exception as exc:
            await self._problem(scope, send, errors.as_problem(exc, "POST", scope["path"]))
            return
        try:
            req = msgspec.convert(jsonbody.decode(body, self.max_json_items), model)
        except (errors.BadRequest, errors.PayloadTooLarge, msgspec.ValidationError):  # the framework's words
            await self.app(scope, replay(body, receive), send)
            return
        try:
            outcome = await create(self.app.state.service.writes, cred, req)
        except Exception as exc:
            problem = errors.as_problem(exc, "POST", scope["path"])
            await self._problem(scope, send, problem)
            audit.record(self.app.state.service.trace, cred, run, at_us, scope, problem.status, None)
            return
        headers = [(b"location", outcome.location.encode())] if outcome.location else []
        if outcome.replayed:
            headers.append((b"idempotent-replayed", b"true"))
        await _send(send, outcome.status, [*headers, *_HEADERS], outcome.body or b"")
        audit.record(self.app.state.service.trace, cred, run, at_us, scope, outcome.status, outcome.body)

    async def _answer(self, scope: dict[str, Any], send: Any, route: str, method: str, object_id: str,
                      budget: int) -> None:
        """The view, or the problem the framework's error handler would render (app._problem_response)."""
        try:
            # 401 first, as RequireKey, then a malformed X-Recall-Run's 400
            cred = await caller_key(scope, self.app.state)
            run = trace.run_of(scope)
        except Exception as exc:
            await self._problem(scope, send, errors.as_problem(exc, "GET", scope["path"]))
            return

        async def answer(send: Any) -> None:
            try:
                view = await getattr(self.app.state.service.views, method)(cred, object_id, budget)
            except Exception as exc:
                await self._problem(scope, send, errors.as_problem(exc, "GET", scope["path"]))
                return
            await _send(send, 200, _HEADERS, self.encode(view))

        if run is None:
            await answer(send)
        else:
            await trace.traced(self.app.state.service.trace, run, cred, object_id, route, scope, answer, send)

    @staticmethod
    async def _problem(scope: dict[str, Any], send: Any, problem: errors.Problem) -> None:
        await errors.send(send, problem, scope["path"], request_id(scope))


async def _send(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


_TRIGGERS, _NOTES = template(triggers.create_trigger), template(threads.add_note)


def _write(path: str) -> tuple[str, type, Any, dict[str, str]] | None:
    """The plain write a POST path is (its route template, body model, service call and path parameters), or
    None."""
    if path == _TRIGGERS:
        return path, CreateTrigger, lambda writes, cred, req: writes.create_trigger(cred, req, None), {}
    collection, _, rest = path[1:].partition("/")
    thread_id, _, tail = rest.partition("/")
    if collection == "threads" and thread_id and tail == "events":
        return (_NOTES, CreateNote, lambda writes, cred, req: writes.add_note(cred, thread_id, req, None),
                {"thread_id": thread_id})
    return None


def _budget(query: bytes) -> int | None:
    """The budget of a plain query (none, or exactly `budget=<1-7 digits>` within range, no leading zero: the
    framework refuses 0004096), else None."""
    if not query:
        return spill.DEFAULT_BUDGET
    name, _, value = query.partition(b"=")
    if name != b"budget" or not value.isdigit() or len(value) > 7 or value.startswith(b"0"):
        return None
    budget = int(value)
    return budget if spill.MIN_BUDGET <= budget <= spill.MAX_BUDGET else None
