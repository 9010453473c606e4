"""Lifecycle: retries never duplicate, deletion retires IDs, expiry stops retrieval at once."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, cli, create_key, uid


def idem() -> dict[str, str]:
    return {"Idempotency-Key": f"k-{uuid.uuid4()}"}


# ---- idempotency ------------------------------------------------------------------------------


def test_concurrent_retries_of_one_post_make_one_trigger_and_one_event(
    base_url: str, api_key: str, graph: Graph, sql
) -> None:
    thread = graph.thread()["id"]
    summary = f"delivered once {uuid.uuid4()}"
    body = {"source": "github.check_run", "summary": summary, "thread_id": thread, "payload": {"n": 1}}
    headers = {**idem(), "Authorization": f"Bearer {api_key}"}

    def post(_: int) -> httpx.Response:
        with httpx.Client(base_url=base_url, timeout=30) as c:
            return c.post("/triggers", json=body, headers=headers)

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(post, range(16)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses.count(201) >= 1 and set(statuses) <= {201, 409}, statuses
    made = {r.json()["id"] for r in responses if r.status_code == 201}
    assert len(made) == 1
    assert sql("SELECT count(*) FROM triggers WHERE summary = $1", summary)[0][0] == 1
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = $1", thread)[0][0] == 1
    for r in responses:
        if r.status_code == 409:
            assert_problem(r, 409, "in flight")
    after = httpx.post(base_url + "/triggers", json=body, headers=headers)
    assert after.status_code == 201 and after.headers["idempotent-replayed"] == "true"
    assert after.json()["id"] in made


def test_a_retry_after_a_lost_response_replays_the_original(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()["id"]
    headers = idem()
    first = client.post(f"/threads/{thread}/events", json={"summary": "only once"}, headers=headers)
    replay = client.post(f"/threads/{thread}/events", json={"summary": "only once"}, headers=headers)
    assert first.status_code == replay.status_code == 201
    assert replay.content == first.content
    assert replay.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
    assert client.get(f"/threads/{thread}").json()["events_total"] == 1


def test_every_post_accepts_an_idempotency_key(client: httpx.Client, graph: Graph) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    for path, body in (("/threads", {"title": "t"}), ("/workers", {"name": "w"}),
                       ("/triggers", {"source": "s", "summary": "s"}),
                       (f"/workers/{worker}/reports", {"thread_id": thread, "summary": "r"}),
                       (f"/threads/{thread}/owners", {"worker_id": worker}),
                       (f"/threads/{thread}/events", {"summary": "n"})):
        headers = idem()
        first = client.post(path, json=body, headers=headers)
        again = client.post(path, json=body, headers=headers)
        assert first.status_code == 201, (path, first.text)
        assert (again.status_code, again.content) == (201, first.content), path
        assert first.headers.get("location") == again.headers.get("location")


def test_the_same_key_with_a_different_request_is_422(client: httpx.Client) -> None:
    headers = idem()
    assert client.post("/threads", json={"title": "one"}, headers=headers).status_code == 201
    assert_problem(client.post("/threads", json={"title": "two"}, headers=headers), 422, "Idempotency-Key")
    assert_problem(client.post("/workers", json={"title": "one"}, headers=headers), 400)  # body checked first
    assert_problem(client.post("/workers", json={"name": "one"}, headers=headers), 422)


def test_idempotency_keys_are_scoped_per_tenant(database_url: str, base_url: str, client: httpx.Client) -> None:
    other = {"Authorization": f"Bearer {create_key(database_url, 'tenant-idem', 'write')}"}
    headers = idem()
    mine = client.post("/threads", json={"title": "same key"}, headers=headers)
    theirs = httpx.post(base_url + "/threads", json={"title": "same key"}, headers={**headers, **other})
    assert mine.status_code == theirs.status_code == 201
    assert mine.json()["id"] != theirs.json()["id"] and "idempotent-replayed" not in theirs.headers


def test_a_redelivered_webhook_returns_the_first_trigger(client: httpx.Client, sql) -> None:
    delivery = str(uuid.uuid4())
    body = {"source": "github.check_run", "summary": "CI red", "external_id": delivery}
    first = client.post("/triggers", json=body)
    second = client.post("/triggers", json={**body, "summary": "CI red (redelivered)"})
    assert first.status_code == 201 and second.status_code == 200
    assert second.json()["id"] == first.json()["id"]
    assert second.headers["location"] == f"/triggers/{first.json()['id']}"
    assert sql("SELECT count(*) FROM triggers WHERE external_id = $1", delivery)[0][0] == 1
    other_source = client.post("/triggers", json={**body, "source": "github.push"})
    assert other_source.status_code == 201 and other_source.json()["id"] != first.json()["id"]


# ---- deletion -----------------------------------------------------------------------------------


def test_a_deleted_trigger_is_gone_everywhere_and_its_bytes_are_erased(
    client: httpx.Client, graph: Graph, sql, database_url: str
) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    secret = f"secret-log-{uuid.uuid4()}"
    headers = idem()
    doomed = client.post("/triggers", headers=headers, json={
        "source": "ci", "summary": f"summary of {secret}", "thread_id": thread, "payload": secret * 100,
        "content_type": "text/plain"}).json()["id"]
    neighbour = graph.trigger(neighbours=[doomed])["id"]
    report = graph.report(worker, thread, refs=[doomed])["id"]
    owner_headers = idem()
    client.post(f"/threads/{thread}/owners", json={"worker_id": worker}, headers=owner_headers)

    assert client.delete(f"/triggers/{doomed}").status_code == 204

    for path in (f"/triggers/{doomed}", f"/triggers/{doomed}/payload", f"/ids/{doomed}"):
        assert_problem(client.get(path), 410, doomed)
    assert client.get(f"/triggers/{neighbour}").json()["neighbours"] == [{"id": doomed, "deleted": True}]
    assert client.get(f"/reports/{report}").json()["refs"] == [{"id": doomed, "deleted": True}]
    event = client.get(f"/threads/{thread}/events").json()["data"][0]
    assert event == {"seq": 1, "type": "trigger_filed", "at": event["at"], "summary": "", "ref": doomed,
                     "ref_deleted": True}
    assert secret not in client.get(f"/threads/{thread}").text
    replayed_view = client.post(f"/threads/{thread}/owners", json={"worker_id": worker}, headers=owner_headers)
    assert replayed_view.status_code == 201 and secret not in replayed_view.text
    rows = sql("SELECT summary, payload FROM triggers WHERE id = $1", doomed)
    assert rows[0]["summary"] == "" and rows[0]["payload"] == b""
    assert sql("SELECT count(*) FROM thread_events WHERE position($1 in summary) > 0", secret)[0][0] == 0
    assert sql("SELECT count(*) FROM threads WHERE position($1 in head_events::text) > 0", secret)[0][0] == 0
    assert sql("SELECT count(*) FROM idempotency_keys WHERE position(convert_to($1, 'UTF8') in body) > 0",
               secret)[0][0] == 0
    assert "erased" in cli(database_url, "verify-erasure", doomed)


def test_replaying_the_create_of_a_deleted_object_is_410_not_its_old_content(client: httpx.Client) -> None:
    headers = idem()
    body = {"source": "s", "summary": "soon deleted", "payload": "private words", "content_type": "text/plain"}
    made = client.post("/triggers", json=body, headers=headers).json()["id"]
    client.delete(f"/triggers/{made}")
    replay = client.post("/triggers", json=body, headers=headers)
    assert_problem(replay, 410, made)
    assert "private words" not in replay.text


@pytest.mark.slow
def test_a_deleted_id_is_retired_forever(client: httpx.Client, graph: Graph, database_url: str, tmp_path: Path,
                                         api_key: str) -> None:
    thread = graph.thread(title="original")
    assert client.delete(f"/threads/{thread['id']}").status_code == 204
    assert_problem(client.post("/threads", json={"id": thread["id"], "title": "original", "summary": "a thread"}),
                   409, "retired")
    assert_problem(client.post("/threads", json={"id": thread["id"], "title": "a new one"}), 409, "retired")
    assert client.delete(f"/threads/{thread['id']}").status_code == 204, "deleting again is a no-op"
    cli(database_url, "migrate")
    restarted = ServerProcess(database_url, tmp_path / "log").start()
    try:
        again = httpx.get(f"{restarted.url}/threads/{thread['id']}", headers={"Authorization": f"Bearer {api_key}"})
        assert_problem(again, 410)
    finally:
        restarted.stop()


def test_deleting_a_thread_erases_its_log_and_what_was_filed_on_it(client: httpx.Client, graph: Graph, sql,
                                                                    database_url: str) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    client.post(f"/threads/{thread}/owners", json={"worker_id": worker})
    trigger = graph.trigger(thread_id=thread, payload="filed here")["id"]
    report = graph.report(worker, thread, body="about it")["id"]
    assert client.delete(f"/threads/{thread}").status_code == 204
    for path in (f"/threads/{thread}", f"/threads/{thread}/events", f"/triggers/{trigger}", f"/reports/{report}",
                 f"/reports/{report}/body"):
        assert_problem(client.get(path), 410)
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = $1", thread)[0][0] == 0
    view = client.get(f"/workers/{worker}").json()
    assert view["threads"] == [{"id": thread, "deleted": True}]
    assert view["reports"] == [{"id": report, "deleted": True}]
    assert report not in [r["id"] for r in client.get(f"/workers/{worker}/reports").json()["data"]]
    assert thread not in [t["id"] for t in client.get("/threads", params={"limit": 500}).json()["data"]]
    for erased in (thread, trigger, report):
        assert "erased" in cli(database_url, "verify-erasure", erased)
    assert_problem(client.post(f"/threads/{thread}/events", json={"summary": "late"}), 410)
    assert_problem(client.post("/triggers", json={"source": "s", "summary": "s", "thread_id": thread}), 422)


def test_verify_erasure_reports_a_live_object(database_url: str, graph: Graph) -> None:
    live = graph.trigger()["id"]
    run = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", live],
                         env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert run.returncode == 1 and "is live" in run.stdout and "still has content" in run.stdout


NOT_CHECKED = ("write-ahead log (WAL)", "table and index pages", "VACUUM", "backups and dumps")


def test_verify_erasure_says_what_it_does_not_check(database_url: str, graph: Graph, client: httpx.Client) -> None:
    """It reads the store's rows: the WAL, table and index pages (row versions not yet vacuumed) and backups
    it cannot read, so both its answers, erased or not, name them as not checked rather than imply them gone."""
    live, doomed = graph.trigger()["id"], graph.trigger(summary="private summary")["id"]
    assert client.delete(f"/triggers/{doomed}").status_code == 204
    for object_id, code, said in ((doomed, 0, "erased (no content found)"), (live, 1, "is live")):
        run = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", object_id],
                             env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
        assert run.returncode == code and said in run.stdout, run.stdout + run.stderr
        last = run.stdout.strip().splitlines()[-1]
        assert last.startswith("not checked: ") and all(part in last for part in NOT_CHECKED), last


def test_deleting_an_unknown_id_is_404(client: httpx.Client) -> None:
    assert_problem(client.delete(f"/triggers/{uid('trg')}"), 404)
    assert_problem(client.delete("/workers/thr_wrong_kind"), 404)


def test_a_read_key_cannot_delete(database_url: str, base_url: str, graph: Graph) -> None:
    reader = {"Authorization": f"Bearer {create_key(database_url, 'default', 'read')}"}
    assert_problem(httpx.delete(f"{base_url}/threads/{graph.thread()['id']}", headers=reader), 403)


# ---- expiry ---------------------------------------------------------------------------------------


def test_an_expired_object_is_gone_at_once_before_any_sweep(client: httpx.Client, graph: Graph, sql,
                                                            database_url: str, expire) -> None:
    thread = graph.thread()["id"]
    short = graph.trigger(ttl=3600, thread_id=thread, payload="ephemeral words", summary="short-lived")
    assert short["expires_at"]
    holder = graph.trigger(neighbours=[short["id"]])["id"]
    expire(short["id"])
    assert_problem(client.get(f"/triggers/{short['id']}"), 410)
    assert_problem(client.get(f"/triggers/{short['id']}/payload"), 410)
    assert client.get(f"/triggers/{holder}").json()["neighbours"] == [{"id": short["id"], "deleted": True}]
    event = client.get(f"/threads/{thread}/events").json()["data"][0]
    assert event["ref_deleted"] is True and event["summary"] == ""
    assert sql("SELECT octet_length(payload) FROM triggers WHERE id = $1", short["id"])[0][0] > 0, "not swept yet"
    assert "purged" in cli(database_url, "sweep")
    assert sql("SELECT octet_length(payload) FROM triggers WHERE id = $1", short["id"])[0][0] == 0
    assert "erased" in cli(database_url, "verify-erasure", short["id"])
    assert_problem(client.post("/triggers", json={"id": short["id"], "source": "s", "summary": "s"}), 409)


def test_an_event_pointing_at_a_short_lived_object_of_any_kind_is_marked_once_it_expires(client: httpx.Client,
                                                                                          graph: Graph, expire) -> None:
    """recall_lookup, one branch a kind: the expiry of what an event points at goes on the event, so the
    event is marked from that moment on, before any sweep. A plain note takes the statement of notes
    (recall_append_notes), one with an Idempotency-Key the transaction's append (recall_expiry), as a
    filed report's event does."""
    thread = graph.thread()["id"]
    memory = client.post("/memories", json={"namespace": ["t", uid("ns")], "key": "k", "value": 1, "ttl": 3600})
    assert memory.status_code == 201
    targets = [graph.thread(ttl=3600)["id"], graph.worker(ttl=3600)["id"], graph.trigger(ttl=3600)["id"],
               memory.json()["id"]]
    refs = []
    for ref in targets:
        for headers in ({}, idem()):
            note = client.post(f"/threads/{thread}/events", json={"summary": "see", "ref": ref}, headers=headers)
            assert note.status_code == 201
            refs.append(ref)
    refs.append(graph.report(graph.worker()["id"], thread, ttl=3600)["id"])

    def marked() -> list[tuple[str, bool]]:
        return [(e["ref"], e.get("ref_deleted", False)) for e in client.get(f"/threads/{thread}/events").json()["data"]]

    assert marked() == [(ref, False) for ref in refs]
    expire(*targets, refs[-1])
    assert marked() == [(ref, True) for ref in refs]


