"""Keys that carry who is asking: a subject and grants (namespace patterns, read or write), enforced by
PostgreSQL's row-level security, so every route, list, search, MCP tool and store call sees only what the
key's grants cover, and an object outside them is a miss like any other (docs/tenancy.md#grants)."""

from __future__ import annotations

import asyncio
import json
import operator
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypedDict

import asyncpg
import httpx
import pytest
from helpers import ServerProcess, assert_problem, cli, create_key, run_script, uid
from test_hybrid_search import explain_buffers, lexical_hits
from test_mcp import session as mcp_session
from test_mcp import view
from test_trace import settled
from langgraph.graph import END, START, StateGraph

from recall_server import ids
from recall_server.client import RecallClient
from recall_server.db import tenancy
from recall_server.db.pool import as_app_role
from recall_server.db.queries import events as event_queries
from recall_server.langgraph import RecallSaver, RecallStore

SELF_AND_PAYMENTS = [{"namespace": "users/{subject_id}/**", "access": "write"},
                     {"namespace": "teams/payments/**", "access": "read"}]


@pytest.fixture(scope="module")
def tenant(database_url: str, server: ServerProcess) -> dict[str, str]:
    """A tenant with a key reaching all of it (no grants) and an admin key."""
    name = uid("grants").lower().replace("_", "-")
    return {"name": name, "service": create_key(database_url, name, "write"),
            "admin": create_key(database_url, name, "admin")}


@pytest.fixture()
def as_key(base_url: str) -> Iterator:
    clients: list[httpx.Client] = []

    def make(key: str) -> httpx.Client:
        c = httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {key}"})
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture()
def issue(as_key, tenant: dict[str, str]):
    """Make a key in the tenant through POST /admin/keys: (its full key, its view)."""
    admin = as_key(tenant["admin"])

    def make(subject: str | None, grants: list[dict[str, str]], scope: str = "write", label: str = "") -> str:
        r = admin.post("/admin/keys", json={"scope": scope, "subject": subject, "grants": grants, "label": label})
        assert r.status_code == 201, r.text
        return r.json()["key"]

    return make


def remember(c: httpx.Client, namespace: str, key: str, value: object, kind: str = "fact") -> httpx.Response:
    return c.post("/memories", json={"namespace": namespace.split("/"), "key": key, "value": value, "kind": kind})


def unknown_like(object_id: str) -> str:
    return object_id[:4] + "zz" + object_id[6:]


def assert_a_miss(c: httpx.Client, path: str, object_id: str) -> None:
    """`path` naming `object_id` answers exactly what it answers for an ID that never existed."""
    hidden, never = c.get(path), c.get(path.replace(object_id, unknown_like(object_id)))
    assert_problem(hidden, 404, object_id)
    assert hidden.json()["detail"] == never.json()["detail"].replace(unknown_like(object_id), object_id)
    assert hidden.json().keys() == never.json().keys()


# ---- the cases the retrieval guidance names ----------------------------------------------------------


def test_two_users_with_the_same_display_name_get_only_their_own_profile(issue, as_key) -> None:
    one, two = uid("u"), uid("u")
    alex_1 = as_key(issue(f"user:{one}", SELF_AND_PAYMENTS, label="Alex"))
    alex_2 = as_key(issue(f"user:{two}", SELF_AND_PAYMENTS, label="Alex"))
    word = uid("wombat").lower()
    first = remember(alex_1, f"users/{one}", "profile", {"name": "Alex", "likes": f"{word} tea"}, "profile")
    second = remember(alex_2, f"users/{two}", "profile", {"name": "Alex", "likes": "coffee"}, "profile")
    assert first.status_code == second.status_code == 201

    for me, mine, theirs in ((alex_1, first.json(), second.json()), (alex_2, second.json(), first.json())):
        listed = me.get("/memories", params={"namespace": "users"}).json()["data"]
        assert [m["id"] for m in listed] == [mine["id"]]
        assert me.get(f"/memories/{mine['id']}").status_code == 200
        assert_a_miss(me, f"/memories/{theirs['id']}", theirs["id"])
        assert_a_miss(me, f"/memories/{theirs['id']}/value", theirs["id"])
    for mode in ("exact", "lexical", "hybrid"):
        assert first.json()["id"] in {h["id"] for h in alex_1.get("/search", params={"q": word, "mode": mode}).json()["data"]}
        found = alex_2.get("/search", params={"q": word, "mode": mode}).json()["data"]
        assert first.json()["id"] not in {h["id"] for h in found}, mode


