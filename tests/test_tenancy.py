"""Tenants, API keys and isolation: the tenant comes from the key, and PostgreSQL enforces it."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from helpers import CITUS_URL, Graph, ServerProcess, assert_problem, cli, create_key, uid

from recall_server.db import pool
from recall_server import auth
from recall_server.auth import REVOCATION_WINDOW, KeyCache
from recall_server.cli import _owner as cli_owner
from recall_server.config import Settings
from recall_server.db import queries, tenancy
from recall_server.db.pool import Database, as_app_role
from recall_server.errors import Forbidden, Unauthorized
from recall_server.service import ops


@pytest.fixture(scope="module")
def tenant_keys(database_url: str, server: ServerProcess) -> dict[str, str]:
    return {
        "a_write": create_key(database_url, "tenant-a", "write"),
        "a_read": create_key(database_url, "tenant-a", "read"),
        "a_admin": create_key(database_url, "tenant-a", "admin"),
        "b_write": create_key(database_url, "tenant-b", "write"),
        "b_admin": create_key(database_url, "tenant-b", "admin"),
    }


@pytest.fixture()
def as_key(base_url: str, tenant_keys: dict[str, str]) -> Iterator:
    clients: list[httpx.Client] = []

    def make(name: str) -> httpx.Client:
        c = httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {tenant_keys[name]}"})
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


def b_graph(c: httpx.Client) -> dict[str, str]:
    """Tenant B's objects: every kind, linked."""
    g = Graph(c)
    worker, thread = g.worker()["id"], g.thread()["id"]
    assert c.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code == 201
    trigger = g.trigger(thread_id=thread)["id"]
    report = g.report(worker, thread, refs=[trigger])["id"]
    r = c.post("/memories", json={"namespace": ["b"], "key": uid("k"), "value": 1, "sources": [report]})
    assert r.status_code == 201, r.text
    return {"worker": worker, "thread": thread, "trigger": trigger, "report": report, "memory": r.json()["id"]}


# ---- keys and scopes --------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "Bearer", "Bearer nope", "Basic dXNlcjpwdw==",
                                    "Bearer rk_0123456789abcdef." + "A" * 43])
def test_missing_malformed_or_unknown_keys_are_401_with_www_authenticate(base_url: str, header) -> None:
    headers = {"Authorization": header} if header else {}
    for method, path in (("GET", "/threads"), ("GET", f"/threads/{uid('thr')}"), ("POST", "/threads"),
                         ("GET", "/admin/keys")):
        response = httpx.request(method, base_url + path, headers=headers, json={"title": "t"})
        assert_problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")


def test_health_probes_and_the_schema_need_no_key(base_url: str) -> None:
    for path in ("/healthz", "/readyz", "/schema/openapi.json"):
        assert httpx.get(base_url + path).status_code == 200


def test_a_read_key_reads_everything_and_writes_nothing(as_key, sql) -> None:
    writer, reader = as_key("a_write"), as_key("a_read")
    thread = Graph(writer).thread()["id"]
    assert reader.get(f"/threads/{thread}").status_code == 200
    assert reader.get(f"/threads/{thread}/events").status_code == 200
    title = uid("thr")
    assert_problem(reader.post("/threads", json={"id": title, "title": "t"}), 403)
    assert_problem(reader.patch(f"/threads/{thread}", json={"status": "closed"}), 403)
    assert_problem(reader.post(f"/threads/{thread}/events", json={"summary": "s"}), 403)
    assert sql("SELECT count(*) FROM threads WHERE id = $1", title)[0][0] == 0


def test_keys_are_stored_only_as_hashes(tenant_keys: dict[str, str], sql) -> None:
    rows = [dict(r) for r in sql("SELECT * FROM api_keys")]
    dump = repr(rows)
    for key in tenant_keys.values():
        secret = key.split(".", 1)[1]
        assert secret not in dump and key not in dump
    assert all(len(r["secret_sha256"]) == 32 for r in rows)