def test_an_expired_thread_takes_what_was_filed_on_it(client: httpx.Client, graph: Graph, expire) -> None:
    thread = graph.thread(ttl=3600)["id"]
    trigger = graph.trigger(thread_id=thread)["id"]
    expire(thread)
    assert_problem(client.get(f"/triggers/{trigger}"), 410)
    assert thread not in [t["id"] for t in client.get("/threads", params={"limit": 500}).json()["data"]]


def test_ttl_and_expires_at_are_exclusive_and_validated(client: httpx.Client) -> None:
    assert_problem(client.post("/threads", json={"title": "t", "ttl": 5, "expires_at": "2030-01-01T00:00:00Z"}), 422)
    assert_problem(client.post("/threads", json={"title": "t", "ttl": 0}), 400)
    assert_problem(client.post("/threads", json={"title": "t", "expires_at": "soon"}), 400)
    later = client.post("/threads", json={"title": "t", "expires_at": "2030-01-01T00:00:00Z"}).json()
    assert later["expires_at"] == "2030-01-01T00:00:00Z"


def test_closed_threads_follow_the_tenants_retention(database_url: str, base_url: str, expire) -> None:
    key = create_key(database_url, "tenant-retention", "write")
    cli(database_url, "tenants", "retention", "tenant-retention", "--closed-threads", "1")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as c:
        g = Graph(c)
        merged, still_open = g.thread()["id"], g.thread()["id"]
        view = c.patch(f"/threads/{merged}", json={"status": "merged"}).json()
        assert view["expires_at"]
        expire(merged)
        assert_problem(c.get(f"/threads/{merged}"), 410)
        assert c.get(f"/threads/{still_open}").status_code == 200