def test_resuming_another_subjects_thread_is_a_miss(issue, as_key) -> None:
    one, two = uid("u"), uid("u")
    mine, theirs = as_key(issue(f"user:{one}", SELF_AND_PAYMENTS)), as_key(issue(f"user:{two}", SELF_AND_PAYMENTS))
    made = mine.post("/threads", json={"title": "my conversation", "namespace": ["users", one]})
    assert made.status_code == 201, made.text
    thread = made.json()["id"]
    assert mine.post(f"/threads/{thread}/events", json={"summary": "said something private"}).status_code == 201
    for path in (f"/threads/{thread}", f"/threads/{thread}/events", f"/ids/{thread}"):
        assert mine.get(path).status_code == 200
        assert_a_miss(theirs, path, thread)
    assert_problem(theirs.post(f"/threads/{thread}/events", json={"summary": "hijack"}), 404, thread)
    assert_problem(theirs.patch(f"/threads/{thread}", json={"status": "closed"}), 404, thread)
    assert mine.get(f"/threads/{thread}").json()["events_total"] == 1


def test_another_subjects_thread_is_refused_before_any_of_its_events_are_read(
    database_url: str, tenant: dict[str, str], issue, as_key
) -> None:
    """The events read (db/queries/events.py) under each subject's binding: the policy hides the thread row
    from the other subject, and the plan never runs the node that reads its events."""
    one, two = uid("u"), uid("u")
    mine = as_key(issue(f"user:{one}", SELF_AND_PAYMENTS))
    thread = mine.post("/threads", json={"title": "t", "namespace": ["users", one]}).json()["id"]
    for i in range(20):
        mine.post(f"/threads/{thread}/events", json={"summary": f"event {i}"})
    sql = event_queries._EVENTS.bound

    def loops(node: dict, relation: str) -> list[int]:
        found = [node["Actual Loops"]] if node.get("Relation Name") == relation else []
        return found + [n for child in node.get("Plans", []) for n in loops(child, relation)]

    async def events_read(access: str) -> list[int]:
        conn = await asyncpg.connect(as_app_role(database_url))
        try:
            async with conn.transaction():
                plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", tenant["name"], access,
                                           thread, 0, 100, None)
        finally:
            await conn.close()
        return loops(json.loads(plan)[0]["Plan"], "thread_events")

    theirs = "write" + ids.grant_lines([(f"users/{two}/**", "write"), ("teams/payments/**", "read")], None)
    assert asyncio.run(events_read(theirs)) == [0]
    assert asyncio.run(events_read("write" + ids.grant_lines([(f"users/{one}/**", "write")], None))) == [1]


def test_a_read_grant_cannot_write(tenant: dict[str, str], issue, as_key) -> None:
    service = as_key(tenant["service"])
    key = uid("procedure")
    made = remember(service, "teams/payments", key, "refund in 3 steps", "procedure")
    assert made.status_code == 201
    reader = as_key(issue(f"user:{uid('u')}", SELF_AND_PAYMENTS))
    assert reader.get(f"/memories/{made.json()['id']}").status_code == 200
    for response in (remember(reader, "teams/payments", key, "refund in 1 step", "procedure"),
                     remember(reader, "teams/payments", uid("k"), "new"),
                     reader.delete(f"/memories/{made.json()['id']}")):
        assert_problem(response, 403, "teams/payments")
    current = service.get("/memories/current", params={"namespace": "teams/payments", "key": key}).json()
    assert (current["id"], current["version"]) == (made.json()["id"], 1)


def test_a_write_outside_the_grants_is_a_403_naming_the_namespace_and_writes_nothing(
    tenant: dict[str, str], issue, as_key
) -> None:
    one, two = uid("u"), uid("u")
    me = as_key(issue(f"user:{one}", SELF_AND_PAYMENTS))
    service = as_key(tenant["service"])
    assert_problem(remember(me, f"users/{two}", "profile", "planted"), 403, f"users/{two}")
    assert_problem(me.post("/threads", json={"title": "t"}), 403, "root namespace")
    assert_problem(me.post("/workers", json={"name": "w", "namespace": ["users", two]}), 403, f"users/{two}")
    assert_problem(me.post("/triggers", json={"source": "s", "summary": "s"}), 403, "root namespace")
    assert service.get("/memories", params={"namespace": f"users/{two}"}).json()["data"] == []
    assert me.post("/triggers", json={"source": "s", "summary": "s", "namespace": ["users", one]}).status_code == 201