def test_a_key_revoked_with_the_cli_is_refused_on_the_next_request(database_url: str, base_url: str) -> None:
    key = create_key(database_url, "tenant-a", "write")
    headers = {"Authorization": f"Bearer {key}"}
    assert httpx.get(base_url + "/threads", headers=headers).status_code == 200
    key_id = key.split(".")[0].removeprefix("rk_")
    assert "revoked" in cli(database_url, "keys", "revoke", key_id)
    assert_problem(httpx.get(base_url + "/threads", headers=headers), 401)
    listed = cli(database_url, "keys", "list", "--tenant", "tenant-a")
    assert key_id in listed and key.split(".", 1)[1] not in listed


@pytest.mark.slow
def test_revocation_reaches_every_worker_process(database_url: str, tmp_path: Path) -> None:
    key = create_key(database_url, "tenant-a", "write")
    server = ServerProcess(database_url, tmp_path / "log", RECALL_WORKERS="2").start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            assert all(c.get("/threads").status_code == 200 for _ in range(10))
            cli(database_url, "keys", "revoke", key.split(".")[0].removeprefix("rk_"))
            assert [c.get("/threads").status_code for _ in range(10)] == [401] * 10
    finally:
        server.stop()


@pytest.mark.parametrize("by", ["api", "cli"])
def test_a_revoke_returns_only_once_no_process_relies_on_an_earlier_check(
    as_key, base_url: str, database_url: str, by: str
) -> None:
    """Each process may rely on a check of a key for REVOCATION_WINDOW (auth.KeyCache): a revoke waits that
    out after it commits, so the request after it is refused however recently its key was checked. The
    CLI's revoke runs in process (cli._owner, the CLI's runner): its start-up takes longer than the window."""
    made = as_key("a_admin").post("/admin/keys", json={"scope": "read"}).json()
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {made['key']}"}) as fresh:
        assert fresh.get("/threads").status_code == 200  # checked, and remembered by the process that served it
        started = time.monotonic()
        if by == "api":
            assert as_key("a_admin").delete(f"/admin/keys/{made['id']}").json()["revoked_at"]
        else:
            revoked = cli_owner(Settings(database_url=database_url), lambda conn: ops.revoke_key(conn, made["id"]))
            assert revoked.revoked_at
        assert time.monotonic() - started >= REVOCATION_WINDOW
        assert_problem(fresh.get("/threads"), 401)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_remembered_check_binds_its_own_tenant_and_scope_and_only_within_the_window(
    database_url: str, tenant_keys: dict[str, str]
) -> None:
    """The statements behind a remembered check (tenancy.BOUND) bind the tenant and scope the key's last
    check found, for REVOCATION_WINDOW after that check was sent; then the key is looked up again. A key
    revoked straight in api_keys, bypassing the revoke's wait, shows how long a process relies on it."""
    key = create_key(database_url, "tenant-a", "read")
    clock = Clock()
    keys = KeyCache(clock=clock)
    cred = auth.parse(f"Bearer {key}", keys)
    forged = auth.parse(f"Bearer {key[:-1]}{'B' if key[-1] == 'A' else 'A'}", keys)  # same ID, another secret

    async def run() -> None:
        db = await Database.open(as_app_role(database_url), min_size=1, max_size=1, timeout=10,
                                 queue_limit=4, queue_wait=1)
        try:
            async with db.connection() as conn:
                assert (await queries.own_key(conn, cred)).tenant == "tenant-a"  # looked up, then remembered
                assert keys.get(cred) == ("tenant-a", "read")
                owner = await asyncpg.connect(database_url)
                try:
                    assert await owner.execute("UPDATE api_keys SET revoked_at = now() WHERE id = $1",
                                               cred.key_id) == "UPDATE 1"
                finally:
                    await owner.close()
                clock.now = REVOCATION_WINDOW / 2
                assert (await queries.own_key(conn, cred)).tenant == "tenant-a"  # bound, not looked up
                with pytest.raises(Unauthorized):
                    await queries.own_key(conn, forged)  # the same key ID with another secret is looked up: 401
            with pytest.raises(Forbidden):  # the remembered scope decides, as the looked-up one would
                async with tenancy.session(db, cred, "write"):
                    pass
            clock.now = REVOCATION_WINDOW  # a window after the check was sent
            assert keys.get(cred) is None
            async with db.connection() as conn:
                with pytest.raises(Unauthorized):
                    await queries.own_key(conn, cred)
        finally:
            await db.close()

    asyncio.run(run())


