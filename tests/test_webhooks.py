"""GitHub webhooks against a real server process: signed deliveries become triggers, threads and events;
everything else is refused loudly and leaves nothing behind."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from helpers import CITUS_URL, ServerProcess, assert_problem, cli, create_key, run_sql

from recall_server.db import pool
from recall_server import auth, ids
from recall_server.db.pool import as_app_role
from recall_server.webhooks import signing
from test_github_mapping import VECTOR_BODY, VECTOR_SECRET, VECTOR_SIGNATURE, example

TENANT = "gh-hooks"
# where a backend waiting on a lock shows: on Citus the wait happens on a worker, which citus_stat_activity covers
ACTIVITY = "citus_stat_activity" if CITUS_URL else "pg_stat_activity"


class Hook:
    """A hook of a tenant, and a way to send it signed deliveries."""

    def __init__(self, base_url: str, hook_id: str, secret: str) -> None:
        self.base_url, self.id, self.secret = base_url, hook_id, secret

    def send(self, event: str | None, body: bytes | dict[str, Any], delivery: str | None = None, *,
             secret: str | None = None, signature: str | None = None, hook_id: str | None = None,
             headers: dict[str, str] | None = None) -> httpx.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"content-type": "application/json",
                "x-hub-signature-256": signature or signing.sign(secret or self.secret, raw),
                **({"x-github-event": event} if event else {}),
                "x-github-delivery": delivery or str(uuid.uuid4()), **(headers or {})}
        return httpx.post(f"{self.base_url}/hooks/github/{hook_id or self.id}", content=raw,
                          headers={k: v for k, v in sent.items() if v != ""}, timeout=60)


def new_hook(database_url: str, tenant: str, base_url: str) -> Hook:
    out = cli(database_url, "hooks", "create", "--tenant", tenant, "--source", "github", "--label", "test")
    lines = out.strip().splitlines()
    hook_id = lines[0].split()[1]
    assert lines[1].endswith(f"/hooks/github/{hook_id} (content type application/json)")
    return Hook(base_url, hook_id, lines[-1])


@pytest.fixture(scope="module")
def reader_key(database_url: str, server: ServerProcess) -> str:
    return create_key(database_url, TENANT, "write")


@pytest.fixture(scope="module")
def hook(database_url: str, base_url: str, reader_key: str) -> Hook:
    return new_hook(database_url, TENANT, base_url)


@pytest.fixture()
def reader(base_url: str, reader_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {reader_key}"}) as c:
        yield c


def payload(name: str, repo: str | None = None, **edits: Any) -> dict[str, Any]:
    """A GitHub example payload, moved to its own repository (so tests never share threads), edited."""
    body = json.loads(example(name))
    if repo is not None:
        body["repository"]["full_name"] = repo
    for path, value in edits.items():
        node = body
        *parents, leaf = path.split("__")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return body


def fresh_repo() -> str:
    return f"acme/repo-{uuid.uuid4().hex[:10]}"


def key_of(repo: str) -> str:
    return repo.lower().replace("/", "_")


def written(database_url: str, tenant: str) -> tuple[int, ...]:
    """Everything a delivery could write in a tenant: rows of threads, triggers, events, deliveries, states."""
    rows = run_sql(database_url, """
        SELECT (SELECT count(*) FROM threads WHERE tenant_id = $1),
               (SELECT count(*) FROM triggers WHERE tenant_id = $1),
               (SELECT count(*) FROM thread_events WHERE tenant_id = $1),
               (SELECT count(*) FROM hook_deliveries WHERE tenant_id = $1),
               (SELECT count(*) FROM github_threads WHERE tenant_id = $1)""", tenant)
    return tuple(rows[0])


# ---- the mapping, end to end ---------------------------------------------------------------------


def test_githubs_examples_land_where_the_table_says(database_url: str, base_url: str, server: ServerProcess) -> None:
    """Every example fixture, unmodified, to a fresh tenant's hook: a trigger on the thread the table names,
    with the delivery's exact bytes as its payload; ping and progress events store nothing."""
    from test_github_mapping import MAPPED

    tenant = f"gh-{uuid.uuid4().hex[:8]}"
    key = create_key(database_url, tenant, "read")
    hook = new_hook(database_url, tenant, base_url)
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as c:
        for name in sorted(MAPPED):
            outcome, thread, summary = MAPPED[name]
            event, raw = name.split(".")[0], example(name)
            before = written(database_url, tenant)
            r = hook.send(event, raw)
            assert r.json()["outcome"] == outcome, (name, r.text)
            if outcome != "filed":
                assert r.status_code == 200 and written(database_url, tenant) == before, name
                continue
            assert r.status_code == 201, r.text
            trigger = c.get(r.headers["location"]).json()
            assert (trigger["source"], trigger["thread_id"], trigger["summary"]) == (f"github.{event}", thread, summary)
            body = c.get(f"{r.headers['location']}/payload")
            assert body.content == raw and body.headers["content-type"].startswith("application/json")
            events = c.get(f"/threads/{thread}/events", params={"limit": 500}).json()["data"]
            assert any(e["type"] == "trigger_filed" and e["ref"] == trigger["id"] for e in events), name
        pr = c.get("/threads/thr_gh_codertocat_hello-world_pr_2").json()
        assert pr["title"] == "Update the README with new information."
        # The examples' `closed` has the newest updated_at (15:21:18; reopened says 15:20:33): it stays.
        assert pr["status"] == "closed"


