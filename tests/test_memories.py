"""Memories (mem_): versions by supersede, exactly one current version per (namespace, key) under
concurrent writers, retrieval of current versions only, expiry and deletion at once, tenancy."""

from __future__ import annotations

import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest
from helpers import Graph, ServerProcess, assert_problem, cli, create_key, expire as run_expire, uid

from recall_server import spill
from recall_server.models import Link
from recall_server.rows import MemoryRow


def ns() -> list[str]:
    """A namespace no other test uses."""
    return ["t", uuid.uuid4().hex[:12]]


def remember(client: httpx.Client, namespace: list[str], key: str, value: Any = "v", status: int = 201,
             **kw: Any) -> dict[str, Any]:
    r = client.post("/memories", json={"namespace": namespace, "key": key, "value": value, **kw})
    assert r.status_code == status, r.text
    return r.json()


def current(client: httpx.Client, namespace: list[str], key: str) -> httpx.Response:
    return client.get("/memories/current", params={"namespace": "/".join(namespace), "key": key})


def listed(client: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    """Every entry of a list, following cursors."""
    out, cursor = [], None
    while True:
        r = client.get("/memories", params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        page = r.json()
        out += page["data"]
        if not page["has_more"]:
            return out
        cursor = page["next_cursor"]


# ---- versions by supersede ------------------------------------------------------------------


def test_a_write_to_a_pair_supersedes_its_current_version(client: httpx.Client) -> None:
    space = ns()
    first = remember(client, space, "tone", {"tone": "formal"}, summary="prefers formal tone", kind="preference")
    second = remember(client, space, "tone", {"tone": "casual"}, summary="prefers casual tone", kind="preference")
    assert first["status"] == second["status"] == "current"
    assert (first["version"], second["version"]) == (1, 2)
    assert second["supersedes"] == {"id": first["id"], "summary": "prefers formal tone"}
    assert first["id"] != second["id"]

    old = client.get(f"/memories/{first['id']}")
    assert old.status_code == 200
    assert old.json()["status"] == "superseded"
    assert old.json()["superseded_by"] == {"id": second["id"], "summary": "prefers casual tone"}
    assert old.json()["value"] == {"tone": "formal"}  # a superseded version keeps its content
    assert client.get(f"/memories/{old.json()['superseded_by']['id']}").json()["status"] == "current"

    assert current(client, space, "tone").json()["id"] == second["id"]
    assert [m["id"] for m in listed(client, namespace="/".join(space))] == [second["id"]]


def test_twenty_concurrent_writers_leave_one_current_version_and_a_gap_free_chain(
    base_url: str, api_key: str, client: httpx.Client, sql
) -> None:
    space = ns()

    def write(i: int) -> httpx.Response:
        with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as c:
            return c.post("/memories", json={"namespace": space, "key": "k", "value": {"writer": i}})

    with ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(write, range(20)))
    assert [r.status_code for r in responses] == [201] * 20, [r.text for r in responses if r.status_code != 201]

    rows = sql("SELECT id, version, current, supersedes, superseded_by FROM memories"
               " WHERE tenant_id = 'default' AND namespace = $1 AND key = 'k' ORDER BY version", "/".join(space))
    assert [r["version"] for r in rows] == list(range(1, 21))
    assert [r["current"] for r in rows] == [False] * 19 + [True]
    for before, after in zip(rows, rows[1:]):
        assert after["supersedes"] == before["id"] and before["superseded_by"] == after["id"]
    assert rows[0]["supersedes"] is None and rows[-1]["superseded_by"] is None
    assert {r.json()["id"] for r in responses} == {r["id"] for r in rows}

    # The versions list pages the whole chain, newest first, each version once.
    seen, cursor = [], None
    while True:
        page = client.get(f"/memories/{rows[0]['id']}/versions",
                          params={"limit": 7, **({"cursor": cursor} if cursor else {})}).json()
        seen += page["data"]
        if not page["has_more"]:
            break
        cursor = page["next_cursor"]
    assert [v["version"] for v in seen] == list(range(20, 0, -1))
    assert [v["status"] for v in seen] == ["current"] + ["superseded"] * 19
    assert current(client, space, "k").json()["id"] == rows[-1]["id"]
    assert [m["id"] for m in listed(client, namespace="/".join(space))] == [rows[-1]["id"]]


def test_superseded_versions_never_come_back_from_lists_or_current(client: httpx.Client) -> None:
    space = ns()
    chain = [remember(client, space, key, f"{key}{n}")["id"] for n in range(3) for key in ("a", "b")]
    newest = {"a": chain[-2], "b": chain[-1]}
    entries = listed(client, namespace="/".join(space), limit=1)
    assert [(e["key"], e["id"]) for e in entries] == sorted(newest.items())
    assert all(e["value"] == f"{e['key']}2" for e in entries)
    for key, mem in newest.items():
        assert current(client, space, key).json()["id"] == mem
    r = client.get("/memories/namespaces", params={"prefix": "/".join(space)})
    assert r.status_code == 200, r.text
    assert r.json()["data"] == [space]


# ---- client-chosen IDs, idempotency, provenance ---------------------------------------------------


def test_a_client_chosen_id_is_an_idempotent_retry_with_the_same_body_and_409_with_another(
    client: httpx.Client,
) -> None:
    space, mem = ns(), uid("mem")
    first = remember(client, space, "k", "v1", id=mem)
    assert remember(client, space, "k", "v1", id=mem, status=200) == first  # not a new version
    assert_problem(client.post("/memories", json={"namespace": space, "key": "k", "value": "v2", "id": mem}), 409, mem)
    assert current(client, space, "k").json()["version"] == 1

    headers = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    body = {"namespace": space, "key": "k", "value": "v2"}
    made = client.post("/memories", json=body, headers=headers)
    again = client.post("/memories", json=body, headers=headers)
    assert made.status_code == again.status_code == 201 and again.content == made.content
    assert again.headers["idempotent-replayed"] == "true"
    assert current(client, space, "k").json()["version"] == 2


def test_sources_must_be_live_and_are_shown_as_links(client: httpx.Client, graph: Graph, sql) -> None:
    space = ns()
    trigger = graph.trigger(summary="user said: call me Sam")["id"]
    learned = remember(client, space, "name", "Sam", sources=[trigger], summary="name is Sam", confirmed="user")
    assert learned["sources"] == [{"id": trigger, "summary": "user said: call me Sam"}]
    derived = remember(client, ns(), "greeting", "Hi Sam", sources=[learned["id"], trigger])
    assert [s["id"] for s in derived["sources"]] == [learned["id"], trigger]
    assert sql("SELECT count(*) FROM memory_sources WHERE source_id = $1", trigger)[0][0] == 2  # backlinks

    dangling = uid("thr")
    r = client.post("/memories", json={"namespace": space, "key": "x", "value": 1, "sources": [dangling]})
    assert_problem(r, 422, dangling)
    assert current(client, space, "x").status_code == 404  # nothing written
    assert client.get(f"/ids/{learned['id']}").json() == {
        "id": learned["id"], "type": "memory", "href": f"/memories/{learned['id']}", "summary": "name is Sam"}


def test_a_source_of_every_kind_is_shown_with_its_summary_and_marked_once_it_is_gone(client: httpx.Client,
                                                                                    graph: Graph) -> None:
    """recall_link_of, one branch a kind: each source's own summary while it lives, `deleted` after."""
    worker, thread = graph.worker(summary="the fixer"), graph.thread(summary="PR #9")
    trigger = graph.trigger(summary="CI red")
    report = graph.report(worker["id"], graph.thread()["id"], summary="found the timeout")
    learned = remember(client, ns(), "k", "v", summary="a memory it learned from")
    sources = [worker, thread, trigger, report, learned]
    made = remember(client, ns(), "k", "v", sources=[s["id"] for s in sources])
    expected = [{"id": s["id"], "summary": s["summary"]} for s in sources]
    assert made["sources"] == client.get(f"/memories/{made['id']}").json()["sources"] == expected

    for source, collection in zip(sources, ("workers", "threads", "triggers", "reports", "memories"), strict=True):
        assert client.delete(f"/{collection}/{source['id']}").status_code == 204
    assert client.get(f"/memories/{made['id']}").json()["sources"] == [{"id": s["id"], "deleted": True}
                                                                        for s in sources]


def test_a_note_may_point_at_a_memory_and_is_marked_once_the_memory_is_deleted(client: httpx.Client,
                                                                                graph: Graph) -> None:
    thread = graph.thread()["id"]
    mem = remember(client, ns(), "k", "v", summary="learned")["id"]
    assert client.post(f"/threads/{thread}/events", json={"summary": "see memory", "ref": mem}).status_code == 201
    client.delete(f"/memories/{mem}")
    event = client.get(f"/threads/{thread}/events").json()["data"][-1]
    assert event["ref"] == mem and event["ref_deleted"] is True


def test_a_large_value_spills_and_is_served_whole_with_etag_and_range(client: httpx.Client) -> None:
    text = "remember this line\n" * 2000
    mem = remember(client, ns(), "notes", text, content_type="text/plain")
    assert "value" not in mem
    spilled = mem["spilled"]["value"]
    assert spilled["href"] == f"/memories/{mem['id']}/value" and spilled["bytes"] == len(text)
    head, skipped, tail = re.fullmatch(r"(?s)(.*)\n…\[([\d,]+) bytes skipped\]…\n(.*)", spilled["preview"]).groups()
    assert head and tail and text.startswith(head) and text.endswith(tail), "a text preview shows both ends"
    assert len(head.encode()) + int(skipped.replace(",", "")) + len(tail.encode()) == len(text)
    assert len(client.get(f"/memories/{mem['id']}").content) <= 4096

    full = client.get(spilled["href"])
    assert full.status_code == 200 and full.text == text and full.headers["etag"]
    assert client.get(spilled["href"], headers={"If-None-Match": full.headers["etag"]}).status_code == 304
    part = client.get(spilled["href"], headers={"Range": "bytes=0-17"})
    assert part.status_code == 206 and part.text == "remember this line"


# ---- expiry and deletion ------------------------------------------------------------------------


def test_an_expired_current_version_leaves_retrieval_at_once(client: httpx.Client, expire) -> None:
    space = ns()
    kept = remember(client, space, "kept", "k")
    short = remember(client, space, "short", "s", ttl=3600)
    expire(short["id"])
    assert_problem(current(client, space, "short"), 410)
    assert_problem(client.get(f"/memories/{short['id']}"), 410, short["id"])
    assert_problem(client.get(f"/memories/{short['id']}/value"), 410)
    assert [m["id"] for m in listed(client, namespace="/".join(space))] == [kept["id"]]
    # A write after expiry starts a new chain; the expired version is not superseded by it.
    again = remember(client, space, "short", "s2")
    assert again["version"] == 1 and again.get("supersedes") is None


def test_a_refresh_extends_a_memory_by_its_ttl_and_leaves_the_others(client: httpx.Client, expire,
                                                                      database_url: str, base_url: str) -> None:
    """POST /memories/refresh: a live memory written with a ttl expires that ttl from now; one without a ttl,
    an expired one, an unknown ID and another tenant's are left as they are, and not listed."""
    space = ns()
    short = remember(client, space, "short", "s", ttl=600)
    fixed = remember(client, space, "fixed", "f", expires_at=(datetime.now().astimezone() + timedelta(hours=1))
                     .isoformat())
    forever = remember(client, space, "forever", "v")
    gone = remember(client, space, "gone", "g", ttl=600)
    expire(gone["id"])
    other = create_key(database_url, f"refresh-{uuid.uuid4().hex[:12]}", "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other}"}) as theirs:
        foreign = remember(theirs, ns(), "theirs", "t", ttl=600)
    time.sleep(1.1)

    r = client.post("/memories/refresh", json={"ids": [short["id"], fixed["id"], forever["id"], gone["id"],
                                                       foreign["id"], "mem_nobody_here", short["id"]]})
    assert r.status_code == 200, r.text
    [refreshed] = r.json()["data"]
    assert refreshed["id"] == short["id"] and refreshed["expires_at"] > short["expires_at"]
    assert current(client, space, "short").json()["expires_at"] == refreshed["expires_at"]
    assert 599 <= _ts(refreshed["expires_at"]) - time.time() <= 601
    assert current(client, space, "fixed").json()["expires_at"] == fixed["expires_at"]
    assert "expires_at" not in current(client, space, "forever").json()
    assert_problem(current(client, space, "gone"), 410)
    assert_problem(client.post("/memories/refresh", json={"ids": []}), 400)
    assert_problem(client.post("/memories/refresh", json={"ids": ["thr_not_a_memory"]}), 400)