@pytest.mark.parametrize("kind", ["threads", "workers", "triggers", "reports"])
def test_every_kind_can_be_deleted(client: httpx.Client, graph: Graph, kind: str) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    made = {"threads": thread, "workers": worker, "triggers": graph.trigger()["id"],
            "reports": graph.report(worker, thread)["id"]}[kind]
    assert client.delete(f"/{kind}/{made}").status_code == 204
    assert_problem(client.get(f"/{kind}/{made}"), 410)


def test_deleting_a_thread_erases_children_with_empty_summaries_too(client: httpx.Client, graph: Graph,
                                                                     sql) -> None:
    worker, thread = graph.worker()["id"], graph.thread()["id"]
    trigger = graph.trigger(thread_id=thread, summary="", payload="SECRET")["id"]
    report = graph.report(worker, thread, summary="", body="SECRET")["id"]
    assert client.delete(f"/threads/{thread}").status_code == 204
    assert_problem(client.get(f"/triggers/{trigger}/payload"), 410)
    assert_problem(client.get(f"/reports/{report}/body"), 410)
    assert sql("SELECT count(*) FROM triggers WHERE id = $1 AND deleted_at IS NULL", trigger)[0][0] == 0
    assert sql("SELECT octet_length(body) FROM reports WHERE id = $1", report)[0][0] == 0