def test_a_member_of_several_teams_searching_one_team_gets_only_its_procedures(
    tenant: dict[str, str], issue, as_key
) -> None:
    service = as_key(tenant["service"])
    word = uid("rollback").lower()
    ids = {team: remember(service, f"teams/{team}", uid("deploy"), f"{word} procedure for {team}",
                          "procedure").json()["id"] for team in ("payments", "search", "secret")}
    member = as_key(issue(f"user:{uid('u')}", [{"namespace": "teams/payments/**", "access": "read"},
                                                 {"namespace": "teams/search/**", "access": "read"}]))
    for mode in ("exact", "lexical", "hybrid"):
        # (hybrid adds what is near in meaning: other memories of the namespaces searched)
        current = {h["id"] for h in member.get("/search", params={"q": word, "mode": mode,
                                                                  "namespace": "teams/payments"}).json()["data"]}
        assert ids["payments"] in current and not current & {ids["search"], ids["secret"]}, mode
        everywhere = {h["id"] for h in member.get("/search", params={"q": word, "mode": mode}).json()["data"]}
        assert {ids["payments"], ids["search"]} <= everywhere and ids["secret"] not in everywhere, mode
    listed = member.get("/memories", params={"namespace": "teams"}).json()["data"]
    assert {m["id"] for m in listed} >= {ids["payments"], ids["search"]}
    assert ids["secret"] not in {m["id"] for m in listed}
    assert_a_miss(member, f"/memories/{ids['secret']}", ids["secret"])


@pytest.mark.slow
@pytest.mark.usefixtures("server")  # the schema
def test_a_word_only_another_subjects_memories_hold_costs_what_an_absent_word_costs(database_url: str) -> None:
    """A key with grants looks a word up among the memories of the namespaces it may read, never in everyone
    else's postings: another subject with 10x the memories, all holding a word, leaves the cost of searching it
    (buffers touched) at that of a word no one uses, and finds nothing. Written in SQL, as the bench store is:
    enough rows that the planner looks the word up in the index."""
    tenant, one, two = uid("scoped").lower().replace("_", "-"), uid("u"), uid("u")
    run_script(database_url, f"""
        INSERT INTO tenants (id) VALUES ('{tenant}');
        INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value, value_sha256,
                              confirmed, request_hash, chain, version, current)
        SELECT '{tenant}', 'mem_x' || g, ns, 'k' || g, sha256(convert_to(ns || g, 'UTF8')), 'fact', words || ' ' || g,
               'text/plain', '\\x', sha256('\\x'), 'agent', '\\x', 'mem_x' || g, 1, true
          FROM generate_series(1, 22000) g,
               LATERAL (SELECT CASE WHEN g <= 1000 THEN 'users/{one}' WHEN g <= 2000 THEN 'users/{one}/notes'
                                    ELSE 'users/{two}' END AS ns,
                               CASE WHEN g <= 2000 THEN 'ordinary event' ELSE 'zebraword event' END AS words) x;
        DELETE FROM embedding_queue WHERE tenant_id = '{tenant}';  -- not the indexer's work: other tests wait on it
        ANALYZE memories;""")
    mine = "write" + ids.grant_lines([(f"users/{one}/**", "write"), ("teams/payments/**", "read")], None)
    theirs = "write" + ids.grant_lines([(f"users/{two}/**", "write")], None)
    zebra, absent, ordinary = explain_buffers(database_url, tenant, "zebraword", "absentword" + uuid.uuid4().hex[:6],
                                              "ordinary", access=mine)
    assert zebra <= absent, (zebra, absent)
    assert ordinary > absent + 10, (ordinary, absent)  # its own word: found, and read
    [where_it_is] = explain_buffers(database_url, tenant, "zebraword", access=theirs)
    assert where_it_is > absent + 10, (where_it_is, absent)
    assert lexical_hits(database_url, tenant, "zebraword", mine, kinds=("memory",)) == []
    assert len(lexical_hits(database_url, tenant, "zebraword", theirs, kinds=("memory",))) == 200  # the depth
    assert len(lexical_hits(database_url, tenant, "ordinary", mine, kinds=("memory",))) == 200