def test_pull_request_events_move_the_threads_status_with_an_event_for_each_change(
        hook: Hook, reader: httpx.Client) -> None:
    repo = fresh_repo()
    thread = f"thr_gh_{key_of(repo)}_pr_2"
    opened = hook.send("pull_request", payload("pull_request.opened", repo))
    assert opened.status_code == 201 and opened.json()["thread_state"] == "applied"
    view = reader.get(f"/threads/{thread}").json()
    assert (view["status"], view["title"]) == ("open", "Update the README with new information.")
    assert view["summary"] == f"PR #2 in {repo} by Codertocat, open"
    hook.send("pull_request", payload("pull_request.closed", repo, pull_request__merged=True,
                                      pull_request__merged_at="2019-05-15T15:21:18Z"))
    events = reader.get(f"/threads/{thread}/events").json()["data"]
    assert [(e["type"], e["summary"]) for e in events] == [
        ("trigger_filed", "PR #2 opened by Codertocat: Update the README with new information."),
        ("trigger_filed", "PR #2 merged by Codertocat: Update the README with new information."),
        ("status_changed", "status: open -> merged"),
    ]
    assert reader.get(f"/threads/{thread}").json()["status"] == "merged"


def test_an_issue_comment_on_a_pull_request_lands_on_the_pull_requests_thread(
        hook: Hook, reader: httpx.Client) -> None:
    repo = fresh_repo()
    body = payload("issue_comment.created", repo)
    body["issue"]["pull_request"] = {"url": "https://api.github.com/repos/x/y/pulls/1", "merged_at": None}
    r = hook.send("issue_comment", body)
    assert r.status_code == 201, r.text
    assert r.json()["thread_id"] == f"thr_gh_{key_of(repo)}_pr_1"
    assert reader.get(f"/threads/thr_gh_{key_of(repo)}_pr_1").json()["title"] == "Spelling error in the README file"


# ---- credentials: the signature is the key ----------------------------------------------------------


def test_githubs_signature_test_vector_verifies_in_the_database(database_url: str) -> None:
    """recall_hook_verify's SQL HMAC (built-in sha256 over the stored padded keys) gives GitHub's documented value."""
    hook_id = ids.new_hook_id()
    ipad, opad = auth.padded_keys(VECTOR_SECRET)
    run_sql(database_url, "INSERT INTO tenants (id) VALUES ('gh-vector') ON CONFLICT DO NOTHING")
    run_sql(database_url, "INSERT INTO hooks (id, tenant_id, source, hmac_ipad, hmac_opad) VALUES ($1, 'gh-vector', "
                          "'github', $2, $3)", hook_id, ipad, opad)
    mac = run_sql(database_url, "SELECT mac FROM recall_hook_verify($1, $2)", hook_id, VECTOR_BODY)[0][0]
    assert "sha256=" + mac.hex() == VECTOR_SIGNATURE