@pytest.mark.parametrize("when", ["9999-12-31T23:00:00-01:00", "0001-01-01T00:00:00+01:00"])
def test_timestamps_outside_the_database_range_are_400(client: httpx.Client, when: str) -> None:
    assert_problem(client.post("/triggers", json={"source": "s", "summary": "s", "occurred_at": when}), 400)
    assert_problem(client.post("/threads", json={"title": "t", "expires_at": when}), 400)


def test_replaying_the_create_of_an_expired_object_is_410_before_any_sweep(client: httpx.Client, expire) -> None:
    headers = idem()
    body = {"source": "s", "summary": "brief", "payload": "short-lived words", "content_type": "text/plain",
            "ttl": 3600}
    created = client.post("/triggers", json=body, headers=headers)
    assert created.status_code == 201
    expire(created.json()["id"])
    replay = client.post("/triggers", json=body, headers=headers)
    assert_problem(replay, 410)
    assert "short-lived words" not in replay.text


def test_the_sweep_works_off_a_backlog_in_batches(graph: Graph, sql, database_url: str, expire) -> None:
    made = [graph.trigger(ttl=3600, payload=f"backlog {i}")["id"] for i in range(5)]
    expire(*made)
    out = cli(database_url, "sweep", "--batch", "2")
    assert int(out.split()[1]) >= 5
    assert sql("SELECT count(*) FROM triggers WHERE id = ANY($1) AND deleted_at IS NULL", made)[0][0] == 0


