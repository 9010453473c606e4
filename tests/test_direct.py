"""direct.Direct answers GET /threads/{id}, /workers/{id}, /memories/{id}, POST /triggers and plain notes exactly as
the framework does.

Two copies of the server's ASGI stack over the same database, one with Direct in front of the
framework and one without, get the same requests; status, headers, body and the recorded trace must
be the same, and a spy on the framework says which requests Direct answered itself (so the
comparison is never the framework against itself).
"""

from __future__ import annotations

import json
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
from recall_server.direct import Direct
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
    """The layers asgi.stack puts around the framework (Direct and /mcp aside)."""
    return ObservabilityMiddleware(HeadAsGet(BodyGuard(app, 30)))


class Pair:
    def __init__(self, database_url: str) -> None:
        make = lambda: create_app(config.Settings(database_url=database_url, pool_min=1, pool_max=2,  # noqa: E731
                                                  sweep_interval=0, trace_flush_interval=3600))
        self.framework_app, direct_app = make(), make()
        self.spy = Spy(direct_app)
        self.framework = TestClient(stack(self.framework_app))
        self.direct = TestClient(stack(Direct(self.spy, config.Settings().max_body_bytes)))
        self.direct_app = direct_app

    def both(self, method: str, path: str, headers: dict[str, str]) -> tuple[httpx.Response, httpx.Response, bool]:
        """(framework's response, Direct' response, whether Direct answered it itself)."""
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
    different orders: `/workers/.` is `/workers/` once httpx removes the dot segment, a path Direct
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
    space, memory = uid("ns"), {}
    for name, key_, value in (("old_memory", "prefs", {"tone": "formal"}), ("memory", "prefs", {"n": "n" * 3000}),
                              ("gone_memory", "gone", "v")):
        created = c.post("/memories", json={"namespace": [space], "key": key_, "kind": "preference", "summary": name,
                                            "value": value, "sources": [thread]})
        assert created.status_code == 201, created.text
        memory[name] = created.json()["id"]
    assert c.delete(f"/memories/{memory['gone_memory']}").status_code == 204
    del c.headers["Authorization"]
    return {"key": key, "revoked": revoked, "thread": thread, "worker": worker, "gone_thread": gone_thread,
            "gone_worker": gone_worker, **memory}