def test_the_remembered_checks_are_bounded_and_the_oldest_goes_first() -> None:
    clock = Clock()
    keys = KeyCache(size=2, clock=clock)
    a, b, c = (auth.Credential(n * 16, bytes(32)) for n in "abc")
    keys.put(a, clock.now, "t", "read")
    keys.put(b, clock.now, "t", "read")
    keys.put(a, clock.now, "t", "write")  # checked again: the newest now
    keys.put(c, clock.now, "t", "read")
    assert (keys.get(a), keys.get(b), keys.get(c)) == (("t", "write"), None, ("t", "read"))
    assert len(keys.checked) == 2


def test_admin_endpoints_manage_keys_within_the_tenant_only(as_key, base_url: str) -> None:
    admin_a, admin_b = as_key("a_admin"), as_key("b_admin")
    made = admin_a.post("/admin/keys", json={"scope": "read", "label": "ci reader"})
    assert made.status_code == 201
    new = made.json()
    assert new["tenant"] == "tenant-a" and new["key"].startswith("rk_")
    listed = admin_a.get("/admin/keys").json()["data"]
    assert new["id"] in [k["id"] for k in listed]
    assert all("key" not in k and k["tenant"] == "tenant-a" for k in listed)
    assert new["id"] not in [k["id"] for k in admin_b.get("/admin/keys").json()["data"]]
    assert_problem(admin_b.delete(f"/admin/keys/{new['id']}"), 404)
    fresh = {"Authorization": f"Bearer {new['key']}"}
    assert httpx.get(base_url + "/threads", headers=fresh).status_code == 200
    assert admin_a.delete(f"/admin/keys/{new['id']}").json()["revoked_at"]
    assert_problem(httpx.get(base_url + "/threads", headers=fresh), 401)


def test_only_admin_keys_manage_keys(as_key) -> None:
    assert_problem(as_key("a_write").get("/admin/keys"), 403)
    assert_problem(as_key("a_write").post("/admin/keys", json={"scope": "admin"}), 403)


@pytest.mark.parametrize(("name", "tenant", "scope"), [("a_read", "tenant-a", "read"), ("b_write", "tenant-b", "write"),
                                                       ("a_admin", "tenant-a", "admin")])
def test_any_key_reads_its_own_key_and_nothing_of_its_secret(as_key, tenant_keys, name, tenant, scope) -> None:
    response = as_key(name).get("/key")
    assert response.status_code == 200, response.text
    own = response.json()
    assert (own["tenant"], own["scope"], own["revoked_at"]) == (tenant, scope, None)
    assert tenant_keys[name].startswith(f"rk_{own['id']}.")
    assert tenant_keys[name].split(".")[1] not in response.text


# ---- cross-tenant access is a miss ----------------------------------------------------------


def test_every_get_of_another_tenants_id_is_a_404_like_any_miss(as_key) -> None:
    a, b = as_key("a_write"), as_key("b_write")
    theirs = b_graph(b)
    paths = [f"/threads/{theirs['thread']}", f"/threads/{theirs['thread']}/events",
             f"/workers/{theirs['worker']}", f"/workers/{theirs['worker']}/reports",
             f"/triggers/{theirs['trigger']}", f"/triggers/{theirs['trigger']}/payload",
             f"/reports/{theirs['report']}", f"/reports/{theirs['report']}/body",
             f"/memories/{theirs['memory']}", f"/memories/{theirs['memory']}/value",
             f"/memories/{theirs['memory']}/versions",
             *(f"/ids/{v}" for v in theirs.values())]
    for path in paths:
        assert b.get(path).status_code == 200, path
        cross = a.get(path)
        value = path.split("/")[2]
        never_existed = a.get(path.replace(value, value[:4] + "zz" + value[6:]))
        assert_problem(cross, 404, value)
        assert cross.json()["detail"] == never_existed.json()["detail"].replace(value[:4] + "zz" + value[6:], value)
        assert cross.json().keys() == never_existed.json().keys()


