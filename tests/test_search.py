"""GET /search and GET /ids/{id}/backlinks against a live server: find a starting ID, then walk back along links."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime, timedelta

import httpx
from helpers import Graph, assert_problem, cli, create_key, uid


def word() -> str:
    """A token no other test uses, so a search sees only this test's objects."""
    return "w" + uuid.uuid4().hex[:12]


def hits(client: httpx.Client, **params: object) -> list[dict]:
    """A page's hits; mode=exact unless asked (these tests specify which objects match; tests/test_hybrid_search.py
    covers the ranked modes)."""
    r = client.get("/search", params={"mode": "exact", **params})
    assert r.status_code == 200, r.text
    return r.json()["data"]


def ids_of(found: list[dict]) -> list[str]:
    return [h["id"] for h in found]


# ---- search -----------------------------------------------------------------------------------


def test_search_finds_words_of_a_summary_a_payload_and_a_report_body(client: httpx.Client, graph: Graph) -> None:
    a, b, c = word(), word(), word()
    thread = graph.thread(summary=f"flaky {a} checkout")
    trigger = graph.trigger(content_type="text/plain", payload="PASSED x\n" * 500 + f"FAILED {b} timeout\n")
    worker = graph.worker()
    report = graph.report(worker["id"], thread["id"], body=f"Investigated: the {c} call times out.")
    assert ids_of(hits(client, q=a)) == [thread["id"]]
    assert ids_of(hits(client, q=b)) == [trigger["id"]]
    assert ids_of(hits(client, q=c)) == [report["id"]]
    hit = hits(client, q=b)[0]
    assert hit["type"] == "trigger" and hit["href"] == f"/triggers/{trigger['id']}" and hit["score"] > 0
    assert f"**{b}**" in hit["snippet"] and "\n" not in hit["snippet"]


def test_a_snippet_is_cut_from_the_summary_when_it_holds_the_words_else_from_the_content(
        client: httpx.Client, graph: Graph) -> None:
    """What a page of hits costs is mostly its snippets: the content (up to 64 KiB) is parsed only for a hit
    whose summary does not hold the query's words."""
    a, b = word(), word()
    payload = f"{a} appears here too, far down\n".rjust(30_000, ".") + f"and {b} only in the payload\n"
    trigger = graph.trigger(summary=f"deploy {a} finished", content_type="text/plain", payload=payload)
    in_summary, in_payload = hits(client, q=a)[0], hits(client, q=b)[0]
    assert in_summary["id"] == in_payload["id"] == trigger["id"]
    assert f"**{a}**" in in_summary["snippet"] and "far down" not in in_summary["snippet"]
    assert f"**{b}**" in in_payload["snippet"] and "only in the payload" in in_payload["snippet"]


def test_search_ranks_the_best_match_first(client: httpx.Client, graph: Graph) -> None:
    w = word()
    in_content = graph.trigger(summary="unrelated", content_type="text/plain", payload=f"{w} once\n")
    in_summary = graph.trigger(summary=f"{w} in the summary, {w} again", content_type="text/plain", payload="-")
    assert ids_of(hits(client, q=w)) == [in_summary["id"], in_content["id"]]


def test_search_matches_only_whole_web_search_queries(client: httpx.Client, graph: Graph) -> None:
    a, b = word(), word()
    both = graph.thread(summary=f"{a} {b}")
    only_a = graph.thread(summary=f"{a} alone")
    assert set(ids_of(hits(client, q=a))) == {both["id"], only_a["id"]}
    assert ids_of(hits(client, q=f"{a} {b}")) == [both["id"]]
    assert ids_of(hits(client, q=f"{a} -{b}")) == [only_a["id"]]