@pytest.mark.slow
def test_serve_sweeps_expired_content_by_itself(database_url: str, api_key: str, tmp_path: Path, sql,
                                                expire) -> None:
    server = ServerProcess(database_url, tmp_path / "log", RECALL_SWEEP_INTERVAL="0.5").start()
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {api_key}"}) as c:
            made = Graph(c).trigger(ttl=3600, payload="swept by serve")["id"]
        expire(made)
        deadline = time.monotonic() + 15
        while sql("SELECT octet_length(payload) FROM triggers WHERE id = $1", made)[0][0] > 0:
            assert time.monotonic() < deadline, "serve never swept"
            time.sleep(0.2)  # polling (with a deadline) for serve's own sweep, every 0.5 s
    finally:
        server.stop()


def test_verify_erasure_finds_a_summary_left_in_a_threads_head(database_url: str, graph: Graph, client: httpx.Client,
                                                                sql) -> None:
    """The check reads the head as well as the log: a head not rebuilt on erasure would be reported."""
    thread = graph.thread()["id"]
    doomed = graph.trigger(thread_id=thread, summary="private summary")["id"]
    stale = sql("SELECT head_events FROM threads WHERE id = $1", thread)[0][0]
    assert client.delete(f"/triggers/{doomed}").status_code == 204
    assert "erased" in cli(database_url, "verify-erasure", doomed)
    sql("UPDATE threads SET head_events = $2::jsonb WHERE id = $1", thread, stale)  # as if never rebuilt
    run = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", doomed],
                         env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert run.returncode == 1 and f"the head of {thread} still copies a summary" in run.stdout


# ---- erasure, every kind, every place ------------------------------------------------------------