def test_deleting_a_memory_erases_every_version_of_its_pair_and_a_new_write_starts_a_new_chain(
    client: httpx.Client, database_url: str
) -> None:
    space = ns()
    idem = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    v1 = client.post("/memories", json={"namespace": space, "key": "secret", "value": "first secret",
                                        "summary": "the first", "tags": {"topic": "pii"}}, headers=idem).json()
    v2 = remember(client, space, "secret", "second secret", sources=[v1["id"]])
    assert client.delete(f"/memories/{v1['id']}").status_code == 204
    for mem in (v1, v2):
        assert_problem(client.get(f"/memories/{mem['id']}"), 410, mem["id"])
        assert_problem(client.get(f"/memories/{mem['id']}/versions"), 410)
        assert client.get(f"/ids/{mem['id']}").status_code == 410
    assert_problem(current(client, space, "secret"), 410)
    assert listed(client, namespace="/".join(space)) == []
    assert client.get("/memories/namespaces", params={"prefix": "/".join(space)}).json()["data"] == []
    replay = client.post("/memories", json={"namespace": space, "key": "secret", "value": "first secret",
                                            "summary": "the first", "tags": {"topic": "pii"}}, headers=idem)
    assert_problem(replay, 410)
    assert client.post("/memories", json={"namespace": space, "key": "x", "value": 1, "id": v1["id"]}).status_code == 409

    fresh = remember(client, space, "secret", "third")
    assert fresh["version"] == 1 and fresh.get("supersedes") is None
    assert current(client, space, "secret").json()["id"] == fresh["id"]
    assert client.delete(f"/memories/{v1['id']}").status_code == 204  # already deleted: no-op
    assert current(client, space, "secret").json()["id"] == fresh["id"]