def test_every_filter_narrows(client: httpx.Client, graph: Graph) -> None:
    w = word()
    open_thread = graph.thread(summary=w, status="open", app_id="app-a", agent_id="ag-1", run_id="r-1")
    closed_thread = graph.thread(summary=w, status="closed")
    trigger = graph.trigger(summary=w, app_id="app-b")
    worker = graph.worker(summary=w, run_id="r-2")
    report = graph.report(worker["id"], open_thread["id"], summary=w, agent_id="ag-2")
    everything = {open_thread["id"], closed_thread["id"], trigger["id"], worker["id"], report["id"]}
    assert set(ids_of(hits(client, q=w))) == everything
    assert set(ids_of(hits(client, q=w, type="thread"))) == {open_thread["id"], closed_thread["id"]}
    assert set(ids_of(hits(client, q=w, type=["worker", "report"]))) == {worker["id"], report["id"]}
    assert ids_of(hits(client, q=w, status="closed")) == [closed_thread["id"]]
    assert ids_of(hits(client, q=w, app_id="app-b")) == [trigger["id"]]
    assert ids_of(hits(client, q=w, agent_id="ag-2")) == [report["id"]]
    assert ids_of(hits(client, q=w, run_id="r-1")) == [open_thread["id"]]
    assert set(ids_of(hits(client, q=w, app_id="*"))) == everything
    now = datetime.now(UTC)
    assert hits(client, q=w, since=(now + timedelta(minutes=5)).isoformat()) == []
    assert hits(client, q=w, until=(now - timedelta(hours=1)).isoformat()) == []
    late = graph.thread(summary=w)
    created = datetime.fromisoformat(late["created_at"])
    assert ids_of(hits(client, q=w, since=created.isoformat())) == [late["id"]]
    assert late["id"] not in ids_of(hits(client, q=w, until=created.isoformat()))


def test_deleted_and_expired_objects_disappear_from_search_at_once(
    client: httpx.Client, graph: Graph, sql
) -> None:
    w = word()
    deleted = graph.trigger(summary=w, content_type="text/plain", payload=f"{w} body")
    expiring = graph.thread(summary=w, ttl=3600)
    kept = graph.worker(summary=w)
    assert set(ids_of(hits(client, q=w))) == {deleted["id"], expiring["id"], kept["id"]}
    assert client.delete(f"/triggers/{deleted['id']}").status_code == 204
    sql("UPDATE threads SET expires_at = now() - interval '1 second' WHERE id = $1", expiring["id"])  # no sweep
    assert ids_of(hits(client, q=w)) == [kept["id"]]
    # and the deleted row keeps no terms in the index at all
    assert sql("SELECT search = ''::tsvector FROM triggers WHERE id = $1", deleted["id"])[0][0] is True


def test_another_tenants_objects_never_appear(
    client: httpx.Client, graph: Graph, base_url: str, database_url: str
) -> None:
    w = word()
    mine = graph.thread(summary=w)
    other_key = create_key(database_url, f"search-{uuid.uuid4().hex[:8]}", "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other_key}"}) as other:
        theirs = Graph(other).thread(summary=w)
        assert ids_of(hits(other, q=w)) == [theirs["id"]]
    assert ids_of(hits(client, q=w)) == [mine["id"]]


def test_pages_are_stable_while_objects_are_added(client: httpx.Client, graph: Graph) -> None:
    w = word()
    # Several objects at each of a few scores, so ties are broken by recency and ID across pages.
    made = [graph.trigger(summary=" ".join([w] * (1 + i % 3)), payload={"n": i})["id"] for i in range(14)]
    seen: list[str] = []
    r = client.get("/search", params={"mode": "exact", "q": w, "limit": 3})
    while True:
        assert r.status_code == 200, r.text
        page = r.json()
        seen += ids_of(page["data"])
        graph.trigger(summary=" ".join([w] * 3))  # a new best match arrives between pages
        graph.trigger(summary=w)
        if not page["has_more"]:
            break
        assert r.headers["link"].endswith('rel="next"')
        r = client.get("/search", params={"mode": "exact", "q": w, "limit": 3, "cursor": page["next_cursor"]})
    assert len(seen) == len(set(seen)), "nothing repeated"
    assert set(made) <= set(seen), "nothing that existed was skipped"
    scores = [h["score"] for h in hits(client, q=w, limit=100)]
    assert scores == sorted(scores, reverse=True)


def test_a_forged_or_foreign_cursor_is_a_400(client: httpx.Client, graph: Graph) -> None:
    w = word()
    for _ in range(3):
        graph.thread(summary=w)
    page = client.get("/search", params={"mode": "exact", "q": w, "limit": 1}).json()
    assert_problem(client.get("/search", params={"mode": "exact", "q": word(), "cursor": page["next_cursor"]}), 400, "cursor")
    body, mac = page["next_cursor"].split(".")
    # another MAC, still canonical base64: its first character (six whole bits) changed. (Its last two set to
    # "AA" left 1 token in 256 as it was: the last character of 16 bytes carries 2 bits, one of A, Q, g, w.)
    forged_mac = ("B" if mac[0] == "A" else "A") + mac[1:]
    assert_problem(client.get("/search", params={"mode": "exact", "q": w, "cursor": f"{body}.{forged_mac}"}), 400, "cursor")
    for score in ("sNaN", "NaN", "-Infinity", "1e999999", "x"):  # positions a forger might try: still 400s
        forged = base64.urlsafe_b64encode(json.dumps([score, "2026-01-01T00:00:00Z", "thr_x"]).encode())
        assert_problem(client.get("/search", params={"mode": "exact", "q": w, "cursor": f"{forged.decode().rstrip('=')}.{mac}"}),
                       400, "cursor")


