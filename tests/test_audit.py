"""The request audit (recall_server/service/audit.py): every write, delete, administration and search of a
tenant's keys, what each touched and returned, what became of its embeddings; in order, per tenant, within
grants, off the request path, and kept for the tenant's retention."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import ServerProcess, assert_problem, cli, create_key, run_sql, settled_rows, uid
from litestar.testing import AsyncTestClient

from recall_server import config
from recall_server.app import create_app
from recall_server.process import free_port

FLUSH = 0.5  # this module's servers' trace flush interval: pages show rows 1 s old


def settled(client: httpx.Client, count: int, timeout: float = 20, **params: Any) -> list[dict[str, Any]]:
    """Every request GET /requests lists with `params`, once `count` of them have settled (or the timeout)."""
    return settled_rows(client, "/requests", count, 200, timeout, **params)


@pytest.fixture(scope="module")
def audit_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("audit") / "server.log", RECALL_SWEEP_INTERVAL="0",
                         RECALL_TRACE_FLUSH_INTERVAL=str(FLUSH)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def tenant(audit_server: ServerProcess, database_url: str) -> dict[str, str]:
    name = f"audit-{uuid.uuid4().hex[:10]}"
    return {"name": name, "write": create_key(database_url, name, "write"),
            "admin": create_key(database_url, name, "admin")}


def client_of(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": f"Bearer {key}"})


@pytest.fixture()
def ours(audit_server: ServerProcess, tenant: dict[str, str]) -> Iterator[httpx.Client]:
    with client_of(audit_server, tenant["write"]) as c:
        yield c


def test_a_runs_writes_and_searches_are_audited_in_order_with_what_they_returned(
        ours: httpx.Client, database_url: str, tenant: dict[str, str]) -> None:
    """A run creates a thread, adds a note (the direct path), writes a memory, searches and reads: GET /requests
    ?run= lists the writes and the search in order, each with its route, status, the IDs it touched and, for
    the search, its parameters and the IDs returned best first; the reads are the trace's. The
    question itself is stored nowhere in the audit."""
    run = uid("run")
    h = {"X-Recall-Run": run}
    thread = ours.post("/threads", json={"title": "Card payment retries"}, headers=h).json()
    note = ours.post(f"/threads/{thread['id']}/events", json={"summary": "retried twice"}, headers=h)
    assert note.status_code == 201, note.text
    memory = ours.post("/memories", json={"namespace": ["ops", "pay"], "key": "retries",
                                          "value": "Card payments are retried three times"}, headers=h).json()
    question = "zanzibar-unique-question " + uuid.uuid4().hex[:6]
    searched = ours.get("/search", params={"q": "card payment retries", "mode": "lexical", "limit": 5,
                                           "rerank": "false"}, headers=h)
    assert searched.status_code == 200
    ours.get("/search", params={"q": question, "mode": "lexical"}, headers=h)
    assert ours.get(f"/threads/{thread['id']}", headers=h).status_code == 200
    missing = ours.delete("/memories/mem_neverexisted", headers=h)
    assert missing.status_code == 404

    rows = settled(ours, 6, run=run)
    assert [(r["method"], r["route"], r["status"]) for r in rows] == [
        ("POST", "/threads", 201), ("POST", "/threads/{thread_id}/events", 201), ("POST", "/memories", 201),
        ("GET", "/search", 200), ("GET", "/search", 200), ("DELETE", "/memories/{memory_id}", 404)]
    assert rows[0]["object_ids"] == [thread["id"]] and rows[1]["object_ids"] == [thread["id"]]
    assert rows[2]["object_ids"] == [memory["id"]] and rows[2]["namespace"] == "ops/pay"
    assert rows[3]["returned"] == [hit["id"] for hit in searched.json()["data"]] and thread["id"] in rows[3]["returned"]
    assert rows[3]["params"] == {"mode": "lexical", "limit": "5", "rerank": "false"}  # never the question
    assert rows[5]["object_ids"] == ["mem_neverexisted"]
    assert {r["key_id"] for r in rows} == {tenant["write"][3:19]} and all(r["run"] == run for r in rows)
    stored = run_sql(database_url, "SELECT count(*) FROM request_audit WHERE tenant_id = $1 AND "
                                   "(params::text LIKE '%zanzibar%' OR route LIKE '%zanzibar%')", tenant["name"])
    assert stored[0][0] == 0
    reads = ours.get(f"/runs/{run}/reads").json()["data"]
    assert [r["route"] for r in reads] == ["/search", "/search", "/threads/{thread_id}"]  # reads: the trace's


def test_a_tenant_that_opts_in_keeps_each_searchs_question(audit_server: ServerProcess, database_url: str) -> None:
    """`tenants audit-queries NAME on`: the searches recorded after it keep `q` in their params; off again, the
    next ones do not; another tenant's never do."""
    name = f"audit-{uuid.uuid4().hex[:10]}"
    key, other = create_key(database_url, name, "write"), create_key(database_url, f"{name}-b", "write")
    with client_of(audit_server, key) as c, client_of(audit_server, other) as b:
        def searched(client: httpx.Client, question: str) -> dict[str, Any]:
            run = uid("run")
            assert client.get("/search", params={"q": question, "mode": "lexical"},
                              headers={"X-Recall-Run": run}).status_code == 200
            return settled(client, 1, run=run)[0]["params"]

        assert "q" not in searched(c, "before opting in")
        assert "keep their question" in cli(database_url, "tenants", "audit-queries", name, "on")
        assert searched(c, "card payment retries")["q"] == "card payment retries"
        assert "q" not in searched(b, "card payment retries")
        cli(database_url, "tenants", "audit-queries", name, "off")
        assert "q" not in searched(c, "after opting out")