@pytest.mark.slow
def test_verify_erasure_finds_nothing_after_a_delete_and_after_expiry_and_sweep(
    client: httpx.Client, database_url: str, sql, expire
) -> None:
    space = ns()
    v1 = remember(client, space, "k", "one", summary="one")
    v2 = remember(client, space, "k", "two", summary="two")
    client.delete(f"/memories/{v2['id']}")
    for mem in (v1, v2):
        run = _verify(database_url, mem["id"])
        assert run.returncode == 0, run.stdout + run.stderr
    rows = sql("SELECT namespace, key, summary, octet_length(value) FROM memories WHERE id = ANY($1)",
               [v1["id"], v2["id"]])
    assert [tuple(r) for r in rows] == [("", "", "", 0)] * 2

    short = remember(client, ns(), "k", "brief", ttl=3600, summary="brief")
    expire(short["id"])
    assert _verify(database_url, short["id"]).returncode == 1  # expired but not yet swept: content remains
    cli(database_url, "sweep")
    assert _verify(database_url, short["id"]).returncode == 0


def test_the_servers_own_periodic_sweep_erases_an_expired_memory_and_thread(fresh_database: str, tmp_path) -> None:
    """The serve loop's sweep (as the application role, not the owner the CLI's sweep runs as) erases expired
    memory versions and objects alike, and logs no failure."""
    log = tmp_path / "server.log"
    server = ServerProcess(fresh_database, log, RECALL_SWEEP_INTERVAL="0.3").start()
    try:
        key = create_key(fresh_database, "sweep", "write")
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            mem = remember(c, ["sweep"], "k", "brief", ttl=3600, summary="brief")["id"]
            thread = c.post("/threads", json={"title": "brief", "ttl": 3600})
            assert thread.status_code == 201, thread.text
            run_expire(fresh_database, mem, thread.json()["id"])
            deadline = time.monotonic() + 20
            while _verify(fresh_database, mem, "sweep").returncode != 0 and time.monotonic() < deadline:
                time.sleep(0.3)
            for gone in (mem, thread.json()["id"]):
                run = _verify(fresh_database, gone, "sweep")
                assert run.returncode == 0, run.stdout + log.read_text()[-2000:]
    finally:
        server.stop()
    assert "sweep failed" not in log.read_text(), log.read_text()[-2000:]


