"""Conversations on threads: messages appended as events of the log (gap-free seqs, each exactly once under
concurrent appends, idempotent retries), large content spilled and greppable, retractions that never rewrite
the log, and deletion covering the messages; against a real server process."""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from helpers import Graph, assert_problem, cli, create_key, uid


def say(client: httpx.Client, thread: str, *messages: dict[str, Any], **headers: str) -> httpx.Response:
    return client.post(f"/threads/{thread}/messages", json={"messages": list(messages)}, headers=headers)


def replay(client: httpx.Client, thread: str, limit: int = 50, **params: Any) -> list[dict[str, Any]]:
    """Every page of the replay, in order."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = client.get(f"/threads/{thread}/messages",
                          params={"limit": limit, **params, **({"cursor": cursor} if cursor else {})})
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["data"]
        cursor = body["next_cursor"]
        if not body["has_more"]:
            return items


# ---- appending and replaying ------------------------------------------------------------------------------

def test_a_batch_lands_in_order_with_roles_times_and_metadata(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    graph.note(thread, "before the conversation")
    r = say(client, thread,
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What failed on PR 412?", "at": "2026-11-30T12:00:00Z",
             "metadata": {"channel": "slack", "user_id": "u1"}},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me look."}]},
            {"role": "tool", "content": "payment timeout after 30s", "name": "ci_log", "tool_call_id": "call_1"})
    assert r.status_code == 201, r.text
    assert [m["seq"] for m in r.json()["messages"]] == [2, 3, 4, 5]
    got = replay(client, thread)
    assert [(m["seq"], m["role"]) for m in got] == [(2, "system"), (3, "user"), (4, "assistant"), (5, "tool")]
    assert got[1]["at"].startswith("2026-11-30T12:00:00") and got[1]["metadata"] == {"channel": "slack", "user_id": "u1"}
    assert got[2]["content"] == [{"type": "text", "text": "Let me look."}]
    assert got[2]["content_type"] == "application/json"
    assert (got[3]["name"], got[3]["tool_call_id"], got[3]["content"]) == ("ci_log", "call_1", "payment timeout after 30s")
    # the messages are events of the log, and the thread's view previews the newest
    events = client.get(f"/threads/{thread}/events").json()["data"]
    assert [e["type"] for e in events] == ["note", "message", "message", "message", "message"]
    view = client.get(f"/threads/{thread}").json()
    assert view["events"][-1]["summary"] == "tool ci_log: payment timeout after 30s"
    assert view["events"][2]["summary"] == "user: What failed on PR 412?"


def test_replay_filters_by_role_and_time_and_pages_newest_first(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    say(client, thread, *({"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}",
                           "at": f"2026-11-30T12:00:{i:02d}Z"} for i in range(10)))
    assert [m["content"] for m in replay(client, thread, 3, role="user")] == ["m0", "m2", "m4", "m6", "m8"]
    window = replay(client, thread, 2, since="2026-11-30T12:00:03Z", until="2026-11-30T12:00:06Z")
    assert [m["content"] for m in window] == ["m3", "m4", "m5"]
    newest = replay(client, thread, 4, order="desc")
    assert [m["content"] for m in newest] == [f"m{i}" for i in reversed(range(10))]
    # a cursor is bound to its filters
    page = client.get(f"/threads/{thread}/messages", params={"limit": 2, "role": "user"}).json()
    assert_problem(client.get(f"/threads/{thread}/messages", params={"cursor": page["next_cursor"]}), 400)


def test_twenty_concurrent_writers_leave_every_message_once_in_order(
    base_url: str, api_key: str, client: httpx.Client, graph: Graph,
) -> None:
    thread = graph.thread()["id"]
    writers, batches, per_batch = 20, 5, 4
    done = threading.Event()

    def write(w: int) -> list[int]:
        seqs: list[int] = []
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as c:
            for b in range(batches):
                r = say(c, thread, *({"role": "user", "content": f"w{w} b{b} m{i}"} for i in range(per_batch)))
                assert r.status_code == 201, r.text
                got = [m["seq"] for m in r.json()["messages"]]
                assert got == list(range(got[0], got[0] + per_batch)), "a batch takes consecutive seqs"
                seqs += got
        return seqs

    def tail() -> list[dict[str, Any]]:  # follows the conversation while it grows, from the last cursor on
        seen: list[dict[str, Any]] = []
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as c:
            cursor = None
            while True:
                finished = done.is_set()
                page = c.get(f"/threads/{thread}/messages", params={"limit": 7, **({"cursor": cursor} if cursor else {})})
                assert page.status_code == 200, page.text
                body = page.json()
                seen += body["data"]
                cursor = body["next_cursor"]
                if finished and not body["has_more"]:
                    return seen

    with ThreadPoolExecutor(writers + 1) as pool:
        reader = pool.submit(tail)
        written = [f.result() for f in [pool.submit(write, w) for w in range(writers)]]
        done.set()
        seen = reader.result(timeout=300)
    total = writers * batches * per_batch
    assert sorted(s for seqs in written for s in seqs) == list(range(1, total + 1))
    assert [m["seq"] for m in seen] == list(range(1, total + 1))
    texts = [m["content"] for m in seen]
    assert len(set(texts)) == total
    for w in range(writers):  # each writer's messages in the order it sent them
        mine = [t for t in texts if t.startswith(f"w{w} ")]
        assert mine == [f"w{w} b{b} m{i}" for b in range(batches) for i in range(per_batch)]


def test_a_retried_batch_with_the_same_idempotency_key_lands_once(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    batch = ({"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"})
    key = uid("idem")
    first = say(client, thread, *batch, **{"Idempotency-Key": key})
    again = say(client, thread, *batch, **{"Idempotency-Key": key})
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true" and again.json() == first.json()
    assert [m["content"] for m in replay(client, thread)] == ["hello", "hi"]
    other = say(client, thread, {"role": "user", "content": "something else"}, **{"Idempotency-Key": key})
    assert_problem(other, 422, "Idempotency-Key")


def test_a_one_megabyte_tool_result_is_spilled_served_by_range_and_greppable(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    lines = [f"line {i}: ok" for i in range(80_000)]
    lines[61_234] = "line 61234: FAILED test_checkout payment timeout"
    result = "\n".join(lines)
    assert len(result.encode()) > 1_000_000
    r = say(client, thread, {"role": "assistant", "content": "running the suite"},
            {"role": "tool", "content": result, "tool_call_id": "call_9"})
    assert r.status_code == 201, r.text
    small, big = replay(client, thread)
    assert small["content"] == "running the suite" and "spilled" not in small
    assert big["content"] is None and big["bytes"] == len(result.encode())
    spilled = big["spilled"]
    assert spilled["preview"].startswith("line 0: ok") and len(spilled["preview"]) <= 512
    whole = client.get(spilled["href"])
    assert whole.status_code == 200 and whole.text == result and whole.headers["content-type"].startswith("text/plain")
    tag = whole.headers["etag"]
    assert client.get(spilled["href"], headers={"If-None-Match": tag}).status_code == 304
    part = client.get(spilled["href"], headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.text == "line 0: ok"
    found = client.get(f"{spilled['href']}/grep", params={"pattern": "FAILED", "context": 1}).json()
    assert [m["line"] for m in found["matches"]] == [61_235]
    hit = found["matches"][0]
    around = client.get(spilled["href"], headers={"Range": hit["range"]}).text
    assert "payment timeout" in around and "line 61233: ok" in around


def test_bad_messages_are_refused_whole_with_nothing_written(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    assert_problem(say(client, thread, {"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}), 400)
    assert_problem(say(client, thread, {"role": "user", "content": "ok", "metadata": {"n": 1}}), 400)
    assert_problem(say(client, thread, {"role": "user", "content": "ok", "at": "yesterday"}), 400)
    assert_problem(say(client, thread, *({"role": "user", "content": "x"} for _ in range(101))), 400)
    assert_problem(client.post(f"/threads/{thread}/messages", json={"messages": []}), 400)
    assert replay(client, thread) == []
    assert_problem(say(client, uid("thr"), {"role": "user", "content": "x"}), 404)
    assert_problem(say(client, "trg_x", {"role": "user", "content": "x"}), 404, "trigger")
    assert_problem(client.get(f"/threads/{thread}/messages/1/content"), 404, "no message with seq 1")


def test_a_read_key_cannot_append(base_url: str, database_url: str, graph: Graph) -> None:
    thread = graph.thread()["id"]
    key = create_key(database_url, "default", "read")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as reader:
        assert_problem(say(reader, thread, {"role": "user", "content": "x"}), 403)
        assert reader.get(f"/threads/{thread}/messages").status_code == 200


# ---- retracting -------------------------------------------------------------------------------------------

def test_retracting_appends_and_replays_skip_unless_asked(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    say(client, thread, *({"role": "user", "content": f"m{i}"} for i in range(5)))
    popped = client.post(f"/threads/{thread}/messages/retractions", json={"newest": 1})
    assert popped.status_code == 201, popped.text
    assert popped.json()["count"] == 1 and [m["content"] for m in popped.json()["messages"]] == ["m4"]
    by_seq = client.post(f"/threads/{thread}/messages/retractions", json={"seqs": [2]}).json()
    assert by_seq["messages"][0]["content"] == "m1"
    assert [m["content"] for m in replay(client, thread)] == ["m0", "m2", "m3"]
    everything = replay(client, thread, include_retracted="true")
    assert [(m["content"], m.get("retracted", False)) for m in everything] == [
        ("m0", False), ("m1", True), ("m2", False), ("m3", False), ("m4", True)]
    # the log is append-only: every message is still there, the retractions after them
    events = client.get(f"/threads/{thread}/events").json()["data"]
    assert [e["type"] for e in events] == ["message"] * 5 + ["messages_retracted"] * 2
    # a clear takes out everything so far, and nothing appended after it
    cleared = client.post(f"/threads/{thread}/messages/retractions", json={"through": 10_000}).json()
    assert cleared["count"] == 3 and cleared["messages"] == []
    say(client, thread, {"role": "user", "content": "after the clear"})
    assert [m["content"] for m in replay(client, thread)] == ["after the clear"]
    nothing = client.post(f"/threads/{thread}/messages/retractions", json={"seqs": [1]})
    assert nothing.status_code == 200 and nothing.json()["count"] == 0  # already retracted: no new event


def test_views_skip_retracted_messages_and_the_log_marks_them(client: httpx.Client, graph: Graph) -> None:
    """The thread's view (its stored head at the default budget, its log at a large one) previews only the
    messages still in the conversation; /events keeps every event once and marks the retracted ones."""
    thread = graph.thread()["id"]
    say(client, thread, *({"role": "user", "content": f"keep {i}"} for i in range(3)),
        {"role": "assistant", "content": "a secret said by mistake"})
    assert any("secret" in e["summary"] for e in client.get(f"/threads/{thread}").json()["events"])
    assert client.post(f"/threads/{thread}/messages/retractions", json={"newest": 1}).status_code == 201
    say(client, thread, {"role": "assistant", "content": "said again, better"})
    for budget in (4096, 1_048_576):
        view = client.get(f"/threads/{thread}", params={"budget": budget}).json()
        shown = [e["summary"] for e in view["events"] if e["type"] == "message"]
        assert shown == ["user: keep 0", "user: keep 1", "user: keep 2", "assistant: said again, better"], budget
        assert view["events_total"] == 6, budget  # the log still holds all six events
    events = client.get(f"/threads/{thread}/events").json()["data"]
    assert [(e["seq"], e["type"], e.get("retracted", False)) for e in events] == [
        (1, "message", False), (2, "message", False), (3, "message", False), (4, "message", True),
        (5, "messages_retracted", False), (6, "message", False)]


def test_a_retraction_names_one_target_of_messages(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    graph.note(thread, "not a message")
    say(client, thread, {"role": "user", "content": "m"})
    assert_problem(client.post(f"/threads/{thread}/messages/retractions", json={"seqs": [1]}), 422, "seq 1")
    assert_problem(client.post(f"/threads/{thread}/messages/retractions", json={"newest": 1, "through": 2}), 422)
    assert_problem(client.post(f"/threads/{thread}/messages/retractions", json={}), 422)


def test_concurrent_pops_each_take_a_different_message(base_url: str, api_key: str, client: httpx.Client,
                                                       graph: Graph) -> None:
    thread = graph.thread()["id"]
    say(client, thread, *({"role": "user", "content": f"m{i}"} for i in range(12)))

    def pop(_: int) -> list[str]:
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as c:
            r = c.post(f"/threads/{thread}/messages/retractions", json={"newest": 1})
            assert r.status_code == 201, r.text
            return [m["content"] for m in r.json()["messages"]]

    with ThreadPoolExecutor(8) as pool:
        popped = [m for got in pool.map(pop, range(8)) for m in got]
    assert sorted(popped) == sorted(f"m{i}" for i in range(4, 12))
    assert [m["content"] for m in replay(client, thread)] == [f"m{i}" for i in range(4)]


# ---- deletion and expiry ----------------------------------------------------------------------------------

def test_deleting_the_thread_erases_its_messages_and_verify_erasure_agrees(
    client: httpx.Client, graph: Graph, database_url: str, sql: Any,
) -> None:
    thread = graph.thread()["id"]
    say(client, thread, {"role": "user", "content": "secret plan"}, {"role": "tool", "content": "x" * 20_000})
    client.post(f"/threads/{thread}/messages/retractions", json={"newest": 1})
    assert client.delete(f"/threads/{thread}").status_code == 204
    assert_problem(client.get(f"/threads/{thread}/messages"), 410)
    assert_problem(client.get(f"/threads/{thread}/messages/2/content"), 410)
    assert_problem(say(client, thread, {"role": "user", "content": "more"}), 410)
    assert sql("SELECT count(*) FROM thread_messages WHERE thread_id = $1", thread)[0][0] == 0
    assert sql("SELECT count(*) FROM message_retractions WHERE thread_id = $1", thread)[0][0] == 0
    assert "erased (no content found)" in cli(database_url, "verify-erasure", thread, "--tenant", "default")


def test_an_expired_thread_stops_serving_its_messages_at_once_and_the_sweep_erases_them(
    client: httpx.Client, graph: Graph, expire: Any, database_url: str, sql: Any,
) -> None:
    thread = graph.thread(ttl=3600)["id"]
    say(client, thread, {"role": "user", "content": "short-lived"})
    expire(thread)
    assert_problem(client.get(f"/threads/{thread}/messages"), 410)
    assert_problem(client.get(f"/threads/{thread}/messages/1/content"), 410)
    cli(database_url, "sweep")
    assert sql("SELECT count(*) FROM thread_messages WHERE thread_id = $1", thread)[0][0] == 0


@pytest.mark.parametrize("path", ["/threads/{t}/messages", "/threads/{t}/messages/1/content"])
def test_another_tenants_key_sees_no_messages(base_url: str, database_url: str, client: httpx.Client,
                                              graph: Graph, path: str) -> None:
    thread = graph.thread()["id"]
    say(client, thread, {"role": "user", "content": "mine"})
    key = create_key(database_url, uid("tn").lower().replace("_", "-"), "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as other:
        assert_problem(other.get(path.format(t=thread)), 404)


# ---- search ------------------------------------------------------------------------------------------------

def indexed(sql: Any, thread: str, timeout: float = 120) -> None:
    """Until the indexer has embedded the thread's messages, and what other tests queued before them: a search
    while the indexer works off a backlog (another module's thousand messages) waits on it for CPU."""
    deadline = time.monotonic() + timeout
    while sql("SELECT 1 FROM embedding_queue WHERE not_before <= now() LIMIT 1"):
        assert time.monotonic() < deadline, "the indexer did not drain the queue"
        time.sleep(0.1)


@pytest.fixture()
def own_tenant(base_url: str, database_url: str) -> Any:
    """A client of a tenant of its own: what other modules wrote in `default` stays out of its searches."""
    tenant = uid("srch").lower().replace("_", "-")
    key = create_key(database_url, tenant, "write")
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
        c.tenant = tenant  # type: ignore[attr-defined]
        yield c


def test_search_finds_message_content_in_every_mode_and_hops_to_it(own_tenant: httpx.Client, sql: Any) -> None:
    client, graph = own_tenant, Graph(own_tenant)
    thread = graph.thread()["id"]
    word = f"zork{uuid.uuid4().hex[:8]}"
    say(client, thread, {"role": "user", "content": "hello there"},
        {"role": "tool", "name": "ci_log", "content": f"step 3 FAILED: {word} exceeded its 30s budget"})
    indexed(sql, thread)
    assert sql("SELECT count(*) FROM embeddings WHERE object_id = $1", f"{thread}/2")[0][0] == 1
    for mode in ("exact", "lexical", "hybrid"):
        page = client.get("/search", params={"q": word, "mode": mode}).json()
        hits = [h for h in page["data"] if h["type"] == "message"]
        found = [(h["id"], h["seq"], h["thread_id"]) for h in hits]
        # hybrid adds what is near in meaning (other messages), after the one holding the word
        assert (found if mode != "hybrid" else found[:1]) == [(thread, 2, thread)], (mode, page)
        assert f"**{word}**" in hits[0]["snippet"] and hits[0]["summary"].startswith("tool ci_log: step 3 FAILED")
        assert word in client.get(hits[0]["href"]).text
    semantic = client.get("/search", params={"q": f"step 3 FAILED: {word} exceeded its 30s budget",
                                             "mode": "semantic", "type": "message", "limit": 100}).json()
    assert (thread, 2) in [(h["id"], h["seq"]) for h in semantic["data"]]
    only = client.get("/search", params={"q": word, "type": "thread", "mode": "exact"}).json()
    assert only["data"] == []


def test_retracted_and_erased_messages_leave_search(own_tenant: httpx.Client, sql: Any, database_url: str) -> None:
    client, graph = own_tenant, Graph(own_tenant)
    thread = graph.thread()["id"]
    word = f"quux{uuid.uuid4().hex[:8]}"
    say(client, thread, {"role": "user", "content": f"first {word}"}, {"role": "user", "content": f"second {word}"})
    indexed(sql, thread)
    found = lambda: sorted(h["seq"] for h in client.get("/search", params={"q": word, "mode": "exact"}).json()["data"])  # noqa: E731
    assert found() == [1, 2]
    client.post(f"/threads/{thread}/messages/retractions", json={"seqs": [2]})
    assert found() == [1]
    assert client.delete(f"/threads/{thread}").status_code == 204
    assert found() == []
    assert sql("SELECT count(*) FROM embeddings WHERE left(object_id, length($1) + 1) = $1 || '/'", thread)[0][0] == 0
    assert "erased (no content found)" in cli(database_url, "verify-erasure", thread, "--tenant", client.tenant)


# ---- grants ------------------------------------------------------------------------------------------------

def test_a_key_sees_and_writes_the_messages_of_the_threads_its_grants_cover_only(
    base_url: str, database_url: str, sql: Any,
) -> None:
    tenant = uid("msg").lower().replace("_", "-")
    service, admin = create_key(database_url, tenant, "write"), create_key(database_url, tenant, "admin")
    word = f"plugh{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {service}"}) as c, \
            httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {admin}"}) as a:
        ana_thread = c.post("/threads", json={"id": uid("thr"), "title": "t", "namespace": ["users", "ana"]}).json()["id"]
        ben_thread = c.post("/threads", json={"id": uid("thr"), "title": "t", "namespace": ["users", "ben"]}).json()["id"]
        for thread in (ana_thread, ben_thread):
            assert say(c, thread, {"role": "user", "content": f"{word} from {thread}"}).status_code == 201
        made = a.post("/admin/keys", json={"scope": "write", "subject": "user:ana",
                                           "grants": [{"namespace": "users/ana/**", "access": "write"}]})
        assert made.status_code == 201, made.text
        ana_key = made.json()["key"]
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {ana_key}"}) as ana:
        assert [m["content"] for m in replay(ana, ana_thread)] == [f"{word} from {ana_thread}"]
        assert say(ana, ana_thread, {"role": "assistant", "content": "hi Ana"}).status_code == 201
        assert_problem(ana.get(f"/threads/{ben_thread}/messages"), 404)
        assert_problem(ana.get(f"/threads/{ben_thread}/messages/1/content"), 404)
        assert say(ana, ben_thread, {"role": "user", "content": "not yours"}).status_code in (403, 404)
        assert ana.post(f"/threads/{ben_thread}/messages/retractions", json={"newest": 1}).status_code in (403, 404)
        hits = ana.get("/search", params={"q": word, "mode": "exact"}).json()["data"]
        assert [(h["id"], h["type"]) for h in hits] == [(ana_thread, "message")]
    assert sql("SELECT count(*) FROM thread_messages WHERE thread_id = $1", ben_thread)[0][0] == 1