@pytest.mark.parametrize("signature", ["", "sha256=" + "0" * 64, "sha1=0123", "wrong-secret"])
def test_a_bad_or_missing_signature_is_401_and_writes_nothing(
        hook: Hook, database_url: str, signature: str) -> None:
    before = written(database_url, TENANT)
    kw: dict[str, Any] = {"secret": "not the secret"} if signature == "wrong-secret" else {"signature": signature}
    if signature == "":
        kw = {"headers": {"x-hub-signature-256": ""}}
    r = hook.send("pull_request", payload("pull_request.opened", fresh_repo()), **kw)
    assert_problem(r, 401, "X-Hub-Signature-256")
    assert "x-hub-signature-256" in r.headers["www-authenticate"].lower()
    assert written(database_url, TENANT) == before


def test_a_signature_over_other_bytes_is_401(hook: Hook, database_url: str) -> None:
    body = json.dumps(payload("pull_request.opened", fresh_repo())).encode()
    before = written(database_url, TENANT)
    assert_problem(hook.send("pull_request", body + b" ", signature=signing.sign(hook.secret, body)), 401)
    assert written(database_url, TENANT) == before


def test_unknown_malformed_and_revoked_hooks_are_404_and_write_nothing(
        hook: Hook, database_url: str, base_url: str) -> None:
    body = payload("pull_request.opened", fresh_repo())
    before = written(database_url, TENANT)
    assert_problem(hook.send("pull_request", body, hook_id=ids.new_hook_id()), 404, "No webhook")
    assert_problem(hook.send("pull_request", body, hook_id="thr_pr_412"), 404)
    doomed = new_hook(database_url, TENANT, base_url)
    assert doomed.send("ping", payload("ping.event")).status_code == 200
    assert f"hook {doomed.id} revoked" in cli(database_url, "hooks", "revoke", doomed.id)
    assert_problem(doomed.send("pull_request", body), 404, doomed.id)
    assert written(database_url, TENANT) == before
    listed = cli(database_url, "hooks", "list", "--tenant", TENANT)
    assert doomed.id in listed and "revoked" in listed and doomed.secret not in listed


def test_hooks_create_refuses_an_unknown_tenant(database_url: str, server: ServerProcess) -> None:
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-m", "recall_server", "hooks", "create", "--tenant", "no-such-tenant",
                          "--source", "github"], env={**__import__("os").environ, "DATABASE_URL": database_url},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "No tenant named 'no-such-tenant'" in run.stderr


def test_a_hook_of_another_tenant_writes_only_there(hook: Hook, database_url: str, base_url: str) -> None:
    other_key = create_key(database_url, "gh-other", "write")
    other = new_hook(database_url, "gh-other", base_url)
    repo = fresh_repo()
    assert other.send("pull_request", payload("pull_request.opened", repo)).status_code == 201
    thread = f"thr_gh_{key_of(repo)}_pr_2"
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {other_key}"}) as c:
        assert c.get(f"/threads/{thread}").status_code == 200
    assert not run_sql(database_url, "SELECT 1 FROM threads WHERE tenant_id = $1 AND id = $2", TENANT, thread)


def test_the_app_role_cannot_read_hook_secrets(database_url: str, hook: Hook) -> None:
    async def go() -> None:
        conn = await pool.connect(as_app_role(database_url))
        try:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch("SELECT hmac_ipad FROM hooks")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.fetch("SELECT * FROM hooks")
            # the one narrow path: the MAC of a given body, for one hook, and its tenant
            row = await conn.fetchrow("SELECT * FROM recall_hook_verify($1, $2)", hook.id, b"x")
            assert row["tenant_id"] == TENANT and row["mac"] == signing.mac(*auth.padded_keys(hook.secret), b"x")
        finally:
            await conn.close()

    asyncio.run(go())


# ---- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("event, delivery", [
    (None, None),  # no X-GitHub-Event
    ("Pull Request", None),
    ("pull_request", "not a guid!"),
])
def test_missing_or_malformed_headers_are_400_and_write_nothing(
        hook: Hook, database_url: str, event: str | None, delivery: str | None) -> None:
    before = written(database_url, TENANT)
    r = hook.send(event, payload("pull_request.opened", fresh_repo()), delivery)
    assert_problem(r, 400)
    assert written(database_url, TENANT) == before