def _verify(database_url: str, mem: str, tenant: str = "default"):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", mem, "--tenant", tenant],
                          env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True, timeout=60)


def test_scratchpad_memories_take_the_tenants_default_ttl(base_url: str, database_url: str, expire) -> None:
    tenant = f"mem{uuid.uuid4().hex[:8]}"
    key = create_key(database_url, tenant, "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as c:
        pad = remember(c, ["s"], "pad", "x", kind="scratchpad")
        state = remember(c, ["s"], "state", "x", kind="state")
        fact = remember(c, ["s"], "fact", "x")
        days = (_ts(pad["expires_at"]) - time.time()) / 86400
        assert 6.9 < days <= 7.0
        assert state.get("expires_at") is None and fact.get("expires_at") is None
        cli(database_url, "tenants", "memory-ttl", tenant, "--scratchpad", "60", "--state", "3600")
        brief = remember(c, ["s"], "pad", "y", kind="scratchpad")
        assert _ts(brief["expires_at"]) - time.time() <= 60, "the tenant's scratchpad ttl, not the default"
        assert remember(c, ["s"], "state", "y", kind="state")["expires_at"] is not None
        assert remember(c, ["s"], "pad2", "z", kind="scratchpad", ttl=100)["expires_at"] != brief["expires_at"]
        expire(brief["id"])
        assert_problem(current(c, ["s"], "pad"), 410)


def _ts(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# ---- tenancy --------------------------------------------------------------------------------------


def test_tenants_have_independent_chains_and_never_see_each_others_namespaces(
    base_url: str, database_url: str, client: httpx.Client
) -> None:
    space = ns()
    ours = remember(client, space, "k", "ours")
    other_key = create_key(database_url, f"mem{uuid.uuid4().hex[:8]}", "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other_key}"}) as other:
        assert current(other, space, "k").status_code == 404
        assert other.get(f"/memories/{ours['id']}").status_code == 404
        assert other.get("/memories/namespaces", params={"prefix": space[0]}).json()["data"] == []
        assert other.get("/memories", params={"namespace": "/".join(space)}).json()["data"] == []
        theirs = remember(other, space, "k", "theirs")
        assert theirs["version"] == 1 and theirs.get("supersedes") is None
        r = other.post("/memories", json={"namespace": space, "key": "x", "value": 1, "sources": [ours["id"]]})
        assert_problem(r, 422, ours["id"])
        assert other.delete(f"/memories/{ours['id']}").status_code == 404
    assert current(client, space, "k").json()["id"] == ours["id"]
    assert remember(client, space, "k", "ours again")["version"] == 2


# ---- lists, filters, namespaces ------------------------------------------------------------------------


def test_lists_filter_by_namespace_prefix_kind_tags_labels_and_value(client: httpx.Client) -> None:
    root = uuid.uuid4().hex[:12]
    a = remember(client, [root, "u1"], "lang", {"lang": "en", "level": 2}, kind="preference",
                 tags={"topic": "lang", "src": "chat"}, app_id="app1")
    b = remember(client, [root, "u1", "deep"], "tz", "UTC", kind="fact", tags={"topic": "time"})
    c = remember(client, [root, "u2"], "lang", {"lang": "de"}, kind="preference", tags={"topic": "lang"})
    remember(client, [f"{root}x"], "other", "not under the prefix")
    remember(client, [f"{root}-x"], "other", "not under it either, though it sorts between it and root/u1")

    def ids(**params: Any) -> list[str]:
        return [m["id"] for m in listed(client, **params)]

    assert ids(namespace=root) == [a["id"], b["id"], c["id"]]
    assert ids(namespace=f"{root}/u1") == [a["id"], b["id"]]
    assert ids(namespace=root, kind="preference") == [a["id"], c["id"]]
    assert ids(namespace=root, tag="topic:lang") == [a["id"], c["id"]]
    assert ids(namespace=root, tag=["topic:lang", "src:chat"]) == [a["id"]]
    assert ids(namespace=root, app_id="app1") == [a["id"]]
    assert ids(namespace=root, value_contains='{"lang": "de"}') == [c["id"]]
    assert_problem(client.get("/memories", params={"namespace": "a//b"}), 400)
    assert_problem(client.get("/memories", params={"tag": "nocolon"}), 400)
    assert ids(namespace=root, tag=["topic:lang", "topic:time"]) == []  # one tag, two values: no memory
    assert_problem(client.get("/memories", params={"value_contains": "[1]"}), 400)


def _contains(value: Any, wanted: Any) -> bool:
    """jsonb @> on values of strings, numbers, objects and lists: the reference for value_contains."""
    if isinstance(wanted, dict):
        return isinstance(value, dict) and all(k in value and _contains(value[k], w) for k, w in wanted.items())
    if isinstance(wanted, list):
        return isinstance(value, list) and all(any(_contains(v, w) for v in value) for w in wanted)
    return type(value) is type(wanted) and value == wanted


def test_a_value_filter_matches_values_holding_nul_exactly(client: httpx.Client, sql) -> None:
    """jsonb cannot hold NUL: a value holding one no longer makes every filter under it a 400, it matches
    (or not) as its JSON says, and so does a filter asking for a NUL. U+FFFF, which stands for NUL in the
    cast, and the text "\\u0000" (an escaped backslash) are told apart from it."""
    root = uuid.uuid4().hex[:12]
    values = {
        "plain": {"a": "x", "b": "y"},
        "nul": {"a": "x", "b": "y\x00z"},
        "nul-only": {"b": "\x00"},
        "code": {"a": "x", "b": "y\uffff0z"},  # what NUL becomes in the cast
        "coded": {"b": "y\uffffez"},  # and U+FFFF
        "text": {"a": "x", "b": "y\\u0000z"},  # a backslash, then the text u0000
        "key": {"k\x00": 1, "l": ["a\x00", "b"]},
        "escaped": {},  # rewritten below as JSON text another writer could store: escapes of U+FFFF and "\\"
    }
    made = {name: remember(client, [root], name, value)["id"] for name, value in values.items()}
    escaped = r'{"b": "y\uFFFF0z", "c": "\\u0000"}'
    values["escaped"] = msgspec.json.decode(escaped)
    sql("UPDATE memories SET value = convert_to($1, 'UTF8') WHERE id = $2", escaped, made["escaped"])

    filters = [{"a": "x"}, {"b": "y"}, {"b": "y\x00z"}, {"b": "\x00"}, {"b": "y\uffff0z"}, {"b": "y\uffffez"},
               {"b": "y\\u0000z"}, {"k\x00": 1}, {"k": 1}, {"l": ["a\x00"]}, {"l": ["b"]}, {"l": ["a"]},
               {"c": "\\u0000"}, {"c": "\x00"}, {}]
    for wanted in filters:
        r = client.get("/memories", params={"namespace": root, "value_contains": msgspec.json.encode(wanted).decode()})
        assert r.status_code == 200, (wanted, r.text)
        found = {m["key"] for m in r.json()["data"]}
        assert found == {name for name, value in values.items() if _contains(value, wanted)}, wanted


def test_namespaces_list_with_prefix_suffix_and_max_depth(client: httpx.Client) -> None:
    root = uuid.uuid4().hex[:12]
    for path in ([root, "u1", "prefs"], [root, "u1", "facts"], [root, "u2", "prefs"], [root, "u2", "prefs"],
                 [f"{root}-x", "prefs"]):  # not under root, though it sorts between root and root/u1
        remember(client, path, uuid.uuid4().hex, "v")

    def names(**params: Any) -> list[list[str]]:
        out, cursor = [], None
        while True:
            page = client.get("/memories/namespaces",
                              params={**params, "limit": 1, **({"cursor": cursor} if cursor else {})}).json()
            out += page["data"]
            if not page["has_more"]:
                return out
            cursor = page["next_cursor"]

    assert names(prefix=root) == [[root, "u1", "facts"], [root, "u1", "prefs"], [root, "u2", "prefs"]]
    assert names(prefix=root, suffix="prefs") == [[root, "u1", "prefs"], [root, "u2", "prefs"]]
    assert names(prefix=root, max_depth=2) == [[root, "u1"], [root, "u2"]]
    assert names(prefix=f"{root}/u2") == [[root, "u2", "prefs"]]


# ---- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    {"namespace": [], "key": "k", "value": 1},
    {"namespace": ["a"] * 9, "key": "k", "value": 1},
    {"namespace": ["a/b"], "key": "k", "value": 1},
    {"namespace": ["a"], "key": "", "value": 1},
    {"namespace": ["a"], "key": "two\nlines", "value": 1},
    {"namespace": ["a"], "key": "k" * 257, "value": 1},
    {"namespace": ["a"], "key": "k", "value": 1, "kind": "diary"},
    {"namespace": ["a"], "key": "k", "value": 1, "confirmed": "maybe"},
    {"namespace": ["a"], "key": "k", "value": 1, "tags": {f"t{i}": "v" for i in range(17)}},
    {"namespace": ["a"], "key": "k", "value": 1, "summary": "x" * 201},
    {"namespace": ["a"], "key": "k"},
    {"namespace": ["a"], "key": "k", "value": 1, "id": "thr_wrong_kind"},
])
def test_bad_memory_bodies_are_400_and_write_nothing(client: httpx.Client, body: dict[str, Any], sql) -> None:
    before = sql("SELECT count(*) FROM memories")[0][0]
    assert_problem(client.post("/memories", json=body), 400)
    assert sql("SELECT count(*) FROM memories")[0][0] == before


