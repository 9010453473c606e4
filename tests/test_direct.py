"""direct.DirectReads answers GET /threads/{id} and GET /workers/{id} exactly as the framework route does.

Two copies of the server's ASGI stack over the same database, one with DirectReads in front of the
framework and one without, get the same requests; status, headers, body and the recorded trace must
be the same, and a spy on the framework says which requests DirectReads answered itself (so the
comparison is never the framework against itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import cli, create_key, uid
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar.testing import TestClient

from recall_server import config
from recall_server.app import create_app
from recall_server.direct import DirectReads
from recall_server.head import HeadAsGet
from recall_server.limits import BodyGuard
from recall_server.observability import ObservabilityMiddleware


class Spy:
    """The framework app, counting the requests that reach it."""

    def __init__(self, app: Any) -> None:
        self.app, self.state, self.reached = app, app.state, 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.reached += scope["type"] == "http"
        await self.app(scope, receive, send)


def stack(app: Any) -> Any:
    """The layers app.from_env puts around the framework (DirectReads aside)."""
    return ObservabilityMiddleware(HeadAsGet(BodyGuard(app, 30)))


class Pair:
    def __init__(self, database_url: str) -> None:
        make = lambda: create_app(config.Settings(database_url=database_url, pool_min=1, pool_max=2,  # noqa: E731
                                                  sweep_interval=0, trace_flush_interval=3600))
        self.framework_app, direct_app = make(), make()
        self.spy = Spy(direct_app)
        self.framework = TestClient(stack(self.framework_app))
        self.direct = TestClient(stack(DirectReads(self.spy)))
        self.direct_app = direct_app

    def both(self, method: str, path: str, headers: dict[str, str]) -> tuple[httpx.Response, httpx.Response, bool]:
        """(framework's response, DirectReads' response, whether DirectReads answered it itself)."""
        headers = {"X-Request-Id": "req-direct-test", **headers}
        before = self.spy.reached
        direct = self.direct.request(method, path, headers=headers)
        framework = self.framework.request(method, path, headers=headers)
        return framework, direct, self.spy.reached == before


def same(framework: httpx.Response, direct: httpx.Response) -> None:
    assert direct.status_code == framework.status_code, (direct.status_code, direct.text, framework.text)
    assert headers(direct) == headers(framework)
    assert direct.content == framework.content


def headers(response: httpx.Response) -> list[tuple[str, str]]:
    """The headers in order; the methods of a framework 405's Allow as a set (two app instances list them in
    different orders: `/workers/.` is `/workers/` once httpx removes the dot segment, a path DirectReads
    never answers)."""
    return [(k, ", ".join(sorted(v.split(", "))) if k == "allow" and response.status_code == 405 else v)
            for k, v in response.headers.multi_items()]


@pytest.fixture(scope="module")
def pair(database_url: str, server: Any) -> Iterator[Pair]:
    p = Pair(database_url)
    with p.framework, p.direct:
        yield p


@pytest.fixture(scope="module")
def world(pair: Pair, database_url: str) -> dict[str, str]:
    """A thread with an owner and events, a worker with a report, a deleted thread and worker, and keys."""
    key = create_key(database_url, "default", "write")
    revoked = create_key(database_url, "default", "read")
    cli(database_url, "keys", "revoke", revoked.split(".")[0][3:])
    c = pair.framework
    c.headers["Authorization"] = f"Bearer {key}"
    worker, gone_worker = uid("wkr"), uid("wkr")
    thread, gone_thread = uid("thr"), uid("thr")
    for w in (worker, gone_worker):
        assert c.post("/workers", json={"id": w, "name": "w", "summary": "a worker"}).status_code == 201
    assert c.post("/threads", json={"id": thread, "title": "t", "summary": "a thread"}).status_code == 201
    assert c.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code == 201
    for i in range(12):
        assert c.post(f"/threads/{thread}/events", json={"summary": f"event {i} " + "x" * 150}).status_code == 201
    assert c.post(f"/workers/{worker}/reports", json={"thread_id": thread, "summary": "found it",
                                    "body": "r" * 5000}).status_code == 201
    assert c.post("/threads", json={"id": gone_thread, "title": "t"}).status_code == 201
    assert c.delete(f"/threads/{gone_thread}").status_code == 204
    assert c.delete(f"/workers/{gone_worker}").status_code == 204
    del c.headers["Authorization"]
    return {"key": key, "revoked": revoked, "thread": thread, "worker": worker, "gone_thread": gone_thread,
            "gone_worker": gone_worker}


ANSWERED_DIRECTLY = [  # (path, query): every hit, miss and key failure of a plain GET
    ("/threads/{thread}", ""), ("/threads/{thread}", "?budget=4096"), ("/threads/{thread}", "?budget=1000000"),
    ("/threads/{thread}", "?budget=5000"),
    ("/workers/{worker}", ""), ("/workers/{worker}", "?budget=4200"),
    ("/threads/thr_never_made", ""), ("/threads/{worker}", ""), ("/workers/{thread}", ""),
    ("/threads/not-an-id", ""), ("/threads/thr_" + "x" * 150, ""), ("/threads/{gone_thread}", ""),
    ("/workers/{gone_worker}", ""),
]
THE_FRAMEWORK_ANSWERS = [  # anything else goes through unchanged
    ("/threads/{thread}", "?budget=1"), ("/threads/{thread}", "?budget=99999999"), ("/threads/{thread}", "?budget=1e6"),
    ("/threads/{thread}", "?budget=0004096"),
    ("/threads/{thread}", "?budget=4096&budget=5000"), ("/threads/{thread}", "?budget="),
    ("/threads/{thread}", "?other=1"), ("/threads/{thread}/", ""), ("/threads/{thread}/events", ""),
    ("/threads", ""), ("/workers/{worker}/reports", ""),
]
KEYS = {"key": lambda w: {"Authorization": f"Bearer {w['key']}"}, "none": lambda w: {},
        "malformed": lambda w: {"Authorization": "Bearer rk_nope"},
        "unknown": lambda w: {"Authorization": "Bearer rk_0123456789abcdef." + "A" * 43},
        "revoked": lambda w: {"Authorization": f"Bearer {w['revoked']}"},
        "basic": lambda w: {"Authorization": "Basic dXNlcjpwYXNz"}}


@pytest.mark.parametrize("key", list(KEYS))
@pytest.mark.parametrize("path,query", ANSWERED_DIRECTLY)
def test_a_plain_get_is_answered_directly_as_the_framework_answers_it(
        pair: Pair, world: dict[str, str], path: str, query: str, key: str) -> None:
    for method in ("HEAD", "GET"):
        framework, direct, directly = pair.both(method, path.format(**world) + query, KEYS[key](world))
        same(framework, direct)
        assert directly, f"{method} {path}{query} reached the framework"
    if key == "key" and path.startswith("/threads/{thread}"):  # the comparison is of real views
        assert framework.status_code == 200 and framework.json()["id"] == world["thread"]


@pytest.mark.parametrize("path,query", THE_FRAMEWORK_ANSWERS)
def test_any_other_request_goes_to_the_framework_unchanged(
        pair: Pair, world: dict[str, str], path: str, query: str) -> None:
    framework, direct, directly = pair.both("GET", path.format(**world) + query, KEYS["key"](world))
    same(framework, direct)
    assert not directly


@pytest.mark.parametrize("run,key", [("run-direct.1", "key"), ("bad run!", "key"), ("bad run!", "none"),
                                     ("run-direct.2", "revoked")])
@pytest.mark.parametrize("path", ["/threads/{thread}", "/workers/{worker}", "/threads/thr_never_made",
                                  "/threads/{gone_thread}"])
def test_a_traced_read_is_traced_as_the_framework_traces_it(
        pair: Pair, world: dict[str, str], path: str, run: str, key: str) -> None:
    traces = [pair.framework_app.state.trace, pair.direct_app.state.trace]
    before = [len(t.pending) for t in traces]
    framework, direct, directly = pair.both("GET", path.format(**world), {**KEYS[key](world), "X-Recall-Run": run})
    same(framework, direct)
    assert directly
    framework_rows, direct_rows = (t.pending[n:] for t, n in zip(traces, before, strict=True))
    without_tick_and_time = lambda rows: [row[:2] + row[3:4] + row[5:] for row in rows]  # noqa: E731
    assert without_tick_and_time(direct_rows) == without_tick_and_time(framework_rows)
    assert len(direct_rows) == (framework.status_code not in (400, 401))


_ID_CHARS = st.sampled_from(list("thrwkrpmg_-") + ["%", ".", "é", "A", "9"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collection=st.sampled_from(["threads", "workers"]),
       object_id=st.one_of(st.sampled_from(["thread", "worker", "gone_thread"]), st.text(_ID_CHARS, min_size=1,
                                                                                        max_size=20)),
       query=st.one_of(st.just(""), st.integers(0, 10**8).map(lambda n: f"?budget={n}"),
                       st.text(st.sampled_from(list("budget=0123456789&e.+-")), max_size=14).map(lambda q: "?" + q)))
def test_any_get_of_a_thread_or_worker_path_is_answered_as_the_framework_answers_it(
        pair: Pair, world: dict[str, str], collection: str, object_id: str, query: str) -> None:
    object_id = world.get(object_id, object_id)
    framework, direct, _ = pair.both("GET", f"/{collection}/{object_id}{query}", KEYS["key"](world))
    same(framework, direct)