# ---- changing grants, and revoking, hold on the next request --------------------------------------------


@pytest.mark.slow
def test_narrowed_grants_and_revocation_hold_on_the_next_request_in_every_worker_process(
    database_url: str, tenant: dict[str, str], issue, tmp_path: Path
) -> None:
    word = uid("ledger").lower()
    service_key = tenant["service"]
    key = issue(f"user:{uid('u')}", SELF_AND_PAYMENTS)
    key_id = key.split(".")[0].removeprefix("rk_")
    server = ServerProcess(database_url, tmp_path / "log", RECALL_WORKERS="2").start()
    limits = httpx.Limits(max_keepalive_connections=0)  # every request a new connection: both workers serve
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {service_key}"}) as service, \
                httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, limits=limits) as c, \
                httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {tenant['admin']}"}) as admin:
            memory = remember(service, "teams/payments", uid("k"), f"{word} close at 5pm", "procedure").json()["id"]
            assert all(c.get(f"/memories/{memory}").status_code == 200 for _ in range(10))
            assert all(c.get("/search", params={"q": word}).json()["data"] for _ in range(4))
            narrowed = admin.patch(f"/admin/keys/{key_id}", json={"grants": SELF_AND_PAYMENTS[:1]})
            assert narrowed.status_code == 200 and narrowed.json()["grants"] == SELF_AND_PAYMENTS[:1]
            assert [c.get(f"/memories/{memory}").status_code for _ in range(10)] == [404] * 10
            assert [c.get("/search", params={"q": word}).json()["data"] for _ in range(4)] == [[]] * 4
            cli(database_url, "keys", "grant", key_id, "--grant", "read:teams/payments/**")  # the CLI widens again
            assert [c.get(f"/memories/{memory}").status_code for _ in range(10)] == [200] * 10
            cli(database_url, "keys", "revoke", key_id)
            assert [c.get(f"/memories/{memory}").status_code for _ in range(10)] == [401] * 10
    finally:
        server.stop()


# ---- the admin surface --------------------------------------------------------------------------------


def test_a_key_shows_its_caller_its_subject_and_grants(issue, as_key) -> None:
    subject = f"agent:{uid('triage')}"
    me = as_key(issue(subject, SELF_AND_PAYMENTS, scope="read", label="triage agent"))
    own = me.get("/key").json()
    assert (own["subject"], own["grants"], own["scope"], own["label"]) == (
        subject, SELF_AND_PAYMENTS, "read", "triage agent")


@pytest.mark.slow
def test_keys_are_listed_with_when_they_were_last_used(tenant: dict[str, str], issue, as_key) -> None:
    key = issue("user:lister", [])
    key_id = key.split(".")[0].removeprefix("rk_")
    admin = as_key(tenant["admin"])

    def listed() -> dict:
        return next(k for k in admin.get("/admin/keys").json()["data"] if k["id"] == key_id)

    assert listed()["last_used_at"] is None
    assert as_key(key).get("/threads").status_code == 200
    deadline = time.monotonic() + 15  # each process writes its keys' use every 5 s
    while listed()["last_used_at"] is None:
        assert time.monotonic() < deadline, "last_used_at was never written"
        time.sleep(0.5)


def test_a_key_with_grants_cannot_administer_keys(issue, as_key) -> None:
    scoped_admin = as_key(issue("user:boss", SELF_AND_PAYMENTS, scope="admin"))
    assert_problem(scoped_admin.post("/admin/keys", json={"scope": "write"}), 403, "grants")
    assert_problem(scoped_admin.get("/admin/keys"), 403, "grants")


def test_grants_are_checked_when_a_key_is_made(tenant: dict[str, str], as_key, database_url: str) -> None:
    admin = as_key(tenant["admin"])
    assert_problem(admin.post("/admin/keys", json={"scope": "write", "grants": SELF_AND_PAYMENTS}), 422, "subject")
    for bad in ("users/**/x", "../etc", "users//x", "users/{name}", "/users"):
        assert_problem(admin.post("/admin/keys", json={"scope": "read", "subject": "user:x",
                                                       "grants": [{"namespace": bad, "access": "read"}]}), 400)
    assert_problem(admin.post("/admin/keys", json={"scope": "read", "subject": "no colon"}), 400)
    made = cli(database_url, "keys", "create", "--tenant", tenant["name"], "--scope", "read",
               "--subject", "team:payments", "--grant", "read:teams/{subject_id}/**")
    assert "subject team:payments" in made
    listed = cli(database_url, "keys", "list", "--tenant", tenant["name"])
    assert "team:payments: read:teams/{subject_id}/**" in listed