def test_writes_aimed_at_another_tenants_ids_are_misses(as_key) -> None:
    a, b = as_key("a_write"), as_key("b_write")
    theirs = b_graph(b)
    mine = Graph(a)
    my_worker, my_thread = mine.worker()["id"], mine.thread()["id"]
    assert_problem(a.patch(f"/threads/{theirs['thread']}", json={"status": "hijacked"}), 404)
    assert_problem(a.post(f"/threads/{theirs['thread']}/events", json={"summary": "x"}), 404)
    assert_problem(a.post(f"/threads/{theirs['thread']}/owners", json={"worker_id": my_worker}), 404)
    assert_problem(a.post(f"/workers/{theirs['worker']}/reports", json={"thread_id": my_thread, "summary": "x"}), 404)
    assert b.get(f"/threads/{theirs['thread']}").json()["status"] == "open"
    assert b.get(f"/threads/{theirs['thread']}").json()["events_total"] == 3


def test_linking_to_another_tenants_ids_is_a_dangling_link(as_key) -> None:
    a, b = as_key("a_write"), as_key("b_write")
    theirs = b_graph(b)
    mine = Graph(a)
    my_worker, my_thread = mine.worker()["id"], mine.thread()["id"]
    for response in (
        a.post("/triggers", json={"source": "s", "summary": "s", "thread_id": theirs["thread"]}),
        a.post("/triggers", json={"source": "s", "summary": "s", "neighbours": [theirs["trigger"]]}),
        a.post(f"/threads/{my_thread}/owners", json={"worker_id": theirs["worker"]}),
        a.post(f"/workers/{my_worker}/reports", json={"thread_id": theirs["thread"], "summary": "s"}),
        a.post(f"/workers/{my_worker}/reports", json={"thread_id": my_thread, "summary": "s",
                                                      "refs": [theirs["trigger"]]}),
        a.post(f"/threads/{my_thread}/events", json={"summary": "s", "ref": theirs["report"]}),
        a.post(f"/threads/{my_thread}/events", json={"summary": "s", "ref": theirs["memory"]}),
        a.post("/memories", json={"namespace": ["a"], "key": "k", "value": 1, "sources": [theirs["memory"]]}),
    ):
        assert_problem(response, 422)


def test_two_tenants_may_each_own_the_same_natural_key(as_key) -> None:
    a, b = as_key("a_write"), as_key("b_write")
    shared = uid("thr")
    assert a.post("/threads", json={"id": shared, "title": "tenant a's PR"}).status_code == 201
    assert b.post("/threads", json={"id": shared, "title": "tenant b's PR"}).status_code == 201
    assert a.get(f"/threads/{shared}").json()["title"] == "tenant a's PR"
    assert b.get(f"/threads/{shared}").json()["title"] == "tenant b's PR"


def test_lists_show_only_the_callers_tenant(as_key) -> None:
    a, b = as_key("a_write"), as_key("b_write")
    theirs = b_graph(b)
    listed = a.get("/threads", params={"limit": 500}).json()["data"]
    assert theirs["thread"] not in [t["id"] for t in listed]
    assert a.get("/threads", params={"owner": theirs["worker"]}).json()["data"] == []


def test_a_cursor_from_another_tenant_is_refused(as_key) -> None:
    a, b = as_key("a_write"), as_key("b_write")
    shared = uid("thr")
    for c in (a, b):
        Graph(c).thread(id=shared)
        Graph(c).note(shared), Graph(c).note(shared)
    cursor = b.get(f"/threads/{shared}/events", params={"limit": 1}).json()["next_cursor"]
    assert_problem(a.get(f"/threads/{shared}/events", params={"cursor": cursor}), 400)


@pytest.mark.slow
def test_a_pooled_connection_never_carries_one_tenants_session_into_the_next(
    database_url: str, tenant_keys: dict[str, str], tmp_path: Path
) -> None:
    server = ServerProcess(database_url, tmp_path / "log", RECALL_POOL_MIN="1", RECALL_POOL_MAX="1").start()
    try:
        a = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {tenant_keys['a_write']}"})
        b = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {tenant_keys['b_write']}"})
        theirs = b_graph(b)
        for _ in range(20):  # one connection, alternating tenants
            assert b.get(f"/threads/{theirs['thread']}").status_code == 200
            assert a.get(f"/threads/{theirs['thread']}").status_code == 404
            assert theirs["thread"] not in [t["id"] for t in a.get("/threads").json()["data"]]
        a.close(), b.close()
    finally:
        server.stop()


# ---- the database enforces it -----------------------------------------------------------------