def test_a_signed_delivery_the_mapping_cannot_read_is_kept_raw_on_its_repositorys_thread(
        hook: Hook, reader: httpx.Client) -> None:
    """GitHub does not retry a refused delivery: the event would be gone. A verified one whose JSON lacks a
    field the mapping reads (an issue_comment whose issue has no updated_at) is filed as it came, on the
    repository's thread, its summary saying what could not be read."""
    repo = fresh_repo()
    body = payload("issue_comment.created", repo)
    del body["issue"]["updated_at"]
    raw = json.dumps(body).encode()
    r = hook.send("issue_comment", raw)
    assert r.status_code == 201, r.text
    assert r.json()["outcome"] == "filed" and r.json()["thread_id"] == f"thr_gh_{key_of(repo)}"
    trigger = reader.get(r.headers["location"]).json()
    assert trigger["source"] == "github.issue_comment" and trigger["thread_id"] == f"thr_gh_{key_of(repo)}"
    assert "not mapped" in trigger["summary"] and "updated_at" in trigger["summary"], trigger["summary"]
    assert reader.get(f"{r.headers['location']}/payload").content == raw
    events = reader.get(f"/threads/thr_gh_{key_of(repo)}/events").json()["data"]
    assert [(e["type"], e["ref"]) for e in events] == [("trigger_filed", trigger["id"])]
    again = hook.send("issue_comment", raw, r.json()["delivery"])  # a redelivery, as for any delivery
    assert again.headers["idempotent-replayed"] == "true" and again.json() == r.json()


@pytest.mark.parametrize("event, body", [
    ("pull_request", b"payload=%7B%7D"),  # a hook configured for form encoding
    ("pull_request", b'{"action": "opened", "repository": {"full_name": "a/b"}}'),  # no pull_request
    ("issues", b"[1, 2]"),
    ("pull_request", b'{"repository": "not an object", "pull_request": {"number": 0}}'),
])
def test_a_signed_delivery_that_is_not_its_events_json_is_kept_raw(
        hook: Hook, reader: httpx.Client, event: str, body: bytes) -> None:
    """Kept on the repository's thread when one can be read from it, else on no thread; never refused."""
    r = hook.send(event, body)
    assert r.status_code == 201, r.text
    trigger = reader.get(r.headers["location"]).json()
    assert trigger["source"] == f"github.{event}" and "not mapped" in trigger["summary"], trigger
    assert trigger.get("thread_id") == r.json().get("thread_id")
    assert reader.get(f"{r.headers['location']}/payload").content == body


def test_a_delivery_over_the_limit_is_413_and_writes_nothing(hook: Hook, database_url: str) -> None:
    body = payload("pull_request.opened", fresh_repo())
    body["pull_request"]["body"] = "x" * (10 * 1024 * 1024)  # 10 MB; the default limit is 8 MiB
    before = written(database_url, TENANT)
    assert_problem(hook.send("pull_request", body), 413)
    assert written(database_url, TENANT) == before


@pytest.mark.slow
def test_a_10mb_delivery_within_a_raised_limit_is_filed_in_one_piece(
        database_url: str, tmp_path: Path, reader_key: str, hook: Hook) -> None:
    server = ServerProcess(database_url, tmp_path / "server.log", RECALL_SWEEP_INTERVAL="0",
                           RECALL_WEBHOOK_MAX_BODY_BYTES=str(16 * 1024 * 1024)).start()
    try:
        body = payload("pull_request.opened", fresh_repo())
        body["pull_request"]["body"] = "x" * (10 * 1024 * 1024)
        raw = json.dumps(body).encode()
        r = Hook(server.url, hook.id, hook.secret).send("pull_request", raw)
        assert r.status_code == 201, r.text
        assert r.elapsed.total_seconds() < 10  # GitHub gives up after 10 s
        got = httpx.get(f"{server.url}{r.headers['location']}/payload",
                        headers={"Authorization": f"Bearer {reader_key}"}, timeout=60)
        assert got.content == raw
    finally:
        server.stop()