# ---- the same grants through the adapters ----------------------------------------------------------------


def test_mcp_tools_see_only_what_the_key_is_granted(base_url: str, tenant: dict[str, str], issue, as_key) -> None:
    one, two = uid("u"), uid("u")
    word = uid("marmot").lower()
    theirs = remember(as_key(issue(f"user:{two}", SELF_AND_PAYMENTS)), f"users/{two}", "note", f"{word} secret")
    assert theirs.status_code == 201
    key = issue(f"user:{one}", SELF_AND_PAYMENTS)

    async def go() -> None:
        async with mcp_session("http", base_url, key) as s:
            found = view(await s.call_tool("recall_search", {"q": word, "mode": "lexical"}))
            assert found["hits"] == []
            hidden = theirs.json()["id"]
            got = await s.call_tool("recall_get", {"id": hidden})
            never = await s.call_tool("recall_get", {"id": unknown_like(hidden)})
            assert got.isError and never.isError
            assert got.content[0].text == never.content[0].text.replace(unknown_like(hidden), hidden)
            wrote = await s.call_tool("recall_remember", {"namespace": ["users", two], "key": "k", "value": 1})
            assert wrote.isError and f"users/{two}" in wrote.content[0].text
            mine = await s.call_tool("recall_remember", {"namespace": ["users", one], "key": "k", "value": 1})
            assert not mine.isError, mine.content[0].text

    asyncio.run(go())


def test_the_langgraph_store_sees_only_what_the_key_is_granted(base_url: str, issue, as_key) -> None:
    one, two = uid("u"), uid("u")
    remember(as_key(issue(f"user:{two}", SELF_AND_PAYMENTS)), f"users/{two}", "prefs", {"tone": "formal"})
    with RecallStore(base_url, issue(f"user:{one}", SELF_AND_PAYMENTS)) as store:
        store.put(("users", one), "prefs", {"tone": "casual"})
        assert [i.key for i in store.search(("users",))] == ["prefs"]
        assert [i.namespace for i in store.search(("users",))] == [("users", one)]
        assert store.get(("users", two), "prefs") is None
        with pytest.raises(Exception, match=f"users/{two}"):
            store.put(("users", two), "prefs", {"tone": "rude"})


def test_idempotency_keys_of_a_key_with_grants_are_its_own(issue, as_key) -> None:
    one = uid("u")
    grants = [{"namespace": f"users/{one}/**", "access": "write"}]
    first, second = as_key(issue(f"user:{one}", grants)), as_key(issue(f"user:{one}", grants))
    body = {"namespace": ["users", one], "key": uid("k"), "value": 1}
    headers = {"Idempotency-Key": uid("idem")}
    made = first.post("/memories", json=body, headers=headers)
    again = first.post("/memories", json=body, headers=headers)
    assert made.status_code == 201 and again.json()["id"] == made.json()["id"]
    other = second.post("/memories", json={**body, "value": 2}, headers=headers)
    assert other.status_code == 201 and other.json()["id"] != made.json()["id"]


class Chat(TypedDict):
    said: Annotated[list[str], operator.add]


def chat_graph(saver: RecallSaver):
    builder = StateGraph(Chat)
    builder.add_node("echo", lambda state: {"said": [f"heard {len(state['said'])}"]})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def test_resuming_another_subjects_langgraph_thread_is_refused(base_url: str, issue) -> None:
    """A LangGraph run of one subject (RecallSaver(namespace=...) under its key): another subject's saver
    reads the thread as none, lists nothing of it, and its put to that thread_id is a 403; the owner resumes."""
    one, two = uid("u"), uid("u")
    thread = {"configurable": {"thread_id": uid("conversation")}}
    with RecallSaver(base_url, issue(f"user:{one}", SELF_AND_PAYMENTS), namespace=["users", one]) as mine:
        chat_graph(mine).invoke({"said": ["hello"]}, thread)
        with RecallSaver(base_url, issue(f"user:{two}", SELF_AND_PAYMENTS), namespace=["users", two]) as theirs:
            assert theirs.get_tuple(thread) is None
            assert list(theirs.list(thread)) == []
            with pytest.raises(Exception, match="may not write LangGraph thread"):
                chat_graph(theirs).invoke({"said": ["let me in"]}, thread)
        resumed = chat_graph(mine).invoke({"said": ["again"]}, thread)
        assert resumed["said"] == ["hello", "heard 1", "again", "heard 3"]