def app_role_query(database_url: str, tenant: str | None, sql: str) -> list[asyncpg.Record]:
    async def go() -> list[asyncpg.Record]:
        conn = await pool.connect(as_app_role(database_url))
        try:
            async with conn.transaction():
                if tenant is not None and CITUS_URL:  # a SET the coordinator repeats on the workers (tenancy.py)
                    await conn.execute(f"SET LOCAL citus.propagate_set_commands = 'local';"
                                       f" SET LOCAL app.tenant_id = '{tenant}'")
                elif tenant is not None:
                    await conn.execute("SELECT set_config('app.tenant_id', $1, true)", tenant)
                return await conn.fetch(sql)
        finally:
            await conn.close()

    return asyncio.run(go())


def test_a_query_without_its_tenant_filter_still_sees_one_tenant(database_url: str, as_key) -> None:
    theirs = b_graph(as_key("b_write"))
    Graph(as_key("a_write")).thread()
    for table in ("threads", "workers", "triggers", "reports", "thread_events", "thread_owners",
                  "report_refs", "api_keys", "memories", "memory_sources"):
        rows = app_role_query(database_url, "tenant-a", f"SELECT tenant_id FROM {table}")
        assert {r[0] for r in rows} <= {"tenant-a"}, table
    assert app_role_query(database_url, "tenant-a", "SELECT id FROM threads WHERE id = 'x' OR true") != []
    assert theirs["thread"] not in {r[0] for r in app_role_query(database_url, "tenant-a", "SELECT id FROM threads")}
    assert app_role_query(database_url, None, "SELECT id FROM threads") == [], "no tenant set: no rows"


def test_the_app_role_cannot_write_into_another_tenant(database_url: str) -> None:
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        app_role_query(database_url, "tenant-a",
                       "INSERT INTO threads (tenant_id, id, title, summary, status, request_hash) "
                       "VALUES ('tenant-b', 'thr_smuggled', 't', '', 'open', '\\x00')")


@pytest.mark.parametrize("statement", [
    "ALTER TABLE threads DISABLE ROW LEVEL SECURITY",
    "ALTER TABLE threads NO FORCE ROW LEVEL SECURITY",
    "DROP POLICY tenant_isolation ON threads",
    "DROP TABLE thread_events",
    "TRUNCATE threads",
    "SET ROLE postgres",
])
def test_the_app_role_cannot_weaken_isolation(database_url: str, statement: str) -> None:
    with pytest.raises(asyncpg.PostgresError):
        app_role_query(database_url, "tenant-a", statement)


def test_the_app_role_is_no_superuser_has_no_bypassrls_and_owns_nothing(database_url: str, sql) -> None:
    role = sql("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = 'recall_app'")[0]
    assert (role["rolsuper"], role["rolbypassrls"]) == (False, False)
    owned = sql("SELECT count(*) FROM pg_tables WHERE tableowner = 'recall_app'")[0][0]
    assert owned == 0
    forced = sql("SELECT relname FROM pg_class WHERE relname = ANY($1) AND relrowsecurity AND relforcerowsecurity",
                 ["threads", "workers", "thread_owners", "triggers", "trigger_neighbours", "reports", "report_refs",
                  "thread_events", "memories", "memory_sources"])
    assert len(forced) == 10
    with pytest.raises(asyncpg.PostgresError):  # row_security=off is refused, not a bypass
        app_role_query(database_url, "tenant-a", "SET row_security = off; SELECT * FROM threads")


@pytest.mark.slow
def test_no_key_or_payload_reaches_the_logs(database_url: str, tmp_path: Path) -> None:
    key = create_key(database_url, "tenant-a", "write")
    server = ServerProcess(database_url, tmp_path / "log", RECALL_LOG_LEVEL="debug").start()
    secret_payload = "secret-payload-" + uid("x")
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}) as c:
            Graph(c).trigger(payload=secret_payload, summary="s")
            c.get("/threads/" + uid("thr"))
            c.post("/triggers", content=b"{bad " + secret_payload.encode())
        httpx.get(server.url + "/threads", headers={"Authorization": f"Bearer {key}x"})
    finally:
        server.stop()
    log = (tmp_path / "log").read_text()
    assert log, "the server logged something"
    assert key.split(".", 1)[1] not in log and secret_payload not in log