def test_a_request_is_found_by_its_request_id_and_by_the_ids_it_touched(ours: httpx.Client) -> None:
    rid = "audit-" + uuid.uuid4().hex
    thread = ours.post("/threads", json={"title": "found by request ID"}, headers={"X-Request-ID": rid}).json()
    deadline = time.monotonic() + 10
    while (one := ours.get(f"/requests/{rid}")).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert one.status_code == 200, one.text
    assert one.json()["object_ids"] == [thread["id"]] and one.json()["request_id"] == rid
    assert [r["request_id"] for r in settled(ours, 1, object_id=thread["id"])] == [rid]
    assert_problem(ours.get("/requests/no-such-request"), 404)
    assert_problem(ours.get("/requests/bad id"), 400)


def test_the_filters_select_by_route_status_method_key_and_time(ours: httpx.Client, tenant: dict[str, str],
                                                                audit_server: ServerProcess) -> None:
    run = uid("run")
    h = {"X-Recall-Run": run}
    ours.post("/threads", json={"title": "one"}, headers=h)
    refused = ours.post("/threads", json={"title": ""}, headers=h)
    assert refused.status_code in (400, 422)
    with client_of(audit_server, tenant["admin"]) as admin:
        made = admin.post("/admin/keys", json={"scope": "read"}, headers=h)
        assert made.status_code == 201, made.text
    rows = settled(ours, 3, run=run)
    assert len(rows) == 3
    assert [r["status"] for r in settled(ours, 1, run=run, status="4xx")] == [refused.status_code]
    assert [r["route"] for r in settled(ours, 1, run=run, route="/admin/keys")] == ["/admin/keys"]
    assert [r["key_id"] for r in settled(ours, 1, run=run, key_id=tenant["admin"][3:19])] == [tenant["admin"][3:19]]
    assert settled(ours, 0, run=run, method="DELETE", timeout=0) == []
    last = rows[-1]["at"]
    assert len(settled(ours, 3, run=run, until=last, timeout=0)) == 2
    assert len(settled(ours, 1, run=run, since=last, timeout=0)) == 1
    assert_problem(ours.get("/requests", params={"status": "6xx"}), 400)
    assert_problem(ours.get("/requests", params={"since": "yesterday"}), 400)


def test_another_tenant_sees_none_and_a_key_with_grants_sees_only_its_own(
        ours: httpx.Client, audit_server: ServerProcess, database_url: str, tenant: dict[str, str]) -> None:
    run = uid("run")
    ours.post("/threads", json={"title": "ours"}, headers={"X-Recall-Run": run})
    with client_of(audit_server, tenant["admin"]) as admin:
        granted = admin.post("/admin/keys", json={"scope": "write", "subject": "user:u1",
                                                  "grants": [{"namespace": "users/{subject_id}/**",
                                                              "access": "write"}]}).json()["key"]
    with client_of(audit_server, granted) as user:
        wrote = user.post("/memories", json={"namespace": ["users", "u1"], "key": "k", "value": "v"},
                          headers={"X-Recall-Run": run})
        assert wrote.status_code == 201, wrote.text
        mine = settled(user, 1, run=run)
        assert [(r["route"], r["subject"]) for r in mine] == [("/memories", "user:u1")]
    assert {r["route"] for r in settled(ours, 2, run=run)} == {"/threads", "/memories"}
    with client_of(audit_server, create_key(database_url, f"audit-other-{uuid.uuid4().hex[:6]}", "write")) as theirs:
        assert settled(theirs, 1, run=run, timeout=2) == []


