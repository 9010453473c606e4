"""Who may write what: every write route of the API x every kind of key (admin, write scope, read scope, a write
grant, a read grant, no grant on the namespace of the rows it touches), each with its status and whether the
rows changed, against a live server. Generated from the app's route table: a new write route without an entry
here fails `test_every_write_route_is_in_a_matrix`. LangGraph's checkpoint routes have their own matrix
(test_checkpoint_authorisation.py), which this one counts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from helpers import Graph, ServerProcess, run_sql, tenant_with_keys, uid
from test_checkpoint_authorisation import WRITE_ROUTES as CHECKPOINT_ROUTES

from recall_server import config
from recall_server.app import create_app

TEAM = ["teams", "pay"]
CALLERS = ["admin", "write scope", "read scope", "write grant", "read grant", "no grant"]

# Routes that are not the API's data writes, and why they are not in the matrix.
ELSEWHERE = {
    "DeliverGitHub": "keyless: a webhook delivery is authorised by its HMAC signature (test_webhooks.py)",
    **{op: "LangGraph's checkpoints: test_checkpoint_authorisation.py" for op in CHECKPOINT_ROUTES},
}
ADMIN_ONLY = {"CreateHook", "RevokeHook", "CreateKey", "RevokeKey", "UpdateKey"}


def write_routes() -> set[str]:
    app = create_app(config.Settings(database_url="postgresql://unused"))
    return {handler.operation_id for route in app.routes for handler in getattr(route, "route_handlers", [])
            if set(handler.http_methods) - {"GET", "HEAD", "OPTIONS"}}


@pytest.fixture(scope="module")
def tenant(database_url: str, server: ServerProcess) -> dict[str, str]:
    return tenant_with_keys(database_url, "authz")


@pytest.fixture(scope="module")
def keys(tenant: dict[str, str], http) -> dict[str, str]:
    admin = http(tenant["admin"])

    def issue(team_access: str | None) -> str:
        grants = [{"namespace": "users/{subject_id}/**", "access": "write"}]
        if team_access:
            grants.append({"namespace": "teams/pay/**", "access": team_access})
        made = admin.post("/admin/keys", json={"scope": "write", "subject": f"user:{uid('u')[2:]}", "grants": grants})
        assert made.status_code == 201, made.text
        return made.json()["key"]

    return {"admin": tenant["admin"], "write scope": tenant["write"], "read scope": tenant["read"],
            "write grant": issue("write"), "read grant": issue("read"), "no grant": issue(None)}


class Team:
    """A thread, a worker that owns it, a trigger and a report on it, a memory and two messages, all in the
    team's namespace, made by the tenant's write key for one case."""

    def __init__(self, c: httpx.Client) -> None:
        g = Graph(c)
        self.worker = g.worker(namespace=TEAM)["id"]
        self.helper = g.worker(namespace=TEAM)["id"]  # to be assigned
        self.thread = g.thread(namespace=TEAM)["id"]
        assert c.post(f"/threads/{self.thread}/owners", json={"worker_id": self.worker}).status_code in (200, 201)
        self.trigger = g.trigger(namespace=TEAM, thread_id=self.thread)["id"]
        self.report = g.report(self.worker, self.thread, namespace=TEAM)["id"]
        memory = c.post("/memories", json={"namespace": TEAM, "key": uid("k"), "value": "refunds in 30 days",
                                           "ttl": 86400})
        assert memory.status_code == 201, memory.text
        self.memory, self.memory_key = memory.json()["id"], memory.json()["key"]
        said = c.post(f"/threads/{self.thread}/messages",
                      json={"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]})
        assert said.status_code == 201, said.text


def count(database_url: str, tenant: str, sql: str, *args: Any) -> Any:
    return run_sql(database_url, sql.replace("{tenant}", "$1"), tenant, *args)[0][0]


# Each route: what it sends (c: the caller's client, t: the team's objects), the status when allowed, and
# what it changes (a value read as the owner before and after: it differs exactly when the write was made).
Send = Callable[[httpx.Client, Team], httpx.Response]
State = Callable[[str, str, Team], Any]
MARK = "authz-mark"


def _made(table: str) -> State:
    return lambda db, tenant, t: count(db, tenant, f"SELECT count(*) FROM {table} WHERE tenant_id = {{tenant}} "
                                                   f"AND summary = '{MARK}'")


def _live(table: str, attr: str) -> State:
    return lambda db, tenant, t: count(db, tenant, f"SELECT deleted_at IS NULL FROM {table} WHERE tenant_id = "
                                                   "{tenant} AND id = $2", getattr(t, attr))


def _events(db: str, tenant: str, t: Team) -> Any:
    return count(db, tenant, "SELECT count(*) FROM thread_events WHERE tenant_id = {tenant} AND thread_id = $2",
                 t.thread)


ROUTES: dict[str, tuple[Send, int, State]] = {
    "CreateThread": (lambda c, t: c.post("/threads", json={"id": uid("thr"), "title": "t", "summary": MARK,
                                                          "namespace": TEAM}), 201, _made("threads")),
    "UpdateThread": (lambda c, t: c.patch(f"/threads/{t.thread}", json={"status": "closed"}), 200,
                     lambda db, tenant, t: count(db, tenant, "SELECT status FROM threads WHERE tenant_id = {tenant} "
                                                             "AND id = $2", t.thread)),
    "DeleteThread": (lambda c, t: c.delete(f"/threads/{t.thread}"), 204, _live("threads", "thread")),
    "AddNote": (lambda c, t: c.post(f"/threads/{t.thread}/events", json={"summary": MARK}), 201, _events),
    "AppendMessages": (lambda c, t: c.post(f"/threads/{t.thread}/messages",
                                           json={"messages": [{"role": "user", "content": MARK}]}), 201, _events),
    "RetractMessages": (lambda c, t: c.post(f"/threads/{t.thread}/messages/retractions",
                                            json={"newest": 1}), 201, _events),
    "AssignOwner": (lambda c, t: c.post(f"/threads/{t.thread}/owners", json={"worker_id": t.helper}), 201,
                    lambda db, tenant, t: count(db, tenant, "SELECT count(*) FROM thread_owners WHERE tenant_id = "
                                                            "{tenant} AND thread_id = $2", t.thread)),
    "CreateWorker": (lambda c, t: c.post("/workers", json={"id": uid("wkr"), "name": "w", "summary": MARK,
                                                          "namespace": TEAM}), 201, _made("workers")),
    "DeleteWorker": (lambda c, t: c.delete(f"/workers/{t.worker}"), 204, _live("workers", "worker")),
    "CreateTrigger": (lambda c, t: c.post("/triggers", json={"id": uid("trg"), "source": "test", "summary": MARK,
                                                            "payload": {"k": 1}, "thread_id": t.thread,
                                                            "namespace": TEAM}), 201, _made("triggers")),
    "DeleteTrigger": (lambda c, t: c.delete(f"/triggers/{t.trigger}"), 204, _live("triggers", "trigger")),
    "CreateReport": (lambda c, t: c.post(f"/workers/{t.worker}/reports",
                                         json={"id": uid("rpt"), "thread_id": t.thread, "summary": MARK, "body": "b",
                                               "namespace": TEAM}), 201, _made("reports")),
    "DeleteReport": (lambda c, t: c.delete(f"/reports/{t.report}"), 204, _live("reports", "report")),
    "CreateMemory": (lambda c, t: c.post("/memories", json={"namespace": TEAM, "key": t.memory_key, "summary": MARK,
                                                           "value": "changed"}), 201, _made("memories")),
    "DeleteMemory": (lambda c, t: c.delete(f"/memories/{t.memory}"), 204, _live("memories", "memory")),
    "RefreshMemories": (lambda c, t: c.post("/memories/refresh", json={"ids": [t.memory]}), 200,
                        lambda db, tenant, t: count(db, tenant, "SELECT expires_at FROM memories WHERE tenant_id = "
                                                                "{tenant} AND id = $2", t.memory)),
}


# A key with no grant on the team cannot see its objects: a write to one answers as for an object that never
# existed (404 by path, 422 for a linked ID), and a create into the team's namespace is refused (403).
UNSEEN = {"CreateThread": 403, "CreateWorker": 403, "CreateMemory": 403, "CreateTrigger": 422}
# A refresh answers the memories it extended: one the key cannot see is left out, as an unknown ID is (200).
UNSEEN_UNCHANGED = {"RefreshMemories": 200}


def expected(route: str, caller: str, allowed: int) -> int:
    """The status a caller gets: read scopes and read grants are refused (403); see UNSEEN for no grant."""
    if caller in ("read scope", "read grant"):
        return 403
    if caller == "no grant":
        return UNSEEN_UNCHANGED.get(route) or UNSEEN.get(route, 404)
    return allowed


def test_every_write_route_is_in_a_matrix() -> None:
    assert write_routes() == set(ROUTES) | ADMIN_ONLY | set(ELSEWHERE)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_write_is_made_only_with_the_scope_and_grants_it_needs(
        route: str, caller: str, tenant: dict[str, str], keys: dict[str, str], http, database_url: str) -> None:
    send, allowed, state = ROUTES[route]
    team = Team(http(tenant["write"]))
    before = state(database_url, tenant["name"], team)
    response = send(http(keys[caller]), team)
    want = expected(route, caller, allowed)
    assert response.status_code == want, (response.status_code, response.text)
    if want >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
    after = state(database_url, tenant["name"], team)
    made = want == allowed and not (caller == "no grant" and route in UNSEEN_UNCHANGED)
    assert (after != before) == made, (before, after)


@pytest.mark.parametrize("caller", CALLERS)
def test_administering_keys_and_hooks_needs_an_admin_key_without_grants(
        caller: str, tenant: dict[str, str], keys: dict[str, str], http, database_url: str) -> None:
    c = http(keys[caller])
    before = count(database_url, tenant["name"], "SELECT count(*) FROM api_keys WHERE tenant_id = {tenant}")
    made = c.post("/admin/keys", json={"scope": "read"})
    after = count(database_url, tenant["name"], "SELECT count(*) FROM api_keys WHERE tenant_id = {tenant}")
    assert made.status_code == (201 if caller == "admin" else 403), made.text
    assert after - before == (1 if caller == "admin" else 0)