def test_empty_blank_or_overlong_q_is_a_400_problem(client: httpx.Client) -> None:
    assert_problem(client.get("/search"), 400)
    assert_problem(client.get("/search", params={"mode": "exact", "q": ""}), 400)
    assert_problem(client.get("/search", params={"mode": "exact", "q": "   "}), 400)
    assert_problem(client.get("/search", params={"mode": "exact", "q": "x" * 257}), 400)
    assert_problem(client.get("/search", params={"mode": "exact", "q": "x", "type": "nope"}), 400)
    assert_problem(client.get("/search", params={"mode": "exact", "q": "x", "since": "yesterday"}), 400, "since")
    assert client.get("/search", params={"mode": "exact", "q": "x" * 256}).status_code == 200
    assert client.get("/search", params={"mode": "exact", "q": '"unbalanced -- or OR'}).status_code == 200


def test_verify_erasure_checks_the_search_index(client: httpx.Client, graph: Graph, database_url: str) -> None:
    w = word()
    thread = graph.thread(summary=w)
    trigger = graph.trigger(summary=w, thread_id=thread["id"], content_type="text/plain", payload=f"secret {w}")
    live = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", trigger["id"]],
                          env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert live.returncode == 1 and f"triggers: the search index still has terms of {trigger['id']}" in live.stdout
    assert client.delete(f"/threads/{thread['id']}").status_code == 204  # erases what was filed on it too
    assert "erased" in cli(database_url, "verify-erasure", thread["id"])
    assert "erased" in cli(database_url, "verify-erasure", trigger["id"])
    assert hits(client, q=w) == []


# ---- backlinks -----------------------------------------------------------------------------


def backlinks(client: httpx.Client, object_id: str, **params: object) -> list[tuple[str, str]]:
    r = client.get(f"/ids/{object_id}/backlinks", params=params)
    assert r.status_code == 200, r.text
    return [(b["relation"], b["id"]) for b in r.json()["data"]]


def test_backlinks_name_every_object_linking_to_an_id_and_how(client: httpx.Client, graph: Graph) -> None:
    worker = graph.worker()
    thread = graph.thread()
    assert client.post(f"/threads/{thread['id']}/owners", json={"worker_id": worker["id"]}).status_code == 201
    cited = graph.trigger(thread_id=thread["id"])
    neighbour_of = graph.trigger(neighbours=[cited["id"]])
    report = graph.report(worker["id"], thread["id"], refs=[cited["id"]])
    assert backlinks(client, cited["id"]) == [
        ("cites", report["id"]), ("event", thread["id"]), ("neighbour", neighbour_of["id"])]
    assert backlinks(client, thread["id"]) == sorted([("thread", cited["id"]), ("thread", report["id"])])
    assert backlinks(client, worker["id"]) == [("event", thread["id"]), ("owner", thread["id"]),
                                               ("worker", report["id"])]
    assert backlinks(client, report["id"]) == [("event", thread["id"])]
    entry = client.get(f"/ids/{cited['id']}/backlinks").json()["data"][0]
    assert entry == {"id": report["id"], "type": "report", "relation": "cites", "summary": "a report",
                     "href": f"/reports/{report['id']}"}


def test_every_view_links_to_its_backlinks(client: httpx.Client, graph: Graph) -> None:
    worker = graph.worker()
    thread = graph.thread()
    trigger = graph.trigger()
    report = graph.report(worker["id"], thread["id"])
    for obj in (worker, thread, trigger, report):
        href = obj["links"]["backlinks"]
        assert href == f"/ids/{obj['id']}/backlinks"
        assert client.get(href).status_code == 200


def test_backlinks_of_a_gone_linker_drop_out_and_of_a_gone_target_are_410(client: httpx.Client, graph: Graph) -> None:
    target = graph.trigger()
    linker = graph.trigger(neighbours=[target["id"]])
    assert backlinks(client, target["id"]) == [("neighbour", linker["id"])]
    assert client.delete(f"/triggers/{linker['id']}").status_code == 204
    assert backlinks(client, target["id"]) == []
    assert client.delete(f"/triggers/{target['id']}").status_code == 204
    assert_problem(client.get(f"/ids/{target['id']}/backlinks"), 410, target["id"])