def tables_holding(sql, marker: str) -> list[str]:
    """Every table column (of every base table in the schema, whatever its type: text, JSON, arrays, tsvector,
    bytea) that holds `marker` in some row, as table.column. Read from the catalog, so a table added later is
    scanned without a change here."""
    columns = sql("""
        SELECT c.relname, a.attname, t.typname = 'bytea' AS is_bytea
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          JOIN pg_type t ON t.oid = a.atttypid
         WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
         ORDER BY 1, 2""")
    assert len({c["relname"] for c in columns}) >= 20, columns  # the catalog was read, not an empty schema
    found = []
    for table in sorted({c["relname"] for c in columns}):
        tests = [f'position(convert_to($1, \'UTF8\') in "{c["attname"]}") > 0' if c["is_bytea"]
                 else f'position($1 in "{c["attname"]}"::text) > 0' for c in columns if c["relname"] == table]
        hits = sql(f'SELECT {", ".join(f"bool_or({t})" for t in tests)} FROM "{table}"', marker)[0]
        names = [c["attname"] for c in columns if c["relname"] == table]
        found += [f"{table}.{name}" for name, hit in zip(names, hits) if hit]
    return found


def _created_with_marker(client: httpx.Client, graph: Graph, kind: str, marker: str) -> tuple[str, dict, str]:
    """A create of `kind` whose every text field carries `marker`, with copies of it made elsewhere (a thread's
    head and log, a worker's head, a note pointing at it): (path, body, the object's collection)."""
    if kind == "trg":
        thread = graph.thread()["id"]
        return "/triggers", {"source": "ci", "summary": f"trigger {marker}", "thread_id": thread,
                             "payload": {"log": f"failed: {marker}"}}, "triggers"
    if kind == "thr":
        return "/threads", {"title": f"title {marker}", "summary": f"summary {marker}"}, "threads"
    if kind == "wkr":
        return "/workers", {"name": f"name {marker}", "summary": f"summary {marker}"}, "workers"
    if kind == "rpt":
        worker, thread = graph.worker()["id"], graph.thread()["id"]
        return f"/workers/{worker}/reports", {"thread_id": thread, "summary": f"report {marker}",
                                              "body": f"findings: {marker}"}, "reports"
    return "/memories", {"namespace": ["erase", marker], "key": f"key {marker}", "value": {"v": marker},
                         "summary": f"memory {marker}", "tags": {"topic": marker}}, "memories"


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["trg", "thr", "wkr", "rpt", "mem"])
def test_an_erased_object_of_every_kind_leaves_its_content_in_no_table(
        kind: str, client: httpx.Client, graph: Graph, sql, database_url: str) -> None:
    """An idempotent create, its replay, copies of it in other objects, then a delete: verify-erasure finds
    nothing, and no column of any table (stored responses, heads, logs, search vectors) holds its text."""
    marker = f"zq9{uuid.uuid4().hex[:16]}"
    path, body, collection = _created_with_marker(client, graph, kind, marker)
    headers = idem()
    made = client.post(path, json=body, headers=headers)
    assert made.status_code == 201, made.text
    replay = client.post(path, json=body, headers=headers)
    assert (replay.status_code, replay.content, replay.headers["idempotent-replayed"]) == (201, made.content, "true")
    made_id = made.json()["id"]
    holder = graph.thread()["id"]  # a note pointing at it, and a worker owning what it is
    assert client.post(f"/threads/{holder}/events", json={"summary": "see", "ref": made_id}).status_code == 201
    if kind == "thr":
        assert client.post(f"/threads/{made_id}/owners", json={"worker_id": graph.worker()["id"]},
                           headers=idem()).status_code == 201
        graph.trigger(thread_id=made_id, summary=f"filed on {marker}")
    if kind == "wkr":
        assert client.post(f"/threads/{holder}/owners", json={"worker_id": made_id}, headers=idem()).status_code == 201
    if kind == "mem":  # a second version, so the whole pair goes
        assert client.post(path, json={**body, "value": {"v2": marker}}, headers=idem()).status_code == 201
    before = tables_holding(sql, marker)
    assert f"{collection}.search" in before and "idempotency_keys.body" in before, before  # the scan can see it

    assert client.delete(f"/{collection}/{made_id}").status_code == 204

    assert "erased (no content found)" in cli(database_url, "verify-erasure", made_id)
    assert tables_holding(sql, marker) == []
    again = client.post(path, json=body, headers=headers)
    assert again.status_code == 410 and marker not in again.text