def test_a_text_content_type_takes_a_string_value(client: httpx.Client) -> None:
    r = client.post("/memories", json={"namespace": ["a"], "key": "k", "value": {"x": 1}, "content_type": "text/plain"})
    assert_problem(r, 422)


# ---- the inline view ----------------------------------------------------------------------------------------


def test_the_largest_memory_fits_the_smallest_budget_with_every_linked_id() -> None:
    """Field limits (8 segments, 256-character key, 16 tags of 24/24, 8 sources) keep the core, every source
    and both neighbouring versions inside 4096 bytes; the value spills."""
    from datetime import UTC, datetime

    row = MemoryRow(
        id="mem_" + "m" * 64, namespace="/".join(["n" * 64] * 8), key="k" * 256, kind="procedure",
        summary="s" * 200, content_type="application/vnd." + "y" * 84, size=100_000, head=b"x" * 512,
        tags={f"{i:02d}" + "t" * 22: "v" * 24 for i in range(16)}, confirmed="unconfirmed", current=False,
        version=2**31 - 1, created_at=datetime.now(UTC),
        sources=[Link(id=f"thr_{i:02d}" + "a" * 62, summary="s" * 200) for i in range(8)],
        supersedes=Link(id="mem_" + "p" * 64, summary="s" * 200),
        superseded_by=Link(id="mem_" + "q" * 64, summary="s" * 200),
        app_id="a" * 64, agent_id="b" * 64, run_id="c" * 64, expires_at=datetime.now(UTC),
    )
    view = spill.memory_view(row, spill.MIN_BUDGET)
    assert len(msgspec.json.encode(view)) <= spill.MIN_BUDGET
    assert [s.id for s in view.sources] == [s.id for s in row.sources]
    assert view.supersedes.id == row.supersedes.id and view.superseded_by.id == row.superseded_by.id
    assert view.spilled.value.href == f"/memories/{row.id}/value"
    roomy = spill.memory_view(row, 64_000)
    assert all(s.summary == "s" * 200 for s in roomy.sources) and roomy.superseded_by.summary == "s" * 200