def test_a_failed_embedding_shows_in_the_audit_of_the_write_that_queued_it(
        fresh_database: str, tmp_path: Path) -> None:
    """With an embedder that nothing answers, the audit of the write says its object's embedding is retrying,
    with the error's class; with one that works, indexed."""
    dead = f"http://127.0.0.1:{free_port()}/v1"
    server = ServerProcess(fresh_database, tmp_path / "server.log", RECALL_EMBEDDER="openai", RECALL_EMBED_URL=dead,
                           RECALL_EMBED_MODEL="m", RECALL_EMBED_DIMS="8", RECALL_SWEEP_INTERVAL="0",
                           RECALL_TRACE_FLUSH_INTERVAL=str(FLUSH)).start()
    try:
        with client_of(server, create_key(fresh_database, "default", "write")) as c:
            thread = c.post("/threads", json={"title": "embedded later"}).json()
            deadline = time.monotonic() + 30
            while True:
                rows = settled(c, 1, object_id=thread["id"])
                if rows and rows[0]["background"] and rows[0]["background"][0]["embedding"] == "retrying":
                    break
                assert time.monotonic() < deadline, rows
                time.sleep(0.2)
            assert rows[0]["background"] == [{"id": thread["id"], "embedding": "retrying", "error": "EmbedUnavailable"}]
    finally:
        server.stop()


def test_audited_writes_run_exactly_the_statements_of_the_write_and_are_written_in_one_batch(
        database_url: str) -> None:
    """In process, one pooled connection with a query logger: five writes run no statement of the audit; at
    shutdown one statement writes their five rows."""
    key = create_key(database_url, "default", "write")
    app = create_app(config.Settings(database_url=database_url, pool_min=1, pool_max=1, sweep_interval=0,
                                     trace_flush_interval=3600))
    statements: list[str] = []
    seen: dict[str, Any] = {}

    async def go() -> None:
        async with AsyncTestClient(app) as c:
            c.headers["Authorization"] = f"Bearer {key}"
            await c.post("/threads", json={"title": "warm"})
            async with app.state.service.db.pool.acquire() as conn:
                conn.add_query_logger(lambda record: statements.append(record.query))
            statements.clear()
            before = len(app.state.service.trace.requests.pending)
            for _ in range(5):
                assert (await c.post("/threads", json={"title": "audited"})).status_code == 201
            seen["during"] = list(statements)
            seen["buffered"] = len(app.state.service.trace.requests.pending) - before
            statements.clear()
        seen["written"] = list(statements)

    asyncio.run(go())
    assert seen["buffered"] == 5
    assert not [s for s in seen["during"] if "audit" in s or "record_requests" in s]
    ours = [s for s in seen["written"] if "pg_catalog" not in s and "'jit'" not in s]
    assert len(ours) == 1 and "recall_record_requests" in ours[0], seen["written"]


def test_a_401_is_not_audited_and_a_malformed_run_is_a_400(ours: httpx.Client, audit_server: ServerProcess) -> None:
    with httpx.Client(base_url=audit_server.url, timeout=10,
                      headers={"Authorization": "Bearer rk_0000000000000000.notakey"}) as forged:
        assert forged.post("/threads", json={"title": "x"}).status_code == 401
    assert_problem(ours.post("/threads", json={"title": "x"}, headers={"X-Recall-Run": "bad run"}), 400)
    assert_problem(ours.post("/triggers", json={"source": "ci", "summary": "x"}, headers={"X-Recall-Run": "bad run"}),
                   400)


def test_the_sweep_keeps_the_audit_for_the_tenants_retention(database_url: str, tenant: dict[str, str]) -> None:
    """Rows older than the tenant's audit retention go with the sweep; younger ones, and another tenant's
    within the server's default (RECALL_AUDIT_TTL, 30 days), stay."""
    other = f"audit-keep-{uuid.uuid4().hex[:6]}"
    create_key(database_url, other, "write")
    out = cli(database_url, "tenants", "audit-retention", tenant["name"], "--days", "2")
    assert "2 days" in out
    for t, age in ((tenant["name"], "3 days"), (tenant["name"], "1 day"), (other, "3 days")):
        run_sql(database_url, "INSERT INTO request_audit (tenant_id, tick, at, pos, key_id, method, route, status) "
                              f"VALUES ($1, (random() * 1e15)::bigint, now() - interval '{age}', now() - interval '{age}',"
                              " 'k', 'POST', '/swept', 201)", t)
    cli(database_url, "sweep")
    left = run_sql(database_url, "SELECT tenant_id, at > now() - interval '2 days' AS young FROM request_audit "
                                 "WHERE route = '/swept' AND tenant_id IN ($1, $2) ORDER BY 1, 2", tenant["name"], other)
    assert sorted((r[0], r[1]) for r in left) == sorted([(tenant["name"], True), (other, False)])


def test_the_client_pages_the_audit_and_finds_a_request(audit_server: ServerProcess, tenant: dict[str, str]) -> None:
    from recall_server.client import RecallClient

    run = uid("run")
    with RecallClient(audit_server.url, tenant["write"], run=run) as client:
        thread = client.create_thread(title="through the client")  # the client sends its run on writes too
        client.search("through the client", mode="lexical")
        with client_of(audit_server, tenant["write"]) as raw:
            settled(raw, 2, run=run)
        rows = list(client.iter_requests(run=run))
        assert [(r.route, r.object_ids) for r in rows] == [("/threads", [thread.id]), ("/search", [])]
        assert thread.id in (rows[1].returned or [])
        assert client.get_request(rows[0].request_id).object_ids == [thread.id]