def test_a_delivery_for_a_deleted_thread_is_410_and_writes_nothing(
        hook: Hook, reader: httpx.Client, database_url: str) -> None:
    repo = fresh_repo()
    assert hook.send("pull_request", payload("pull_request.opened", repo)).status_code == 201
    assert reader.delete(f"/threads/thr_gh_{key_of(repo)}_pr_2").status_code == 204
    before = written(database_url, TENANT)
    assert_problem(hook.send("check_run", payload("check_run.completed", repo)), 410)
    assert written(database_url, TENANT) == before


# ---- delivery semantics ------------------------------------------------------------------------------


def test_a_redelivery_answers_the_first_result_and_creates_nothing(hook: Hook, database_url: str) -> None:
    delivery = str(uuid.uuid4())
    body = payload("pull_request.opened", fresh_repo())
    first = hook.send("pull_request", body, delivery)
    assert first.status_code == 201
    after_first = written(database_url, TENANT)
    again = hook.send("pull_request", body, delivery)
    assert (again.status_code, again.json(), again.headers["location"]) == (201, first.json(),
                                                                            first.headers["location"])
    assert again.headers["idempotent-replayed"] == "true"
    assert written(database_url, TENANT) == after_first



def test_the_sweep_purges_deliveries_past_the_ttl_and_keeps_the_rest(hook: Hook, database_url: str) -> None:
    """A delivery GUID is kept RECALL_DELIVERY_TTL to answer its redelivery, then the sweep deletes it (the
    table grew by a row per delivery for ever). A late redelivery of a purged GUID files nothing twice:
    its trigger holds the GUID as external_id."""
    old, recent = str(uuid.uuid4()), str(uuid.uuid4())
    old_body, recent_body = payload("pull_request.opened", fresh_repo()), payload("pull_request.opened", fresh_repo())
    first = hook.send("pull_request", old_body, old)
    assert first.status_code == 201 and hook.send("pull_request", recent_body, recent).status_code == 201
    run_sql(database_url, "UPDATE hook_deliveries SET received_at = now() - interval '8 days' "
                          "WHERE tenant_id = $1 AND delivery = $2", TENANT, old)
    cli(database_url, "sweep")  # RECALL_DELIVERY_TTL: 7 days by default
    kept = {r[0] for r in run_sql(database_url, "SELECT delivery FROM hook_deliveries WHERE tenant_id = $1 "
                                                "AND delivery = ANY($2)", TENANT, [old, recent])}
    assert kept == {recent}
    again = hook.send("pull_request", recent_body, recent)
    assert again.headers["idempotent-replayed"] == "true" and again.json() == hook.send(
        "pull_request", recent_body, recent).json()
    late = hook.send("pull_request", old_body, old)
    assert late.status_code < 500, late.text
    assert run_sql(database_url, "SELECT count(*) FROM triggers WHERE tenant_id = $1 AND external_id = $2",
                   TENANT, f"{hook.id}/{old}")[0][0] == 1
    assert late.json()["trigger_id"] == first.json()["trigger_id"] and late.headers["idempotent-replayed"] == "true"


def test_a_guid_another_hook_used_is_that_hooks_own_delivery(
        hook: Hook, database_url: str, base_url: str, reader: httpx.Client) -> None:
    """Deliveries are deduplicated per hook: a second hook receiving a GUID the first one used files its own
    bytes on its own thread (it was answered "filed" naming the first hook's trigger, its bytes dropped)."""
    other = new_hook(database_url, TENANT, base_url)
    guid, mine, theirs = str(uuid.uuid4()), fresh_repo(), fresh_repo()
    first = hook.send("pull_request", payload("pull_request.opened", mine), guid)
    raw = json.dumps(payload("pull_request.opened", theirs)).encode()
    second = other.send("pull_request", raw, guid)
    assert (first.status_code, second.status_code) == (201, 201), second.text
    assert "idempotent-replayed" not in second.headers
    assert second.json()["trigger_id"] != first.json()["trigger_id"]
    assert second.json()["thread_id"] == f"thr_gh_{key_of(theirs)}_pr_2"
    assert reader.get(f"{second.headers['location']}/payload").content == raw
    events = reader.get(f"/threads/thr_gh_{key_of(theirs)}_pr_2/events").json()["data"]
    assert [e["ref"] for e in events] == [second.json()["trigger_id"]]