def test_an_erased_thread_leaves_no_stored_response_of_any_write_made_on_it(
        client: httpx.Client, graph: Graph, sql, database_url: str) -> None:
    """Every write made on a thread with an Idempotency-Key (a note, messages, a retraction echoing them, a
    checkpoint put under its ID and a copy of it): once the thread is deleted no stored response holds their
    text, a retry is a 410, and verify-erasure finds a response that still would."""
    marker = f"zq9{uuid.uuid4().hex[:16]}"
    thread = graph.thread()["id"]
    writes = [
        (f"/threads/{thread}/events", {"summary": f"note {marker}"}),
        (f"/threads/{thread}/messages", {"messages": [{"role": "user", "content": f"said {marker}"},
                                                      {"role": "assistant", "content": {"said": marker}}]}),
        (f"/threads/{thread}/messages/retractions", {"newest": 2}),
        ("/checkpoints", {"thread_id": thread, "checkpoint_id": "cp-1", "type": "json",
                          "checkpoint": base64.b64encode(f'{{"v": "{marker}"}}'.encode()).decode(),
                          "metadata": {"note": marker}}),
        ("/checkpoints/copy", {"source_thread_id": thread, "target_thread_id": f"copy-{marker}"}),
    ]
    sent = []
    for path, body in writes:
        headers = idem()
        made = client.post(path, json=body, headers=headers)
        assert made.status_code in (200, 201), made.text
        sent.append((path, body, headers))
    assert "idempotency_keys.body" in tables_holding(sql, marker)  # the scan can see them

    assert client.delete(f"/threads/{thread}").status_code == 204

    stored = [t for t in tables_holding(sql, marker) if t.startswith("idempotency_keys")]
    assert stored == []
    assert "erased (no content found)" in cli(database_url, "verify-erasure", thread)
    for path, body, headers in sent[:3]:
        again = client.post(path, json=body, headers=headers)
        assert again.status_code == 410 and marker not in again.text
    # A stored response of the thread's that an erasure missed is found (as a store upgraded from an older one
    # might hold it): the response of the note, put back.
    sql("""INSERT INTO idempotency_keys (tenant_id, key, request_hash, status, body, object_id, expires_at)
           VALUES ('default', $1, sha256('x'), 201, $2, $3, now() + interval '1 hour')""",
        f"planted-{marker}", f'{{"seq": 1, "summary": "note {marker}"}}'.encode(), thread)
    run = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", thread],
                         env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert run.returncode == 1 and f"planted-{marker}" in run.stdout, run.stdout + run.stderr


@pytest.mark.slow
def test_concurrent_erasures_of_cross_linked_threads_never_deadlock(
        base_url: str, api_key: str, client: httpx.Client, graph: Graph) -> None:
    """Erasing a thread renders again the heads of the threads whose events point at it or at what was filed
    on it. Two threads pointing at each other's triggers, reports and themselves, deleted at once: each
    erasure locks every thread it will touch, in ID order, before writing, so neither waits on the other
    in a cycle (PostgreSQL would undo one after a second: a 503)."""
    import threading

    def cross_linked() -> tuple[str, str]:
        worker = graph.worker()["id"]
        a, b = graph.thread()["id"], graph.thread()["id"]
        for t in (a, b):  # erased first (in ID order), and pointed at by nothing: time holding the own thread only
            for i in range(15):
                graph.trigger(id=f"trg_a{i:02d}{uuid.uuid4().hex[:12]}", thread_id=t, payload="x" * 4000)
        filed = {t: [graph.trigger(thread_id=t)["id"], graph.report(worker, t)["id"]] for t in (a, b)}
        for here, there in ((a, b), (b, a)):
            client.post(f"/threads/{here}/owners", json={"worker_id": worker})
            for ref in [there, *filed[there]]:
                assert client.post(f"/threads/{here}/events", json={"summary": "see", "ref": ref}).status_code == 201
        return a, b

    for _ in range(12):
        a, b = cross_linked()
        start = threading.Barrier(2)

        def delete(thread: str) -> httpx.Response:
            with httpx.Client(base_url=base_url, timeout=60, headers={"Authorization": f"Bearer {api_key}"}) as c:
                start.wait()
                return c.delete(f"/threads/{thread}")

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(delete, (b, a)))
        assert [r.status_code for r in answers] == [204, 204], [r.text for r in answers]
        for thread in (a, b):
            assert_problem(client.get(f"/threads/{thread}"), 410)