def test_backlinks_miss_like_ids_do(client: httpx.Client, graph: Graph, base_url: str, database_url: str) -> None:
    assert_problem(client.get(f"/ids/{uid('trg')}/backlinks"), 404)
    assert_problem(client.get("/ids/nonsense/backlinks"), 404, "nonsense")
    mine = graph.thread()
    other_key = create_key(database_url, f"backlinks-{uuid.uuid4().hex[:8]}", "read")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other_key}"}) as other:
        unknown = other.get(f"/ids/{uid('thr')}/backlinks")
        foreign = other.get(f"/ids/{mine['id']}/backlinks")
    assert_problem(foreign, 404)
    assert foreign.json()["detail"] == unknown.json()["detail"].replace(unknown.json()["id"], mine["id"])


def test_backlink_paging_is_exactly_once_under_concurrent_writes(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()
    worker = graph.worker()
    target = graph.trigger()
    existing = {graph.report(worker["id"], thread["id"], refs=[target["id"]])["id"] for _ in range(12)}
    existing |= {graph.trigger(neighbours=[target["id"]])["id"] for _ in range(6)}
    stop = threading.Event()

    def write() -> None:
        with httpx.Client(base_url=str(client.base_url), headers=dict(client.headers)) as writer:
            g = Graph(writer)
            while not stop.is_set():
                g.report(worker["id"], thread["id"], refs=[target["id"]])
                g.trigger(neighbours=[target["id"]])

    writers = [threading.Thread(target=write) for _ in range(2)]
    for t in writers:
        t.start()
    try:
        seen: list[tuple[str, str]] = []
        params: dict[str, object] = {"limit": 4}
        while True:
            r = client.get(f"/ids/{target['id']}/backlinks", params=params)
            assert r.status_code == 200, r.text
            page = r.json()
            seen += [(b["relation"], b["id"]) for b in page["data"]]
            if not page["has_more"]:
                break
            params["cursor"] = page["next_cursor"]
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert len(seen) == len(set(seen)), "nothing repeated"
    assert existing <= {i for _, i in seen}, "nothing that existed was skipped"
    assert seen == sorted(seen), "in (relation, id) order"


def test_the_search_function_sees_only_the_bound_tenant_and_nothing_without_one(
    graph: Graph, database_url: str
) -> None:
    """recall_search_hits runs as the owner (to use the GIN indexes under RLS): it must take its tenant
    from the binding the key check made, never from anywhere else, and find nothing when none is bound."""
    import asyncio

    import asyncpg

    from recall_server.db.pool import as_app_role

    w = word()
    mine = graph.thread(summary=w)["id"]
    args = (w, ["thread"], None, None, None, None, None, None, None, None, None, 10, None)
    call = "SELECT hit_id FROM recall_search_hits($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"

    async def run() -> tuple[list, list, list]:
        conn = await asyncpg.connect(as_app_role(database_url))
        try:
            unbound = await conn.fetch(call, *args)
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.tenant_id', 'default', true)")
                bound = await conn.fetch(call, *args)
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.tenant_id', 'someone-else', true)")
                other = await conn.fetch(call, *args)
            return unbound, bound, other
        finally:
            await conn.close()

    unbound, bound, other = asyncio.run(run())
    assert unbound == [] and other == []
    assert [r[0] for r in bound] == [mine]


def test_search_uses_the_gin_indexes_which_rls_would_forbid(database_url: str, sql) -> None:
    """Why recall_search_hits runs as the owner: as recall_app under RLS, `search @@ query` cannot be an
    index condition (the operator is not leakproof) even with sequential scans disabled; through the
    function each table's branch is a GIN index scan."""
    import asyncio

    import asyncpg

    from recall_server.db.pool import as_app_role
    from recall_server.ids import PREFIX

    w = word()
    tenant = f"gin-{uuid.uuid4().hex[:8]}"
    sql("INSERT INTO tenants (id) VALUES ($1)", tenant)
    for kind, table, columns, values in [  # enough rows that a scan of the tenant costs more than the index
        ("thread", "threads", "title, summary, status", "'t', 'bulk thread ' || g, 'open'"),
        ("worker", "workers", "name, summary", "'w', 'bulk worker ' || g"),
        ("trigger", "triggers", "source, summary, content_type, payload, payload_sha256, occurred_at",
         "'s', 'bulk trigger ' || g, 'text/plain', '\\x', '\\x', now()"),
        ("memory", "memories", "namespace, key, pair, kind, summary, content_type, value, value_sha256, confirmed, "
         "chain, version, current", "'bulk', 'k' || g, sha256(g::text::bytea), 'fact', 'bulk memory ' || g, "
         "'application/json', '{}', '\\x', 'user', 'mem_bulk' || g, 1, true"),
    ]:
        sql(f"INSERT INTO {table} (tenant_id, id, {columns}, request_hash) SELECT $1, "
            f"'{PREFIX[kind]}_bulk' || g, {values}, '\\x' FROM generate_series(1, 3000) g", tenant)
    sql("UPDATE triggers SET summary = $2 WHERE tenant_id = $1 AND id = 'trg_bulk7'", tenant, w)
    sql("UPDATE memories SET summary = $2 WHERE tenant_id = $1 AND id = 'mem_bulk9'", tenant, w)
    for table in ("threads", "workers", "triggers", "reports", "memories"):
        sql(f"ANALYZE {table}")
    indexes = ["threads_search", "workers_search", "triggers_search", "reports_search", "memories_search"]

    async def run() -> tuple[dict[str, int], str]:
        conn = await asyncpg.connect(as_app_role(database_url))
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL enable_seqscan = off")
                await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
                hits = await conn.fetch(
                    "SELECT hit_id FROM recall_search_hits($1, ARRAY['thread', 'worker', 'trigger', 'report', 'memory'],"
                    " NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 10, NULL)", w)
                assert sorted(h[0] for h in hits) == ["mem_bulk9", "trg_bulk7"]
                scans = dict(await conn.fetch(
                    "SELECT relname, pg_stat_get_xact_numscans(oid) FROM pg_class WHERE relname = ANY($1)", indexes))
                plan = "\n".join(r[0] for r in await conn.fetch(
                    "EXPLAIN SELECT id FROM triggers WHERE tenant_id = $1 "
                    "AND search @@ websearch_to_tsquery('simple', $2)", tenant, w))
            return scans, plan
        finally:
            await conn.close()

    scans, direct = asyncio.run(run())
    assert sum(scans.values()) >= 4, "each kind's branch scanned its GIN index"
    assert scans["memories_search"] >= 1, "the memory branch too"
    assert "triggers_search" not in direct, "RLS now lets @@ use the index: recall_search_hits need not be the owner's"


# ---- memories in search and backlinks --------------------------------------------------------


def remember(client: httpx.Client, namespace: list[str], key: str, value: object, **kw: object) -> dict:
    r = client.post("/memories", json={"namespace": namespace, "key": key, "value": value, **kw})
    assert r.status_code == 201, r.text
    return r.json()


def test_search_finds_a_memory_by_its_value_summary_key_and_namespace(client: httpx.Client) -> None:
    in_value, in_text, in_summary, in_key, in_space = word(), word(), word(), word(), word()
    json_memory = remember(client, ["s", in_space], f"k-{in_key}", {"note": f"prefers {in_value} tables"},
                           summary=f"a {in_summary} preference")
    text_memory = remember(client, ["s", word()], "k", "x\n" * 100 + f"uses {in_text} daily",
                           content_type="text/plain")
    for w in (in_value, in_summary, in_key, in_space):
        assert ids_of(hits(client, q=w)) == [json_memory["id"]], w
    assert ids_of(hits(client, q=in_text)) == [text_memory["id"]]
    hit = hits(client, q=in_value, type="memory")[0]
    assert hit["type"] == "memory" and hit["href"] == f"/memories/{json_memory['id']}"
    assert f"**{in_value}**" in hit["snippet"] and "thread_id" not in hit
    assert hits(client, q=in_value, type="trigger") == []


def test_only_the_current_version_of_a_memory_is_ever_found(client: httpx.Client, sql) -> None:
    old_word, new_word, both = word(), word(), word()
    space = ["s", word()]
    first = remember(client, space, "k", {"v": f"{old_word} {both}"})
    second = remember(client, space, "k", {"v": f"{new_word} {both}"})
    assert hits(client, q=old_word) == [], "a superseded version never comes back"
    assert ids_of(hits(client, q=both)) == [second["id"]]
    assert ids_of(hits(client, q=new_word)) == [second["id"]]
    assert sql("SELECT search = ''::tsvector FROM memories WHERE id = $1", first["id"])[0][0] is True


def test_deleted_and_expired_memories_disappear_from_search_at_once(client: httpx.Client, sql) -> None:
    w = word()
    deleted = remember(client, ["s", word()], "k", {"v": w})
    expiring = remember(client, ["s", word()], "k", {"v": w}, ttl=3600)
    kept = remember(client, ["s", word()], "k", {"v": w})
    assert set(ids_of(hits(client, q=w))) == {deleted["id"], expiring["id"], kept["id"]}
    assert client.delete(f"/memories/{deleted['id']}").status_code == 204
    sql("UPDATE memories SET expires_at = now() - interval '1 second' WHERE id = $1", expiring["id"])  # no sweep
    assert ids_of(hits(client, q=w)) == [kept["id"]]
    assert sql("SELECT search = ''::tsvector FROM memories WHERE id = $1", deleted["id"])[0][0] is True


def test_another_tenants_memories_never_appear(client: httpx.Client, base_url: str, database_url: str) -> None:
    w = word()
    mine = remember(client, ["s", word()], "k", {"v": w})
    other_key = create_key(database_url, f"search-{uuid.uuid4().hex[:8]}", "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other_key}"}) as other:
        theirs = remember(other, ["s", word()], "k", {"v": w})
        assert ids_of(hits(other, q=w)) == [theirs["id"]]
        assert ids_of(hits(other, q=w, type="memory")) == [theirs["id"]]
    assert ids_of(hits(client, q=w)) == [mine["id"]]


