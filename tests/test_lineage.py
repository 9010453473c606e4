"""Lineage: erasing a source reaches the memories learned from it, directly or through other memories, as the
tenant's lineage policy says (erase, flag, keep), and verify-erasure reports each one."""

from __future__ import annotations

import subprocess
import sys
import os
import uuid
from collections.abc import Iterator

import httpx
import pytest
from helpers import assert_problem, cli, create_key
from test_lifecycle import tables_holding


@pytest.fixture()
def tenant(base_url: str, database_url: str) -> Iterator[tuple[str, httpx.Client]]:
    """A tenant of its own (a policy is a tenant's), with a write key's client."""
    name = f"lineage-{uuid.uuid4().hex[:12]}"
    key = create_key(database_url, name, "write")
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {key}"}) as c:
        yield name, c


def idem() -> dict[str, str]:
    return {"Idempotency-Key": f"k-{uuid.uuid4()}"}


def remember(c: httpx.Client, key: str, marker: str, sources: list[str], **kw: object) -> dict:
    """A memory holding `marker`, learned from `sources`, written with an Idempotency-Key (a stored response)."""
    made = c.post("/memories", json={"namespace": ["lineage"], "key": key, "value": {"note": f"{key} {marker}"},
                                     "summary": f"{key} {marker}", "sources": sources, **kw}, headers=idem())
    assert made.status_code == 201, made.text
    return made.json()


def chain(c: httpx.Client, marker: str) -> tuple[str, list[str], str]:
    """A trigger, a memory learned from it (two versions: the second cites it too, the first cites it alone)
    and a memory learned from that memory: the trigger's ID, the first memory's versions, the second's ID."""
    trigger = c.post("/triggers", json={"source": "ci", "summary": f"failed {marker}", "payload": {"log": marker}},
                     headers=idem())
    assert trigger.status_code == 201, trigger.text
    source = trigger.json()["id"]
    first = remember(c, "first", marker, [source])
    second_version = remember(c, "first", marker, [source])
    derived = remember(c, "second", marker, [second_version["id"]])  # two levels down from the trigger
    return source, [first["id"], second_version["id"]], derived["id"]


def lineage_rows(sql, tenant: str) -> set[tuple[str, str, str]]:
    return {(r["memory_id"], r["source_id"], r["policy"])
            for r in sql("SELECT memory_id, source_id, policy FROM memory_lineage WHERE tenant_id = $1", tenant)}


def search_ids(c: httpx.Client, marker: str) -> list[dict]:
    page = c.get("/search", params={"q": marker, "mode": "lexical", "rerank": "false"})
    assert page.status_code == 200, page.text
    return page.json()["data"]


def test_erase_policy_erases_the_memories_two_levels_down_in_every_table(tenant, sql, database_url: str) -> None:
    name, c = tenant
    cli(database_url, "tenants", "lineage", name, "--policy", "erase")
    marker = f"zq9{uuid.uuid4().hex[:16]}"
    source, versions, derived = chain(c, marker)
    assert {"memories.value", "idempotency_keys.body", "memories.search"} <= set(tables_holding(sql, marker))

    assert c.delete(f"/triggers/{source}").status_code == 204

    for memory in (*versions, derived):
        assert_problem(c.get(f"/memories/{memory}"), 410)
    assert tables_holding(sql, marker) == []  # values, search vectors, stored responses: every copy
    assert search_ids(c, marker) == []
    assert lineage_rows(sql, name) == {(versions[0], source, "erase"), (versions[1], source, "erase"),
                                       (derived, source, "erase")}
    out = cli(database_url, "verify-erasure", "--tenant", name, source)
    assert "erased (no content found)" in out, out
    assert f"lineage: {derived}, learned from it: erased (policy erase)" in out, out


def test_flag_policy_keeps_them_marked_source_erased_in_views_and_search(tenant, sql, database_url: str) -> None:
    name, c = tenant  # flag is the default
    marker = f"zq9{uuid.uuid4().hex[:16]}"
    source, versions, derived = chain(c, marker)

    assert c.delete(f"/triggers/{source}").status_code == 204

    for memory in (*versions, derived):
        view = c.get(f"/memories/{memory}")
        assert view.status_code == 200 and view.json()["source_erased"] == [source], view.text
        assert marker in view.text  # kept: the policy keeps the memory as it is, flagged
    hits = {h["id"]: h for h in search_ids(c, marker)}
    assert set(hits) == {versions[1], derived}  # current versions only, as always
    assert all(h["source_erased"] == [source] for h in hits.values()), hits
    listed = c.get("/memories", params={"namespace": "lineage"}).json()["data"]
    assert {e["id"]: e.get("source_erased") for e in listed} == {versions[1]: [source], derived: [source]}
    held = tables_holding(sql, marker)
    assert not any(t.startswith(("triggers.", "thread_events.")) for t in held), held  # the source itself: erased
    assert lineage_rows(sql, name) == {(m, source, "flag") for m in (*versions, derived)}
    out = cli(database_url, "verify-erasure", "--tenant", name, source)
    assert "erased (no content found)" in out, out
    assert f"lineage: {derived}, learned from it: kept, flagged source_erased (policy flag)" in out, out