# ---- deletion against concurrent writers -----------------------------------------------------------------


def test_a_delete_racing_writers_of_its_pair_leaves_no_chain_built_on_an_erased_version(
    base_url: str, api_key: str, client: httpx.Client, sql
) -> None:
    """DELETE takes the pair's lock, as writers do: each write commits wholly before the erasure (and is erased
    with the pair) or wholly after it (and starts a new chain at version 1). Never a live version superseding
    an erased one, which a delete that only erased the versions it saw when it started could leave."""
    import hashlib
    import threading

    for _ in range(10):
        space = ns()
        first = remember(client, space, "k", {"writer": -1})
        start = threading.Barrier(12)

        def write(i: int) -> httpx.Response:
            with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as c:
                start.wait()
                if i == 5:
                    return c.delete(f"/memories/{first['id']}")
                return c.post("/memories", json={"namespace": space, "key": "k", "value": {"writer": i}})

        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(write, range(12)))
        assert sorted({r.status_code for r in answers}) in ([201, 204], [204]), [r.text for r in answers]
        pair = hashlib.sha256(f"{'/'.join(space)}\0k".encode()).digest()
        rows = sql("SELECT id, chain, version, supersedes, deleted_at IS NOT NULL AS erased FROM memories"
                   " WHERE tenant_id = 'default' AND pair = $1", pair)
        erased = {r["id"] for r in rows if r["erased"]}
        assert first["id"] in erased
        for r in rows:
            if not r["erased"]:
                assert r["supersedes"] not in erased, rows  # a live version on top of an erased one
        chains: dict[str, list[int]] = {}
        for r in rows:
            chains.setdefault(r["chain"], []).append(r["version"])
        for chain, versions in chains.items():  # each chain gap-free from 1, and erased as a whole or not at all
            assert sorted(versions) == list(range(1, len(versions) + 1)), rows
            assert len({r["erased"] for r in rows if r["chain"] == chain}) == 1, rows
        now = current(client, space, "k")
        if now.status_code == 200:
            versions = client.get(f"/memories/{now.json()['id']}/versions", params={"limit": 50}).json()["data"]
            assert [v["version"] for v in versions] == list(range(now.json()["version"], 0, -1))
            assert all(v["status"] != "deleted" for v in versions), versions
        else:
            assert_problem(now, 410)


