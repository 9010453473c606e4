"""The two hottest reads, GET /threads/{id} and GET /workers/{id}, answered in plain ASGI.

An agent's recall is mostly these two fetches. Through the framework each paid ~60 µs of Python
per request beyond the service call and the database (three middlewares, routing, parameter
parsing and validation, the response pipeline): a third of the request's CPU on the benchmark
(bench/README, "Direct reads"). `DirectReads` answers them itself, with the same service call, the
same problem renderer and the same headers; tests/test_direct.py checks that its answers are the
framework route's, byte for byte, over hits, misses, gone IDs, budgets and bad keys.

It takes only the plain case and passes everything else to the framework unchanged: a query other
than a single `budget=<digits>` within range (so every validation message stays the framework's),
an ID holding `/`, any other method. A read with X-Recall-Run is traced exactly as trace.TraceReads
traces the framework's (the same two functions), after the same 401 and 400 checks in the same order.
"""

from __future__ import annotations

from typing import Any

import msgspec

from recall_server import auth, errors, spill, trace
from recall_server.observability import request_id

_HEADERS = [(b"content-type", b"application/json")]


class DirectReads:
    """ASGI middleware in front of the framework app; `app.state.recall` is the service its lifespan made."""

    ROUTES = {  # first path segment -> (the framework's route template, the service method)
        "threads": ("/threads/{thread_id}", "get_thread"),
        "workers": ("/workers/{worker_id}", "get_worker"),
    }

    def __init__(self, app: Any) -> None:
        self.app = app
        self.encode = msgspec.json.Encoder().encode

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            collection, slash, object_id = scope["path"][1:].partition("/")
            route = self.ROUTES.get(collection) if slash and object_id and "/" not in object_id else None
            budget = _budget(scope["query_string"]) if route is not None else None
            if budget is not None:
                scope["path_template"] = route[0]  # what the access log and the metrics label it with
                await self._answer(scope, send, route[0], route[1], object_id, budget)
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: dict[str, Any], send: Any, route: str, method: str, object_id: str,
                      budget: int) -> None:
        """The view, or the problem the framework's error handler would render (app._problem_response)."""
        try:
            authorization = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
            cred = auth.parse(authorization)  # 401 first, as RequireKey, then a malformed X-Recall-Run's 400
            run = trace.run_of(scope)
        except errors.Problem as problem:
            await self._problem(scope, send, problem)
            return

        async def answer(send: Any) -> None:
            try:
                view = await getattr(self.app.state.recall, method)(cred, object_id, budget)
            except Exception as exc:
                await self._problem(scope, send, errors.as_problem(exc, "GET", scope["path"]))
                return
            await _send(send, 200, _HEADERS, self.encode(view))

        if run is None:
            await answer(send)
        else:
            await trace.traced(self.app.state.trace, run, cred, object_id, route, scope, answer, send)

    @staticmethod
    async def _problem(scope: dict[str, Any], send: Any, problem: errors.Problem) -> None:
        headers = [*((k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in problem.headers.items()),
                   (b"content-type", errors.PROBLEM_JSON.encode())]
        await _send(send, problem.status, headers, errors.encode(problem, scope["path"], request_id(scope)))


async def _send(send: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


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