def test_a_langgraph_thread_outside_the_write_grants_is_a_403_naming_its_namespace(base_url: str, issue) -> None:
    with RecallSaver(base_url, issue(f"user:{uid('u')}", SELF_AND_PAYMENTS), namespace=["teams", "payments"]) as s:
        with pytest.raises(Exception, match="teams/payments"):
            chat_graph(s).invoke({"said": ["hi"]}, {"configurable": {"thread_id": uid("conversation")}})


@pytest.mark.slow
def test_the_trace_shows_a_key_with_grants_only_the_reads_of_objects_it_sees(tenant: dict[str, str], issue,
                                                                              as_key) -> None:
    service = as_key(tenant["service"])
    payments = remember(service, "teams/payments", uid("k"), "visible").json()["id"]
    secret = remember(service, "teams/secret", uid("k"), "hidden").json()["id"]
    run = uid("run")
    for path in (f"/memories/{payments}", f"/memories/{secret}", "/threads"):
        assert service.get(path, headers={"X-Recall-Run": run}).status_code == 200
    everything = settled(service, f"/runs/{run}/reads", 3)
    assert [r["object_id"] for r in everything] == [payments, secret, None]
    member = as_key(issue(f"user:{uid('u')}", SELF_AND_PAYMENTS))
    assert member.get(f"/runs/{run}/reads").json()["data"] == []  # the service key's reads: not the member's
    assert member.get(f"/ids/{payments}/reads").status_code == 200
    assert_a_miss(member, f"/ids/{secret}/reads", secret)


def test_an_objects_view_shows_its_namespace(issue, as_key) -> None:
    one = uid("u")
    me = as_key(issue(f"user:{one}", SELF_AND_PAYMENTS))
    home = ["users", one]
    thread = me.post("/threads", json={"title": "t", "namespace": home}).json()
    worker = me.post("/workers", json={"name": "w", "namespace": home}).json()
    trigger = me.post("/triggers", json={"source": "s", "summary": "s", "namespace": home}).json()
    report = me.post(f"/workers/{worker['id']}/reports",
                     json={"thread_id": thread["id"], "summary": "r", "namespace": home}).json()
    for made in (thread, worker, trigger, report):
        assert made["namespace"] == home
        assert me.get(made["links"]["self"]).json()["namespace"] == home


def test_views_show_no_linked_object_outside_the_grants(tenant: dict[str, str], issue, as_key) -> None:
    """A thread's owners and a worker's threads and reports are linked with their summaries; a key sees only
    those its grants cover, from the stored head (the default budget) as from the log (a large one)."""
    one, two = uid("u"), uid("u")
    service, alice = as_key(tenant["service"]), as_key(issue(f"user:{one}", SELF_AND_PAYMENTS))
    bob = as_key(issue(f"user:{two}", SELF_AND_PAYMENTS))
    shared = service.post("/threads", json={"title": "refund queue", "namespace": ["teams", "payments"]}).json()
    private = service.post("/threads", json={"title": "alice's", "summary": "alice's private plans",
                                             "namespace": ["users", one]}).json()
    helper = service.post("/workers", json={"name": "alice-helper", "summary": "reads alice's mail",
                                            "namespace": ["users", one]}).json()
    team = service.post("/workers", json={"name": "team-bot", "namespace": ["teams", "payments"]}).json()
    for thread, worker in ((shared, helper), (shared, team), (private, team)):
        assert service.post(f"/threads/{thread['id']}/owners", json={"worker_id": worker["id"]}).status_code == 201
    report = service.post(f"/workers/{team['id']}/reports", json={
        "thread_id": private["id"], "summary": "alice's refund is approved", "namespace": ["users", one]}).json()
    assert report.get("id"), report

    for budget in (4096, 1_048_576):
        params = {"budget": budget}
        owners = {o["id"] for o in alice.get(f"/threads/{shared['id']}", params=params).json()["owner_workers"]}
        assert owners == {helper["id"], team["id"]}, budget
        shown = bob.get(f"/threads/{shared['id']}", params=params)
        assert shown.status_code == 200 and [o["id"] for o in shown.json()["owner_workers"]] == [team["id"]], budget
        assert "alice" not in json.dumps(shown.json()["owner_workers"]), budget
        theirs, ours = bob.get(f"/workers/{team['id']}", params=params), alice.get(f"/workers/{team['id']}", params=params)
        assert {t["id"] for t in ours.json()["threads"]} == {shared["id"], private["id"]}, budget
        assert [t["id"] for t in theirs.json()["threads"]] == [shared["id"]], budget
        assert [r["id"] for r in ours.json()["reports"]] == [report["id"]], budget
        assert theirs.json()["reports"] == [] and "alice" not in theirs.text, budget
        assert (ours.json()["threads_total"], ours.json()["reports_total"]) == (2, 1), budget
        assert (theirs.json()["threads_total"], theirs.json()["reports_total"]) == (1, 0), budget  # what bob sees