# ---- keys that look alike ------------------------------------------------------------------------------------


def test_a_key_is_one_pair_in_any_unicode_normal_form(client: httpx.Client) -> None:
    """Keys are stored in NFC: `café` composed (U+00E9) and decomposed (e + U+0301) look identical and are one
    pair, so the second write supersedes the first and either spelling reads it."""
    space = ns()
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    first = remember(client, space, composed, 1)
    second = remember(client, space, decomposed, 2)
    assert (second["version"], second["supersedes"]["id"], second["key"]) == (2, first["id"], composed)
    for spelling in (composed, decomposed):
        assert current(client, space, spelling).json()["id"] == second["id"]
    assert [e["key"] for e in listed(client, namespace="/".join(space))] == [composed]


@pytest.mark.parametrize("key", ["tone\u200b", "tone\u00ad", "tone\ufeff", "\u2060tone", "to\u034fne", "tone\ufe0f"])
def test_a_key_with_an_invisible_character_is_400_and_writes_nothing(client: httpx.Client, sql, key: str) -> None:
    """Zero-width spaces, soft hyphens, byte order marks, word joiners, variation selectors: a key holding one
    looks like another key and is not one, so it is refused by the key's published pattern (reads as well as
    writes); text.memory_key names the character for what the pattern cannot name (astral ignorables)."""
    space = ns()
    before = sql("SELECT count(*) FROM memories")[0][0]
    problem = assert_problem(client.post("/memories", json={"namespace": space, "key": key, "value": 1}), 400)
    assert "key" in problem["detail"], problem
    assert sql("SELECT count(*) FROM memories")[0][0] == before
    assert_problem(current(client, space, key), 400)
    assert_problem(client.post("/memories", json={"namespace": ["t", "a\u200bb"], "key": "k", "value": 1}), 400)