def test_a_trigger_posted_with_a_delivery_guid_never_stands_in_for_that_delivery(
        hook: Hook, reader: httpx.Client) -> None:
    """An API client's trigger with external_id G (its own record of a GitHub event) and a push delivery G to a
    hook are two triggers: the delivery is filed with its own bytes, never answered with the other trigger."""
    guid, repo = str(uuid.uuid4()), fresh_repo()
    planted = reader.post("/triggers", json={"source": "github.push", "summary": "planted", "external_id": guid})
    assert planted.status_code == 201, planted.text
    raw = json.dumps(payload("push.event", repo)).encode()
    r = hook.send("push", raw, guid)
    assert r.status_code == 201 and "idempotent-replayed" not in r.headers, r.text
    assert r.json()["trigger_id"] != planted.json()["id"]
    assert reader.get(f"{r.headers['location']}/payload").content == raw
    assert reader.get(f"/triggers/{planted.json()['id']}").json()["summary"] == "planted"
    assert_problem(reader.post("/triggers", json={"source": "github.push", "summary": "s",
                                                  "external_id": f"{hook.id}/{guid}"}), 422, "hk_")


def test_a_guid_its_hook_used_for_other_bytes_is_409_and_writes_nothing(hook: Hook, database_url: str) -> None:
    """Only a genuine redelivery (the same hook, GUID and bytes) replays the first answer; the same GUID with
    other bytes is refused, so it is never answered as filed while its bytes are dropped."""
    guid = str(uuid.uuid4())
    assert hook.send("pull_request", payload("pull_request.opened", fresh_repo()), guid).status_code == 201
    before = written(database_url, TENANT)
    r = hook.send("pull_request", payload("pull_request.opened", fresh_repo()), guid)
    assert_problem(r, 409, guid)
    assert written(database_url, TENANT) == before


def test_concurrent_redeliveries_file_one_trigger(hook: Hook, database_url: str, reader: httpx.Client) -> None:
    delivery, repo = str(uuid.uuid4()), fresh_repo()
    body = json.dumps(payload("pull_request.opened", repo)).encode()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: hook.send("pull_request", body, delivery), range(8)))
    assert {r.status_code for r in answers} == {201}
    assert len({r.json()["trigger_id"] for r in answers}) == 1
    assert sum(r.headers.get("idempotent-replayed") == "true" for r in answers) == 7
    thread = f"thr_gh_{key_of(repo)}_pr_2"
    assert [e["type"] for e in reader.get(f"/threads/{thread}/events").json()["data"]] == ["trigger_filed"]
    assert run_sql(database_url, "SELECT count(*) FROM triggers WHERE tenant_id = $1 AND external_id = $2",
                   TENANT, f"{hook.id}/{delivery}")[0][0] == 1


def test_concurrent_deliveries_for_one_new_thread_make_it_once(hook: Hook, reader: httpx.Client) -> None:
    repo = fresh_repo()
    bodies = [json.dumps(payload("pull_request_review_comment.created", repo)).encode() for _ in range(6)]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda b: hook.send("pull_request_review_comment", b), bodies))
    assert [r.status_code for r in answers] == [201] * 6, [r.text for r in answers]
    events = reader.get(f"/threads/thr_gh_{key_of(repo)}_pr_2/events").json()["data"]
    assert [e["seq"] for e in events] == list(range(1, 7))