def test_threads_are_listed_by_namespace_and_only_where_the_grants_reach(tenant: dict[str, str], issue, as_key,
                                                                          base_url: str) -> None:
    one, tag = uid("u"), uid("t")
    service, alice = as_key(tenant["service"]), as_key(issue(f"user:{one}", SELF_AND_PAYMENTS))
    made = {ns: service.post("/threads", json={"title": ns, "namespace": ns.split("/")}).json()["id"]
            for ns in (f"users/{one}", f"users/{one}/chats", f"users/{one}-x", f"teams/payments/{tag}",
                       f"teams/ops/{tag}")}

    def listed(c: httpx.Client, namespace: str) -> set[str]:
        page = c.get("/threads", params={"namespace": namespace, "limit": 500})
        assert page.status_code == 200, page.text
        return {t["id"] for t in page.json()["data"]}

    assert listed(service, f"users/{one}") == {made[f"users/{one}"], made[f"users/{one}/chats"]}  # not {one}-x
    assert listed(service, "teams") >= {made[f"teams/payments/{tag}"], made[f"teams/ops/{tag}"]}
    teams = listed(alice, "teams")  # teams/ops is outside alice's grants
    assert made[f"teams/payments/{tag}"] in teams and made[f"teams/ops/{tag}"] not in teams
    assert listed(alice, f"users/{one}-x") == set()
    everything = {t["id"] for t in alice.get("/threads", params={"limit": 500}).json()["data"]}
    assert everything >= {made[f"users/{one}"], made[f"teams/payments/{tag}"]}
    assert made[f"teams/ops/{tag}"] not in everything
    assert_problem(alice.get("/threads", params={"namespace": "users//x"}), 400, "namespace")
    with RecallClient(base_url, tenant["service"]) as client:
        assert {t.id for t in client.list_threads(namespace=["users", one], limit=500).data} == {
            made[f"users/{one}"], made[f"users/{one}/chats"]}