def test_verify_erasure_checks_a_memorys_search_terms(client: httpx.Client, database_url: str) -> None:
    w = word()
    memory = remember(client, ["s", word()], "k", {"v": w})
    live = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", memory["id"]],
                          env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert live.returncode == 1 and f"memories: the search index still has terms of {memory['id']}" in live.stdout
    assert client.delete(f"/memories/{memory['id']}").status_code == 204
    assert "erased" in cli(database_url, "verify-erasure", memory["id"])


def test_a_current_memory_citing_an_id_is_its_backlink(client: httpx.Client, graph: Graph) -> None:
    trigger = graph.trigger()
    thread = graph.thread()
    space = ["s", word()]
    first = remember(client, space, "k", {"v": 1}, sources=[trigger["id"], thread["id"]], summary="learned")
    assert backlinks(client, trigger["id"]) == [("source", first["id"])]
    assert backlinks(client, thread["id"]) == [("source", first["id"])]
    entry = client.get(f"/ids/{trigger['id']}/backlinks").json()["data"][0]
    assert entry == {"id": first["id"], "type": "memory", "relation": "source", "summary": "learned",
                     "href": f"/memories/{first['id']}"}
    second = remember(client, space, "k", {"v": 2}, sources=[trigger["id"], first["id"]])
    assert backlinks(client, trigger["id"]) == [("source", second["id"])], "the superseded version drops out"
    assert backlinks(client, thread["id"]) == []
    assert backlinks(client, first["id"]) == [("source", second["id"])], "a memory can cite a memory"
    other = remember(client, ["s", word()], "k", {"v": 3}, sources=[trigger["id"]])
    assert backlinks(client, trigger["id"]) == sorted([("source", second["id"]), ("source", other["id"])])
    assert client.delete(f"/memories/{other['id']}").status_code == 204
    assert backlinks(client, trigger["id"]) == [("source", second["id"])], "a deleted memory drops out"


def test_a_memory_view_links_to_its_backlinks_and_its_notes_are_backlinks(client: httpx.Client,
                                                                          graph: Graph) -> None:
    memory = remember(client, ["s", word()], "k", {"v": 1})
    assert memory["links"]["backlinks"] == f"/ids/{memory['id']}/backlinks"
    thread = graph.thread()
    graph_note = client.post(f"/threads/{thread['id']}/events", json={"summary": "see", "ref": memory["id"]})
    assert graph_note.status_code == 201, graph_note.text
    assert backlinks(client, memory["id"]) == [("event", thread["id"])]


def test_another_tenants_memory_citing_the_same_id_is_never_a_backlink(
    client: httpx.Client, graph: Graph, base_url: str, database_url: str
) -> None:
    other_key = create_key(database_url, f"backlinks-{uuid.uuid4().hex[:8]}", "write")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other_key}"}) as other:
        theirs = Graph(other).trigger()
        remember(other, ["s", word()], "k", {"v": 1}, sources=[theirs["id"]])
        # the same ID in my tenant (IDs are per tenant)
        mine = graph.trigger(id=theirs["id"])
        assert backlinks(other, theirs["id"]) != []
    assert backlinks(client, mine["id"]) == []