def test_a_delivery_waiting_on_another_transactions_new_thread_files_on_it(
        hook: Hook, reader: httpx.Client, database_url: str) -> None:
    """The thread is made while this delivery's statement waits for the maker to commit: that thread is
    not in the statement's snapshot, and the delivery still files on it (not 404 as a missing one)."""
    repo = fresh_repo()
    thread = f"thr_gh_{key_of(repo)}_pr_2"

    async def race() -> httpx.Response:
        maker = await asyncpg.connect(database_url)
        try:
            async with maker.transaction():
                await maker.execute(
                    "INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)"
                    " VALUES ($1, $2, 'made elsewhere', '', 'open', sha256('x'))", TENANT, thread)
                sent = asyncio.create_task(asyncio.to_thread(
                    hook.send, "pull_request_review_comment", payload("pull_request_review_comment.created", repo)))
                for _ in range(200):  # until the delivery waits on this transaction's thread row
                    waiting = await maker.fetchval(  # (its query column may still show an earlier statement)
                        f"SELECT count(*) FROM {ACTIVITY} WHERE wait_event = 'transactionid'")
                    if waiting or sent.done():
                        break
                    await asyncio.sleep(0.02)
                assert waiting, "the delivery never waited on the uncommitted thread"
            return await sent
        finally:
            await maker.close()

    answer = asyncio.run(race())
    assert answer.status_code == 201, answer.text
    assert answer.json()["thread_id"] == thread
    assert [e["type"] for e in reader.get(f"/threads/{thread}/events").json()["data"]] == ["trigger_filed"]


def test_an_older_delivery_never_moves_a_thread_backwards(hook: Hook, reader: httpx.Client) -> None:
    repo = fresh_repo()
    thread = f"thr_gh_{key_of(repo)}_pr_2"
    closed = payload("pull_request.closed", repo, pull_request__title="Final title",
                     pull_request__updated_at="2026-01-01T10:00:02Z")
    edited = payload("pull_request.opened", repo, action="edited", pull_request__title="Older title",
                     pull_request__updated_at="2026-01-01T10:00:01Z")
    assert hook.send("pull_request", closed).json()["thread_state"] == "applied"
    late = hook.send("pull_request", edited)  # sent later, happened earlier
    assert late.status_code == 201 and late.json()["thread_state"] == "stale"
    view = reader.get(f"/threads/{thread}").json()
    assert (view["status"], view["title"]) == ("closed", "Final title")
    assert [e["summary"] for e in view["events"]] == [  # oldest first
        "PR #2 closed without merging by Codertocat: Final title",
        "PR #2 edited by Codertocat: Older title",  # filed: it happened; it just is not the newest state
    ]
    reopened = payload("pull_request.reopened", repo, pull_request__updated_at="2026-01-01T10:00:03Z")
    assert hook.send("pull_request", reopened).json()["thread_state"] == "applied"
    view = reader.get(f"/threads/{thread}").json()
    assert view["status"] == "open" and view["events"][-1]["summary"] == "status: closed -> open"


# ---- administration over HTTP -----------------------------------------------------------------------


def test_admin_routes_create_list_and_revoke_hooks_in_the_callers_tenant(
        database_url: str, base_url: str) -> None:
    admin = create_key(database_url, "gh-admin", "admin")
    writer = create_key(database_url, "gh-admin", "write")
    stranger = create_key(database_url, "gh-stranger", "admin")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {admin}"}) as c:
        made = c.post("/admin/hooks", json={"source": "github", "label": "ci"})
        assert made.status_code == 201, made.text
        new = made.json()
        assert made.headers["location"] == f"/admin/hooks/{new['id']}"
        assert new["url"] == f"/hooks/github/{new['id']}" and new["tenant"] == "gh-admin"
        hook = Hook(base_url, new["id"], new["secret"])
        assert hook.send("ping", payload("ping.event")).json()["outcome"] == "pong"  # its secret signs
        listed = c.get("/admin/hooks").json()["data"]
        assert [h["id"] for h in listed] == [new["id"]] and "secret" not in listed[0]
        assert_problem(c.post("/admin/hooks", json={"source": "gitlab"}), 400)
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {stranger}"}) as s:
            assert_problem(s.delete(f"/admin/hooks/{new['id']}"), 404)
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {writer}"}) as w:
            assert_problem(w.post("/admin/hooks", json={"source": "github"}), 403)
        revoked = c.delete(f"/admin/hooks/{new['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"]
        assert_problem(hook.send("ping", payload("ping.event")), 404)


def test_ping_is_answered_and_stores_nothing(hook: Hook, database_url: str) -> None:
    before = written(database_url, TENANT)
    r = hook.send("ping", payload("ping.event"), "ping-1")
    assert (r.status_code, r.json()) == (200, {"delivery": "ping-1", "event": "ping", "outcome": "pong"})
    assert written(database_url, TENANT) == before