def test_filed_events_show_no_summary_of_an_object_outside_the_grants(base_url: str, tenant: dict[str, str], issue,
                                                                      as_key) -> None:
    """A thread the key sees may hold a trigger or a report filed in a namespace its grants do not cover: the
    trigger_filed and report_filed events copy that object's summary, so they show the key only its ID (the
    summary empty), in the log, in MCP's recall_events and in the thread's view, from the stored head (the
    default budget) as from the log (a large one). What the key's grants cover keeps its summary."""
    one, two = uid("u"), uid("u")
    bob_key = issue(f"user:{two}", SELF_AND_PAYMENTS)
    service, alice = as_key(tenant["service"]), as_key(issue(f"user:{one}", SELF_AND_PAYMENTS))
    bob = as_key(bob_key)
    shared = service.post("/threads", json={"title": "refund queue", "namespace": ["teams", "payments"]}).json()
    team = service.post("/workers", json={"name": "team-bot", "namespace": ["teams", "payments"]}).json()
    hidden_trigger = service.post("/triggers", json={
        "source": "bank", "summary": "alice's card was declined", "thread_id": shared["id"],
        "namespace": ["users", one]}).json()
    hidden_report = service.post(f"/workers/{team['id']}/reports", json={
        "thread_id": shared["id"], "summary": "alice's refund is approved", "namespace": ["users", one]}).json()
    seen_trigger = service.post("/triggers", json={
        "source": "bank", "summary": "the refund queue is long", "thread_id": shared["id"],
        "namespace": ["teams", "payments"]}).json()
    assert all(made.get("id") for made in (hidden_trigger, hidden_report, seen_trigger))
    filed = [(hidden_trigger["id"], "trigger_filed"), (hidden_report["id"], "report_filed"),
             (seen_trigger["id"], "trigger_filed")]

    def filed_events(c: httpx.Client) -> list[list[tuple[str, str, str]]]:
        """The filed events of the thread as its log, its default view and its largest view show them."""
        logs = [c.get(f"/threads/{shared['id']}/events").json()["data"]]
        for budget in (4096, 1_048_576):
            shown = c.get(f"/threads/{shared['id']}", params={"budget": budget})
            assert shown.status_code == 200, shown.text
            logs.append(shown.json()["events"])
        return [[(e["ref"], e["type"], e["summary"]) for e in log if e["type"].endswith("_filed")] for log in logs]

    whole = [(hidden_trigger["id"], "trigger_filed", "alice's card was declined"),
             (hidden_report["id"], "report_filed", "alice's refund is approved"),
             (seen_trigger["id"], "trigger_filed", "the refund queue is long")]
    assert filed_events(service) == [whole] * 3
    assert filed_events(alice) == [whole] * 3
    assert filed_events(bob) == [[(filed[0][0], filed[0][1], ""), (filed[1][0], filed[1][1], ""),
                                  whole[2]]] * 3
    assert "alice" not in bob.get(f"/threads/{shared['id']}/events").text
    assert "alice" not in bob.get(f"/threads/{shared['id']}", params={"budget": 1_048_576}).text

    async def over_mcp() -> dict:
        async with mcp_session("http", base_url, bob_key) as s:
            return view(await s.call_tool("recall_events", {"thread_id": shared["id"]}))

    assert [(e["ref"], e["summary"]) for e in asyncio.run(over_mcp())["data"] if e["type"].endswith("_filed")] == [
        (hidden_trigger["id"], ""), (hidden_report["id"], ""), (seen_trigger["id"], "the refund queue is long")]


def test_an_idempotency_key_slot_is_the_api_keys_own_whatever_its_scope_or_grants(tenant, issue, as_key) -> None:
    """Two keys of one tenant sending the same Idempotency-Key never see or block each other's stored response:
    a key without grants, an admin key and a key with grants each get their own write (even one that spells the
    other's old slot, `<key ID>/<Idempotency-Key>`), and each one's retry still replays its own."""
    one = uid("u")
    granted = issue(f"user:{one}", [{"namespace": f"users/{one}/**", "access": "write"}])
    scoped, service, admin = as_key(granted), as_key(tenant["service"]), as_key(tenant["admin"])
    scoped_id = ids.KEY_RE.match(granted).group(1)
    body = {"namespace": ["users", one], "key": uid("k"), "value": 1}
    same = uid("idem")

    first = scoped.post("/memories", json=body, headers={"Idempotency-Key": same})
    assert first.status_code == 201, first.text
    made = {first.json()["id"]}
    for who, key in ((service, same), (service, f"{scoped_id}/{same}"), (admin, same)):
        mine = who.post("/memories", json=body, headers={"Idempotency-Key": key})
        assert mine.status_code == 201 and "idempotent-replayed" not in mine.headers, (key, mine.text)
        assert mine.json()["id"] not in made, key
        made.add(mine.json()["id"])
        again = who.post("/memories", json=body, headers={"Idempotency-Key": key})
        assert again.headers.get("idempotent-replayed") == "true" and again.json()["id"] == mine.json()["id"]
    retry = scoped.post("/memories", json=body, headers={"Idempotency-Key": same})
    assert retry.status_code == 201 and retry.headers.get("idempotent-replayed") == "true"
    assert retry.content == first.content
    other = scoped.post("/memories", json={**body, "value": 2}, headers={"Idempotency-Key": same})
    assert_problem(other, 422, "Idempotency-Key")  # its own slot still binds it to its first request
