"""Reads as of an instant: memory lists, a memory's versions, search over memories and a thread's event log
answer the state that held then, at instants before, between and after versions; what is erased is gone at
every time."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import httpx
import pytest
from helpers import assert_problem


def at(value: str) -> datetime:
    return datetime.fromisoformat(value)


def mid(a: str, b: str) -> str:
    return (at(a) + (at(b) - at(a)) / 2).isoformat()


def before(a: str) -> str:
    return (at(a) - timedelta(milliseconds=1)).isoformat()


def after(a: str) -> str:
    """Just after a time shown (times are shown to the millisecond)."""
    return (at(a) + timedelta(milliseconds=1)).isoformat()


def write(client: httpx.Client, namespace: list[str], key: str, value: object, **kw: object) -> dict:
    made = client.post("/memories", json={"namespace": namespace, "key": key, "value": value, **kw})
    assert made.status_code == 201, made.text
    return made.json()


def listed(client: httpx.Client, namespace: list[str], as_of: str) -> dict[str, str]:
    page = client.get("/memories", params={"namespace": "/".join(namespace), "as_of": as_of})
    assert page.status_code == 200, page.text
    return {e["key"]: e["id"] for e in page.json()["data"]}


def versions(client: httpx.Client, memory_id: str, as_of: str) -> httpx.Response:
    return client.get(f"/memories/{memory_id}/versions", params={"as_of": as_of})


def test_a_memory_list_as_of_an_instant_has_the_versions_current_then(client: httpx.Client, expire) -> None:
    ns = ["asof", uuid.uuid4().hex[:10]]
    plan_1 = write(client, ns, "plan", "basic")
    tone = write(client, ns, "tone", "formal", ttl=3600)
    plan_2 = write(client, ns, "plan", "pro")
    gone = write(client, ns, "gone", "erased later")
    now = datetime.now().astimezone().isoformat()

    assert listed(client, ns, before(plan_1["created_at"])) == {}
    assert listed(client, ns, mid(plan_1["created_at"], tone["created_at"])) == {"plan": plan_1["id"]}
    assert listed(client, ns, mid(tone["created_at"], plan_2["created_at"])) == {"plan": plan_1["id"],
                                                                                "tone": tone["id"]}
    assert listed(client, ns, now) == {"plan": plan_2["id"], "tone": tone["id"], "gone": gone["id"]}
    entry = client.get("/memories", params={"namespace": "/".join(ns), "as_of": mid(
        tone["created_at"], plan_2["created_at"])}).json()["data"][0]
    assert (entry["key"], entry["value"], entry["version"]) == ("plan", "basic", 1)  # the value as it was

    expire(tone["id"])  # its lifetime runs out now: listed before, not after
    later = (datetime.now().astimezone() + timedelta(seconds=1)).isoformat()
    assert "tone" in listed(client, ns, now) and "tone" not in listed(client, ns, later)

    assert client.delete(f"/memories/{gone['id']}").status_code == 204
    assert "gone" not in listed(client, ns, now)  # erased: at every time
    assert "gone" not in listed(client, ns, later)
    assert_problem(client.get("/memories", params={"as_of": "last tuesday"}), 400, "as_of")


def test_a_cursor_of_a_list_as_of_an_instant_is_bound_to_it(client: httpx.Client) -> None:
    ns = ["asof", uuid.uuid4().hex[:10]]
    made = [write(client, ns, f"k{i}", i) for i in range(3)]
    then = after(made[-1]["created_at"])
    first = client.get("/memories", params={"namespace": "/".join(ns), "as_of": then, "limit": 2}).json()
    assert first["has_more"] and len(first["data"]) == 2
    rest = client.get("/memories", params={"namespace": "/".join(ns), "as_of": then, "limit": 2,
                                           "cursor": first["next_cursor"]}).json()
    assert [e["key"] for e in first["data"] + rest["data"]] == ["k0", "k1", "k2"]
    assert_problem(client.get("/memories", params={"namespace": "/".join(ns), "limit": 2,
                                                   "cursor": first["next_cursor"]}), 400)


def test_a_memorys_versions_as_of_an_instant_are_those_written_by_then_as_they_were(client: httpx.Client) -> None:
    ns = ["asof", uuid.uuid4().hex[:10]]
    v1 = write(client, ns, "plan", "basic")
    v2 = write(client, ns, "plan", "pro")
    v3 = write(client, ns, "plan", "team")

    def shown(memory_id: str, as_of: str) -> list[tuple[str, str]]:
        page = versions(client, memory_id, as_of)
        assert page.status_code == 200, page.text
        return [(v["id"], v["status"]) for v in page.json()["data"]]

    assert_problem(versions(client, v1["id"], before(v1["created_at"])), 404)  # not written yet
    assert shown(v1["id"], mid(v1["created_at"], v2["created_at"])) == [(v1["id"], "current")]
    assert_problem(versions(client, v3["id"], mid(v1["created_at"], v2["created_at"])), 404)
    assert shown(v1["id"], mid(v2["created_at"], v3["created_at"])) == [(v2["id"], "current"),
                                                                          (v1["id"], "superseded")]
    assert shown(v3["id"], after(v3["created_at"])) == [(v3["id"], "current"), (v2["id"], "superseded"),
                                                 (v1["id"], "superseded")]
    assert_problem(versions(client, v1["id"], "2026-13-01T00:00:00Z"), 400, "as_of")

    assert client.delete(f"/memories/{v1['id']}").status_code == 204
    for memory in (v1, v2, v3):  # erased: gone at every time
        assert_problem(versions(client, memory["id"], mid(v2["created_at"], v3["created_at"])), 410)


def test_a_search_as_of_an_instant_finds_the_memory_versions_current_then(client: httpx.Client) -> None:
    ns = ["asof", uuid.uuid4().hex[:10]]
    word, other = f"zq{uuid.uuid4().hex[:12]}", f"zq{uuid.uuid4().hex[:12]}"
    v1 = write(client, ns, "plan", f"plan {word}")
    v2 = write(client, ns, "plan", f"plan {other}")

    def found(q: str, as_of: str, **params: str) -> list[str]:
        page = client.get("/search", params={"q": q, "as_of": as_of, **params})
        assert page.status_code == 200, page.text
        return [h["id"] for h in page.json()["data"]]

    between = mid(v1["created_at"], v2["created_at"])
    assert found(word, before(v1["created_at"])) == []
    assert found(word, between) == [v1["id"]]  # superseded since: found as of then
    assert found(other, between) == []  # not written yet
    assert found(word, after(v2["created_at"])) == []  # superseded by then
    assert found(other, after(v2["created_at"])) == [v2["id"]]
    assert found(word, between, mode="lexical", type="memory") == [v1["id"]]
    assert_problem(client.get("/search", params={"q": word, "as_of": between, "type": "thread"}), 400, "as_of")
    assert_problem(client.get("/search", params={"q": word, "as_of": "soon"}), 400, "as_of")

    assert client.delete(f"/memories/{v2['id']}").status_code == 204
    assert found(word, between) == []  # erased with its pair: at every time


def test_a_thread_log_as_of_an_instant_has_the_events_appended_by_then(client: httpx.Client) -> None:
    thread = client.post("/threads", json={"title": "as of"}).json()["id"]
    first = client.post(f"/threads/{thread}/events", json={"summary": "first"}).json()
    said = client.post(f"/threads/{thread}/messages", json={"messages": [{"role": "user", "content": "hi"}]})
    assert said.status_code == 201, said.text
    seq = said.json()["messages"][0]["seq"] if "messages" in said.json() else said.json()["data"][0]["seq"]
    said_at = client.get(f"/threads/{thread}/events").json()["data"][-1]["at"]
    retraction = client.post(f"/threads/{thread}/messages/retractions", json={"seqs": [seq]})
    assert retraction.status_code == 201, retraction.text
    retracted_at = retraction.json()["at"]

    def log(as_of: str) -> list[tuple[int, str, bool]]:
        page = client.get(f"/threads/{thread}/events", params={"as_of": as_of})
        assert page.status_code == 200, page.text
        return [(e["seq"], e["type"], e.get("retracted", False)) for e in page.json()["data"]]

    assert log(before(first["at"])) == []
    assert log(after(first["at"])) == [(1, "note", False)]
    assert log(mid(said_at, retracted_at)) == [(1, "note", False), (seq, "message", False)]  # not retracted yet
    assert log(after(retracted_at)) == [(1, "note", False), (seq, "message", True), (seq + 1, "messages_retracted", False)]
    assert_problem(client.get(f"/threads/{thread}/events", params={"as_of": "then"}), 400, "as_of")

    assert client.delete(f"/threads/{thread}").status_code == 204
    assert_problem(client.get(f"/threads/{thread}/events", params={"as_of": first["at"]}), 410)  # at every time