# ---- the story ----------------------------------------------------------------------------------------


def test_the_pr_412_story_from_webhooks_alone_is_recalled_in_three_hops(
        hook: Hook, reader: httpx.Client, server: ServerProcess) -> None:
    """pull_request opened #412, a review comment, a failing check run whose output says why, the merge:
    then an agent that knows only the thread ID finds the cause in three GETs."""
    repo = f"acme/payments-{uuid.uuid4().hex[:6]}"
    thread = f"thr_gh_{key_of(repo)}_pr_412"
    log = "\n".join(f"test_checkout_{i} PASSED" for i in range(2000)) + \
        "\nFAILED tests/test_charge.py::test_capture - payment timeout after 30s (gateway did not answer)\n"
    steps = [
        ("pull_request", payload("pull_request.opened", repo, number=412, pull_request__number=412,
                                 pull_request__title="Retry card captures on gateway errors",
                                 pull_request__updated_at="2026-11-30T09:00:00Z")),
        ("pull_request_review_comment", payload("pull_request_review_comment.created", repo,
                                                pull_request__number=412,
                                                pull_request__updated_at="2026-11-30T09:10:00Z",
                                                comment__body="Should the retry have a timeout?")),
        ("check_run", payload("check_run.completed", repo, check_run__name="payments-tests",
                              check_run__pull_requests=[{"number": 412}],
                              check_run__output={"title": "1 failed", "summary": "payments-tests failed",
                                                 "text": log})),
        ("pull_request", payload("pull_request.closed", repo, number=412, pull_request__number=412,
                                 pull_request__merged=True, pull_request__merged_at="2026-11-30T10:00:00Z",
                                 pull_request__title="Retry card captures on gateway errors",
                                 pull_request__updated_at="2026-11-30T10:00:00Z")),
    ]
    for event, body in steps:
        assert hook.send(event, body).status_code == 201

    view = reader.get(f"/threads/{thread}")  # hop 1: the thread the agent can name itself
    assert view.json()["status"] == "merged"
    ci = next(e for e in view.json()["events"] if e["summary"].startswith("CI failed"))
    assert ci["summary"] == "CI failed on PR #412: payments-tests (failure)"
    trigger = reader.get(f"/triggers/{ci['ref']}").json()  # hop 2: the check run, its log spilled
    assert trigger["source"] == "github.check_run" and "payload" not in trigger
    href = trigger["spilled"]["payload"]["href"]
    payload_text = reader.get(href).text  # hop 3: the delivery as GitHub sent it
    assert "payment timeout after 30s" in payload_text
    assert len(view.content) + len(json.dumps(trigger)) < 8192
    logged = server.log.read_text()
    assert hook.id in logged  # the access log shows the path; never the secret, a signature or a payload
    assert hook.secret not in logged and "payment timeout" not in logged and "sha256=" not in logged


# ---- text from GitHub keeps the API's rules ------------------------------------------------------------


def test_webhook_text_keeps_the_one_line_rules_the_api_enforces(hook: Hook, reader: httpx.Client, sql) -> None:
    """A PR title with bidi controls (U+202E, U+2066/U+2069, U+200E, U+061C) and line breaks is stored
    without them: titles and summaries a delivery writes are ones the API itself would accept."""
    from recall_server.models import OneLine

    repo = fresh_repo()
    title = "Fix \u202etxt.exe\u202c \u2066a\u2069 \u200eb\u200f \u061cc\nd\te"
    r = hook.send("pull_request", payload("pull_request.opened", repo, pull_request__title=title))
    assert r.status_code == 201, r.text
    thread = f"thr_gh_{key_of(repo)}_pr_2"
    view = reader.get(f"/threads/{thread}").json()
    assert view["title"] == "Fix txt.exe a b c d e"
    stored = [view["title"], view["summary"], *(e["summary"] for e in view["events"]),
              reader.get(r.headers["location"]).json()["summary"]]
    stored += [row[0] for row in sql("SELECT summary FROM thread_events WHERE thread_id = $1", thread)]
    assert all(re.match(OneLine, text) for text in stored), stored
    assert reader.patch(f"/threads/{thread}", json={"title": view["title"], "summary": view["summary"]}).status_code == 200