# ---- as of a time: the version that was current then -----------------------------------------------


def test_the_current_memory_as_of_a_time_is_the_version_current_then(client: httpx.Client, sql) -> None:
    """Before the first version a miss, between versions the one current then (current, superseded by nothing
    yet), after the last the last; expired by then a 410; erased, gone at every time."""
    namespace, key = ["asof", uuid.uuid4().hex[:8]], "plan"
    first = client.post("/memories", json={"namespace": namespace, "key": key, "value": "basic"}).json()
    second = client.post("/memories", json={"namespace": namespace, "key": key, "value": "pro",
                                            "ttl": 3600}).json()
    made = {m["id"]: datetime.fromisoformat(m["created_at"]) for m in (first, second)}
    before, between = made[first["id"]] - timedelta(seconds=1), made[first["id"]] + (made[second["id"]] - made[first["id"]]) / 2
    later = made[second["id"]] + timedelta(minutes=5)

    def as_of(at: datetime) -> httpx.Response:
        return client.get("/memories/current", params={"namespace": "/".join(namespace), "key": key,
                                                       "as_of": at.isoformat()})

    assert as_of(before).status_code == 404
    then = as_of(between)
    assert then.status_code == 200, then.text
    assert (then.json()["id"], then.json()["value"], then.json()["status"]) == (first["id"], "basic", "current")
    assert "superseded_by" not in then.json() or then.json()["superseded_by"] is None
    assert as_of(later).json()["id"] == second["id"]
    assert as_of(made[second["id"]] + timedelta(hours=2)).status_code == 410  # its TTL had run out by then
    assert client.get("/memories/current", params={"namespace": "/".join(namespace), "key": key,
                                                   "as_of": "yesterday"}).status_code == 400
    assert client.delete(f"/memories/{second['id']}").status_code == 204
    for at in (between, later):
        assert as_of(at).status_code == 410  # erased: never back, at any time