def test_keep_policy_records_the_lineage_and_changes_nothing(tenant, sql, database_url: str) -> None:
    name, c = tenant
    cli(database_url, "tenants", "lineage", name, "--policy", "keep")
    marker = f"zq9{uuid.uuid4().hex[:16]}"
    source, versions, derived = chain(c, marker)
    before = {m: c.get(f"/memories/{m}").json() for m in (*versions, derived)}

    assert c.delete(f"/triggers/{source}").status_code == 204

    for memory in (*versions, derived):
        view = c.get(f"/memories/{memory}").json()
        assert "source_erased" not in view
        assert {k: v for k, v in view.items() if k != "sources"} == \
            {k: v for k, v in before[memory].items() if k != "sources"}
    assert all("source_erased" not in h for h in search_ids(c, marker))
    assert lineage_rows(sql, name) == {(m, source, "keep") for m in (*versions, derived)}
    out = cli(database_url, "verify-erasure", "--tenant", name, source)
    assert f"lineage: {derived}, learned from it: kept as it is (policy keep)" in out, out


def test_a_message_source_is_erased_with_its_thread_and_flagged_by_a_retraction(tenant, sql,
                                                                             database_url: str) -> None:
    name, c = tenant
    marker = f"zq9{uuid.uuid4().hex[:16]}"
    thread = c.post("/threads", json={"title": "chat"}).json()["id"]
    said = c.post(f"/threads/{thread}/messages", json={"messages": [
        {"role": "user", "content": f"I prefer {marker}"}, {"role": "assistant", "content": "noted"}]})
    assert said.status_code == 201, said.text
    first = remember(c, "pref", marker, [f"{thread}/1"])
    assert first["sources"] == [{"id": f"{thread}/1", "summary": f"user: I prefer {marker}"}]
    derived = remember(c, "derived", marker, [first["id"]])
    assert_problem(c.post("/memories", json={"namespace": ["lineage"], "key": "k", "value": 1,
                                             "sources": [f"{thread}/9"]}), 422)  # no such message

    # a retraction takes the message out of the conversation, and out of what may be learned from it
    assert c.post(f"/threads/{thread}/messages/retractions", json={"seqs": [1]}).status_code == 201
    for memory in (first["id"], derived["id"]):
        assert c.get(f"/memories/{memory}").json()["source_erased"] == [f"{thread}/1"]
    assert c.get(f"/memories/{first['id']}").json()["sources"] == [{"id": f"{thread}/1", "deleted": True}]

    # erasing the thread erases its messages (a retraction only hid the first): under the erase policy the
    # memories learned from either go, those flagged before included
    cli(database_url, "tenants", "lineage", name, "--policy", "erase")
    again = remember(c, "again", marker, [f"{thread}/2"])
    assert c.delete(f"/threads/{thread}").status_code == 204
    for memory in (again["id"], first["id"], derived["id"]):
        assert_problem(c.get(f"/memories/{memory}"), 410)
    assert tables_holding(sql, marker) == []
    out = cli(database_url, "verify-erasure", "--tenant", name, thread)
    assert "erased (no content found)" in out, out
    for memory in (again["id"], first["id"], derived["id"]):
        assert f"lineage: {memory}, learned from it: erased (policy erase)" in out, out


def test_a_memory_citing_an_erased_source_without_its_lineage_is_a_finding(tenant, sql, database_url: str) -> None:
    name, c = tenant
    source, versions, derived = chain(c, f"zq9{uuid.uuid4().hex[:16]}")
    assert c.delete(f"/triggers/{source}").status_code == 204
    sql("DELETE FROM memory_lineage WHERE tenant_id = $1", name)  # as a store erased before lineage was kept
    run = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", "--tenant", name, source],
                         env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"memory_sources: {versions[0]} cites it, and its lineage was never followed" in run.stdout, run.stdout


def test_the_lineage_policy_command_refuses_an_unknown_tenant_or_policy(database_url: str) -> None:
    from click.testing import CliRunner

    from recall_server.cli import main

    runner = CliRunner(env={"DATABASE_URL": database_url})
    assert runner.invoke(main, ["tenants", "lineage", "nobody-here", "--policy", "erase"]).exit_code == 1
    assert runner.invoke(main, ["tenants", "lineage", "default", "--policy", "forget"]).exit_code == 2


def test_the_policy_is_the_tenants_and_reaches_memories_outside_the_erasing_keys_grants(
        base_url: str, database_url: str) -> None:
    """A key with grants erases a trigger in its namespace: a memory learned from it in another subject's
    namespace, which the key can neither read nor write, is erased all the same (policy erase)."""
    name = f"lineage-{uuid.uuid4().hex[:12]}"
    service, admin = create_key(database_url, name, "write"), create_key(database_url, name, "admin")
    cli(database_url, "tenants", "lineage", name, "--policy", "erase")
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {service}"}) as c, \
            httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {admin}"}) as a:
        made = a.post("/admin/keys", json={"scope": "write", "subject": "user:u1",
                                           "grants": [{"namespace": "users/{subject_id}/**", "access": "write"}]})
        assert made.status_code == 201, made.text
        with httpx.Client(base_url=base_url, timeout=30,
                          headers={"Authorization": f"Bearer {made.json()['key']}"}) as bob:
            trigger = bob.post("/triggers", json={"source": "ci", "summary": "s", "namespace": ["users", "u1"]})
            assert trigger.status_code == 201, trigger.text
            learned = c.post("/memories", json={"namespace": ["users", "u2"], "key": "k", "value": "v",
                                                "sources": [trigger.json()["id"]]})
            assert learned.status_code == 201, learned.text
            assert bob.get(f"/memories/{learned.json()['id']}").status_code == 404  # outside its grants
            assert bob.delete(f"/triggers/{trigger.json()['id']}").status_code == 204
        assert_problem(c.get(f"/memories/{learned.json()['id']}"), 410)