ANSWERED_DIRECTLY = [  # (path, query): every hit, miss and key failure of a plain GET
    ("/threads/{thread}", ""), ("/threads/{thread}", "?budget=4096"), ("/threads/{thread}", "?budget=1000000"),
    ("/threads/{thread}", "?budget=5000"),
    ("/workers/{worker}", ""), ("/workers/{worker}", "?budget=4200"),
    ("/memories/{memory}", ""), ("/memories/{memory}", "?budget=4500"), ("/memories/{old_memory}", ""),
    ("/threads/thr_never_made", ""), ("/memories/mem_never_made", ""), ("/threads/{gone_thread}", ""),
    ("/workers/{gone_worker}", ""), ("/memories/{gone_memory}", ""),
]
THE_FRAMEWORK_ANSWERS = [  # anything else goes through unchanged
    ("/threads/{thread}", "?budget=1"), ("/threads/{thread}", "?budget=99999999"), ("/threads/{thread}", "?budget=1e6"),
    ("/threads/{thread}", "?budget=0004096"),
    ("/threads/{thread}", "?budget=4096&budget=5000"), ("/threads/{thread}", "?budget="),
    ("/threads/{thread}", "?other=1"), ("/threads/{thread}/", ""), ("/threads/{thread}/events", ""),
    ("/threads", ""), ("/workers/{worker}/reports", ""),
    ("/threads/{worker}", ""), ("/workers/{thread}", ""), ("/memories/{thread}", ""),  # not an ID of the kind
    ("/threads/not-an-id", ""), ("/threads/thr_" + "x" * 150, ""),
    ("/memories/current", ""), ("/memories/namespaces", ""), ("/memories/{memory}/versions", ""),
    ("/memories/{memory}/value", ""),
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
    if key == "key" and path.startswith(("/threads/{thread}", "/memories/{memory}")):  # a comparison of real views
        assert framework.status_code == 200 and framework.json()["id"] == path.format(**world).rsplit("/", 1)[1]


@pytest.mark.parametrize("path,query", THE_FRAMEWORK_ANSWERS)
def test_any_other_request_goes_to_the_framework_unchanged(
        pair: Pair, world: dict[str, str], path: str, query: str) -> None:
    framework, direct, directly = pair.both("GET", path.format(**world) + query, KEYS["key"](world))
    same(framework, direct)
    assert not directly


@pytest.mark.parametrize("run,key", [("run-direct.1", "key"), ("bad run!", "key"), ("bad run!", "none"),
                                     ("run-direct.2", "revoked")])
@pytest.mark.parametrize("path", ["/threads/{thread}", "/workers/{worker}", "/memories/{memory}",
                                  "/threads/thr_never_made", "/threads/{gone_thread}", "/memories/{gone_memory}"])
def test_a_traced_read_is_traced_as_the_framework_traces_it(
        pair: Pair, world: dict[str, str], path: str, run: str, key: str) -> None:
    traces = [pair.framework_app.state.service.trace, pair.direct_app.state.service.trace]
    before = [len(t.pending) for t in traces]
    framework, direct, directly = pair.both("GET", path.format(**world), {**KEYS[key](world), "X-Recall-Run": run})
    same(framework, direct)
    assert directly
    framework_rows, direct_rows = (t.pending[n:] for t, n in zip(traces, before, strict=True))
    without_tick_and_time = lambda rows: [row[:2] + row[3:4] + row[5:] for row in rows]  # noqa: E731
    assert without_tick_and_time(direct_rows) == without_tick_and_time(framework_rows)
    assert len(direct_rows) == (framework.status_code not in (400, 401))


_ID_CHARS = st.sampled_from(list("thrwkrpmeg_-") + ["%", ".", "é", "A", "9"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(collection=st.sampled_from(["threads", "workers", "memories"]),
       object_id=st.one_of(st.sampled_from(["thread", "worker", "gone_thread", "memory", "current", "namespaces"]),
                           st.text(_ID_CHARS, min_size=1, max_size=20)),
       query=st.one_of(st.just(""), st.integers(0, 10**8).map(lambda n: f"?budget={n}"),
                       st.text(st.sampled_from(list("budget=0123456789&e.+-")), max_size=14).map(lambda q: "?" + q)))
def test_any_get_of_a_thread_worker_or_memory_path_is_answered_as_the_framework_answers_it(
        pair: Pair, world: dict[str, str], collection: str, object_id: str, query: str) -> None:
    object_id = world.get(object_id, object_id)
    framework, direct, _ = pair.both("GET", f"/{collection}/{object_id}{query}", KEYS["key"](world))
    same(framework, direct)


# ---- POST /triggers -------------------------------------------------------------------------------------
# The two stacks file the same request in two tenants (a trigger ID is per tenant), so each can create
# it; the answers then differ only in the clock: created_at, occurred_at when the body gives none, a ttl's expires_at.

CLOCK = ("created_at", "occurred_at", "expires_at", "at")  # expires_at: now + ttl


@pytest.fixture(scope="module")
def tenants(pair: Pair, database_url: str) -> dict[str, str]:
    """A write key for the framework's tenant and one for Direct's, a thread with the same ID in both,
    and a read key."""
    other = uid("tenant").replace("_", "-")
    keys = {"framework": create_key(database_url, "default", "write"), "direct": create_key(database_url, other, "write"),
            "reader": create_key(database_url, other, "read"), "thread": uid("thr")}
    for client, key in ((pair.framework, keys["framework"]), (pair.direct, keys["direct"])):
        created = client.post("/threads", json={"id": keys["thread"], "title": "t"},
                              headers={"Authorization": f"Bearer {key}"})
        assert created.status_code == 201, created.text
    return keys


def post_both(pair: Pair, tenants: dict[str, str], body: bytes, headers: dict[str, str] | None = None,
              keys: tuple[str, str] = ("framework", "direct"), path: str = "/triggers"
              ) -> tuple[httpx.Response, httpx.Response, bool]:
    sent = {"Content-Type": "application/json", "X-Request-Id": "req-direct-test", **(headers or {})}
    before = pair.spy.reached
    direct = pair.direct.post(path, content=body, headers={**sent, "Authorization": f"Bearer {tenants[keys[1]]}"})
    framework = pair.framework.post(path, content=body, headers={**sent, "Authorization": f"Bearer {tenants[keys[0]]}"})
    return framework, direct, pair.spy.reached == before


def same_write(framework: httpx.Response, direct: httpx.Response) -> None:
    assert direct.status_code == framework.status_code, (direct.status_code, direct.text, framework.text)
    if framework.status_code >= 300:
        same(framework, direct)
        return
    skip = ("content-length",)  # a timestamp's digits vary in number
    assert [h for h in headers(direct) if h[0] not in skip] == [h for h in headers(framework) if h[0] not in skip]
    unclocked = lambda r: {k: v for k, v in r.json().items() if k not in CLOCK}  # noqa: E731
    assert unclocked(direct) == unclocked(framework)


def trigger(**fields: Any) -> bytes:
    return json.dumps({"id": uid("trg"), "source": "test", "summary": "s", "payload": "p", **fields}).encode()


FILED_DIRECTLY = [
    {}, {"payload": {"a": [1, 2, {"b": None}]}}, {"payload": "x" * 5000}, {"content_type": "text/markdown"},
    {"content_type": "application/json", "payload": [1, "two"]}, {"app_id": "app", "agent_id": "a.b", "run_id": "r:1"},
    {"occurred_at": "2026-01-02T03:04:05Z"}, {"ttl": 3600}, {"thread_id": "{thread}"}, {"thread_id": "thr_never_made"},
    {"neighbours": ["trg_never_made"]}, {"external_id": "delivery-1"}, {"content_type": "image/png"},
    {"id": None}, {"occurred_at": "yesterday"},  # the service refuses that one: a 400 of its own
]
FRAMEWORK_FILES = [  # bodies the framework explains, and requests that are not plain
    b"not json", b"{}", b"[]", b'{"source": "test", "source": "twice", "summary": "s", "payload": "p"}',
    trigger(source=""), trigger(summary=5), trigger(id="thr_wrong_kind"), trigger(thread_id="trg_wrong"),
    trigger(unknown_field=1), trigger(ttl=-1), trigger(summary="x" * 300),
]


@pytest.mark.parametrize("fields", FILED_DIRECTLY)
def test_a_plain_trigger_is_filed_directly_as_the_framework_files_it(
        pair: Pair, tenants: dict[str, str], fields: dict[str, Any]) -> None:
    body = trigger(**{k: v.format(**tenants) if isinstance(v, str) else v for k, v in fields.items()})
    if fields.get("id", "") is None:
        body = trigger(**{"id": None})
        framework, direct, directly = post_both(pair, tenants, body)
        assert directly and framework.status_code == direct.status_code == 201
        return  # two new IDs: nothing else to compare
    framework, direct, directly = post_both(pair, tenants, body)
    same_write(framework, direct)
    assert directly
    again = post_both(pair, tenants, body)  # the retry: 200 with the first outcome, or the same 4xx
    same_write(*again[:2])


# numbered: the bodies hold fresh IDs, and test names that differ between pytest-xdist workers fail the run
@pytest.mark.parametrize("body", FRAMEWORK_FILES, ids=range(len(FRAMEWORK_FILES)))
def test_a_body_that_is_not_a_plain_trigger_goes_to_the_framework_whole(
        pair: Pair, tenants: dict[str, str], body: bytes) -> None:
    framework, direct, directly = post_both(pair, tenants, body)
    same(framework, direct)
    assert framework.status_code in (400, 422) and not directly


@pytest.mark.parametrize("case", ["idempotency", "query", "media type", "no key", "bad key", "read key"])
def test_requests_that_are_not_plain_go_to_the_framework_and_keys_are_checked_first(
        pair: Pair, tenants: dict[str, str], case: str) -> None:
    body = trigger()
    if case == "idempotency":
        framework, direct, directly = post_both(pair, tenants, body, {"Idempotency-Key": uid("idem")})
        same_write(framework, direct)
        assert framework.status_code == 201 and not directly
    elif case == "query":
        framework, direct, directly = post_both(pair, tenants, body, path="/triggers?x=1")
        same_write(framework, direct)
        assert not directly
    elif case == "media type":
        framework, direct, directly = post_both(pair, tenants, body, {"Content-Type": "text/plain"})
        same(framework, direct)
        assert framework.status_code == 415 and not directly
    else:
        key = {"no key": "", "bad key": "rk_nope", "read key": tenants["reader"]}[case]
        tenants = {**tenants, "framework": key, "direct": key}
        framework, direct, directly = post_both(pair, tenants, body)
        same(framework, direct)
        assert framework.status_code == (403 if case == "read key" else 401) and directly


_TEXT = st.text(st.sampled_from(list("ab.:-_ /\n\x01é")), max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.fixed_dictionaries({}, optional={
    "source": st.one_of(_TEXT, st.just("test"), st.integers()),
    "summary": st.one_of(_TEXT, st.none()),
    "payload": st.one_of(_TEXT, st.dictionaries(st.sampled_from("ab"), st.integers()), st.lists(st.booleans()),
                         st.none()),
    "content_type": st.sampled_from(["text/plain", "application/json", "application/x+json", "image/png", "bad",
                                     "TEXT/PLAIN"]),
    "thread_id": st.sampled_from(["{thread}", "thr_never_made", "wkr_x", "bad"]),
    "ttl": st.one_of(st.integers(-5, 10**9), st.floats(allow_nan=False)),
    "app_id": st.one_of(_TEXT, st.just("*")),
}))
def test_any_trigger_body_is_answered_as_the_framework_answers_it(
        pair: Pair, tenants: dict[str, str], fields: dict[str, Any]) -> None:
    body = trigger(**{k: v.format(**tenants) if k == "thread_id" else v for k, v in fields.items()})
    framework, direct, _ = post_both(pair, tenants, body)
    same_write(framework, direct)


# ---- notes -------------------------------------------------------------------------------
# Both tenants' threads get the same notes in the same order, so their seqs stay equal.

def note(**fields: Any) -> bytes:
    return json.dumps({"summary": "a note", **fields}).encode()


NOTED_DIRECTLY = [  # (path, body fields): hits, a missing thread, a wrong-kind and a gone ref
    ("/threads/{thread}/events", {}), ("/threads/{thread}/events", {"ref": "{thread}"}),
    ("/threads/{thread}/events", {"summary": "é" * 200}), ("/threads/{thread}/events", {"ref": "trg_never_made"}),
    ("/threads/{thread}/events", {"ref": None}), ("/threads/thr_never_made/events", {}),
    ("/threads/not-an-id/events", {}), ("/threads/{thread}/events", {"ref": "{gone_trigger}"}),
]
FRAMEWORK_NOTES = [  # bodies the framework explains
    b"not json", b"{}", b"[]", note(summary=5), note(summary="x" * 300), note(ref="not-an-id"), note(extra=1),
    b'{"summary": "a", "summary": "b"}',
]


@pytest.fixture(scope="module")
def gone_trigger(pair: Pair, tenants: dict[str, str]) -> str:
    """A trigger with the same ID in both tenants, deleted."""
    trigger_id = uid("trg")
    for client, key in ((pair.framework, tenants["framework"]), (pair.direct, tenants["direct"])):
        auth = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        assert client.post("/triggers", content=trigger(id=trigger_id), headers=auth).status_code == 201
        assert client.delete(f"/triggers/{trigger_id}", headers=auth).status_code == 204
    return trigger_id


@pytest.mark.parametrize("path,fields", NOTED_DIRECTLY)
def test_a_plain_note_is_appended_directly_as_the_framework_appends_it(
        pair: Pair, tenants: dict[str, str], gone_trigger: str, path: str, fields: dict[str, Any]) -> None:
    names = {**tenants, "gone_trigger": gone_trigger}
    body = note(**{k: v.format(**names) if isinstance(v, str) else v for k, v in fields.items()})
    framework, direct, directly = post_both(pair, tenants, body, path=path.format(**names))
    same_write(framework, direct)
    assert directly


@pytest.mark.parametrize("body", FRAMEWORK_NOTES)
def test_a_body_that_is_not_a_plain_note_goes_to_the_framework_whole(
        pair: Pair, tenants: dict[str, str], body: bytes) -> None:
    framework, direct, directly = post_both(pair, tenants, body, path=f"/threads/{tenants['thread']}/events")
    same(framework, direct)
    assert framework.status_code in (400, 422) and not directly


@pytest.mark.parametrize("case", ["idempotency", "query", "media type", "no key", "read key", "path"])
def test_notes_that_are_not_plain_go_to_the_framework_and_keys_are_checked_first(
        pair: Pair, tenants: dict[str, str], case: str) -> None:
    path = f"/threads/{tenants['thread']}/events"
    if case == "idempotency":
        framework, direct, directly = post_both(pair, tenants, note(), {"Idempotency-Key": uid("idem")}, path=path)
        same_write(framework, direct)
        assert framework.status_code == 201 and not directly
    elif case == "query":
        framework, direct, directly = post_both(pair, tenants, note(), path=path + "?x=1")
        same_write(framework, direct)
        assert framework.status_code == 201 and not directly
    elif case == "media type":
        framework, direct, directly = post_both(pair, tenants, note(), {"Content-Type": "text/plain"}, path=path)
        same(framework, direct)
        assert framework.status_code == 415 and not directly
    elif case == "path":  # not the route: the framework's 404 or 405
        framework, direct, directly = post_both(pair, tenants, note(), path=path + "/x")
        same(framework, direct)
        assert framework.status_code in (404, 405) and not directly
    else:
        key = {"no key": "", "read key": tenants["reader"]}[case]
        framework, direct, directly = post_both(pair, {**tenants, "framework": key, "direct": key}, note(), path=path)
        same(framework, direct)
        assert framework.status_code == (403 if case == "read key" else 401) and directly


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(thread=st.sampled_from(["{thread}", "thr_never_made", "wkr_x", "bad", "thr_%2F"]),
       fields=st.fixed_dictionaries({}, optional={
           "summary": st.one_of(_TEXT, st.none(), st.integers()),
           "ref": st.one_of(st.sampled_from(["{thread}", "trg_never_made", "bad", "{gone_trigger}"]), st.none()),
       }))
def test_any_note_is_answered_as_the_framework_answers_it(
        pair: Pair, tenants: dict[str, str], gone_trigger: str, thread: str, fields: dict[str, Any]) -> None:
    names = {**tenants, "gone_trigger": gone_trigger}
    body = note(**{k: v.format(**names) if isinstance(v, str) else v for k, v in fields.items()})
    framework, direct, _ = post_both(pair, tenants, body, path=f"/threads/{thread.format(**names)}/events")
    same_write(framework, direct)