def test_labels_narrow_lists_and_star_means_any(as_key) -> None:
    a = as_key("a_write")
    run = uid("run")[:40]
    g = Graph(a)
    tagged = g.thread(app_id="router", agent_id="triage", run_id=run)
    other = g.thread(app_id="router", agent_id="ci", run_id=run)
    assert tagged["app_id"] == "router" and tagged["run_id"] == run

    def listed(**filters: str) -> list[str]:
        return [t["id"] for t in a.get("/threads", params={"limit": 500, **filters}).json()["data"]]

    assert listed(run_id=run) == [other["id"], tagged["id"]]
    assert listed(run_id=run, agent_id="triage") == [tagged["id"]]
    assert listed(run_id=run, agent_id="*") == [other["id"], tagged["id"]]
    worker = g.worker(run_id=run)["id"]
    g.report(worker, tagged["id"], run_id=run)
    g.report(worker, tagged["id"])
    assert len(a.get(f"/workers/{worker}/reports", params={"run_id": run}).json()["data"]) == 1
    assert_problem(a.get("/threads", params={"app_id": "bad label!"}), 400)


def ceiling_routes(thread: str) -> list[tuple[str, str]]:
    """(method, path) of every ceiling in bench/ceiling_app.py, read from its source: the framework's
    routes (@get) and the ones answered in plain ASGI in front of it (PlainFetch), `thread` in each
    path parameter."""
    source = (Path(__file__).resolve().parent.parent / "bench" / "ceiling_app.py").read_text()
    routes = [("GET", re.sub(r"\{\w+:str\}", thread, p)) for p in re.findall(r'@get\("(/[^"]*)"', source)]
    routes += [("GET", p + thread) for p in re.findall(r'PREFIX = "(/[^"]*)"', source)]
    routes += [("POST", p) for p in re.findall(r'path == "(/[^"]*)"', source)]
    return [r for r in routes if r[1] != "/readyz"]


def test_the_benchmark_ceiling_routes_are_not_part_of_the_server(base_url: str, database_url: str) -> None:
    """The ceilings read tenant `bench` without a key: they live in bench/ceiling_app.py, never in the server.

    Tenant `bench` has the thread asked for, so a ceiling the server served would answer 200 (201), and a
    route of the server's that misses says so in its own words: only "no route" passes.
    """
    thread = uid("thr")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {create_key(database_url, 'bench', 'write')}"}
                      ) as bench:
        Graph(bench).thread(id=thread)
    routes = ceiling_routes(thread)
    assert {("GET", "/constant"), ("GET", f"/pk/{thread}"), ("GET", f"/asgi/pk/{thread}"), ("POST", "/asgi/insert")
            } <= set(routes), routes
    for method, path in routes:
        assert_problem(httpx.request(method, base_url + path, json={}), 404, f"No route matches {method} {path}.")


def _content_cache(base_url: str) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base_url + "/metrics", timeout=30).text
    return {s.labels["result"]: s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "recall_content_cache_total"}


def test_the_content_cache_never_answers_one_tenant_with_anothers_entry(as_key, base_url: str) -> None:
    """Same ID, same bytes in two tenants: B's first read goes to the database for B's own bytes.

    With a cache keyed by ID alone, B's read sent A's cached SHA-256 and was answered from A's
    entry (a hit): B could time whether A's trg_X holds bytes B guessed.
    """
    a, b = as_key("a_write"), as_key("b_write")
    trigger, payload = uid("trg"), {"secret": "the same bytes in both tenants"}
    for c in (a, b):
        assert c.post("/triggers", json={"id": trigger, "source": "t", "summary": "s", "payload": payload}
                      ).status_code == 201
    for _ in range(2):
        assert a.get(f"/triggers/{trigger}/payload").json() == payload  # A's entry is cached
    before = _content_cache(base_url)
    assert b.get(f"/triggers/{trigger}/payload").json() == payload
    after = _content_cache(base_url)
    assert after.get("miss", 0) == before.get("miss", 0) + 1 and after.get("hit", 0) == before.get("hit", 0), \
        "tenant B's first read was served from tenant A's cache entry"
    assert b.get(f"/triggers/{trigger}/payload").json() == payload
    assert _content_cache(base_url).get("hit", 0) == after.get("hit", 0) + 1, "B's own entry is used from then on"
