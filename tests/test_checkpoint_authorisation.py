"""Who may write a LangGraph thread's checkpoints: every checkpoint write route x every kind of key (admin,
write scope, read scope, a write grant, a read grant, no grant on the thread's namespace), each with its
status and the rows it leaves, against a live server. A write the key's scope or grants do not allow is a
problem (403, or the answer for a thread that never existed when the key cannot see it) and changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import msgspec
import pytest
from helpers import ServerProcess, run_sql, tenant_with_keys

from recall_server.models import ChannelBlob, PutCheckpoint, PutWrites, WriteItem
from recall_server.routes.checkpoints import ROUTES

TEAM = "teams/pay"


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def tenant(database_url: str, server: ServerProcess) -> dict[str, str]:
    return tenant_with_keys(database_url, "ckauth")


@pytest.fixture(scope="module")
def keys(tenant: dict[str, str], http) -> dict[str, tuple[str, list[str] | None]]:
    """Each kind of caller: its key and the namespace of its own threads (the keys with grants write their
    user namespace; the others the whole tenant, their own threads in the root)."""
    admin = http(tenant["admin"])

    def issue(team_access: str | None) -> tuple[str, list[str]]:
        user = fresh("u")
        grants = [{"namespace": "users/{subject_id}/**", "access": "write"}]
        if team_access:
            grants.append({"namespace": f"{TEAM}/**", "access": team_access})
        made = admin.post("/admin/keys", json={"scope": "write", "subject": f"user:{user}", "grants": grants})
        assert made.status_code == 201, made.text
        return made.json()["key"], ["users", user]

    return {"admin": (tenant["admin"], None), "write scope": (tenant["write"], None),
            "read scope": (tenant["read"], None), "write grant": issue("write"), "read grant": issue("read"),
            "no grant": issue(None)}


def put_body(thread: str, checkpoint_id: str, namespace: list[str] | None, run_id: str = "run") -> bytes:
    return msgspec.json.encode(PutCheckpoint(
        thread_id=thread, checkpoint_id=checkpoint_id, type="msgpack", checkpoint=b"\x80",
        channel_versions={"a": checkpoint_id}, metadata={"run_id": run_id},
        blobs=[ChannelBlob(channel="a", version=checkpoint_id, type="msgpack", data=b"secret value")],
        namespace=namespace))


def team_thread(c: httpx.Client, run_id: str) -> str:
    """A thread in the team's namespace with two checkpoints (of run `run_id`) and a pending write."""
    thread = fresh("team")
    for cid in ("cp-1", "cp-2"):
        assert c.post("/checkpoints", content=put_body(thread, cid, TEAM.split("/"), run_id)).status_code == 201
    writes = PutWrites(thread_id=thread, checkpoint_id="cp-2", task_id="task",
                       writes=[WriteItem(idx=0, channel="a", type="msgpack", data=b"w")])
    assert c.post("/checkpoints/writes", content=msgspec.json.encode(writes)).status_code == 204
    return thread


def rows(database_url: str, tenant: str, thread: str) -> tuple[int, int, int]:
    """(checkpoints, channel values, pending writes) of the thread, read as the owner."""
    return tuple(run_sql(database_url, f"SELECT count(*) FROM {table} WHERE tenant_id = $1 AND thread_id = $2",
                         tenant, thread)[0][0] for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"))


# Each write route: what it sends for thread T (of run R; S a thread of the caller's own), and the rows of T
# it leaves when allowed. T starts with (2 checkpoints, 2 values, 1 write).
def _put(c: httpx.Client, t: str, r: str, s: str) -> httpx.Response:
    return c.post("/checkpoints", content=put_body(t, "cp-3", TEAM.split("/")))


def _writes(c: httpx.Client, t: str, r: str, s: str) -> httpx.Response:
    body = PutWrites(thread_id=t, checkpoint_id="cp-2", task_id="other",
                     writes=[WriteItem(idx=0, channel="a", type="msgpack", data=b"x")], namespace=TEAM.split("/"))
    return c.post("/checkpoints/writes", content=msgspec.json.encode(body))


def _prune(c: httpx.Client, t: str, r: str, s: str) -> httpx.Response:
    return c.post("/checkpoints/prune", json={"thread_ids": [t], "keep": 0})


def _runs(c: httpx.Client, t: str, r: str, s: str) -> httpx.Response:
    return c.post("/checkpoints/delete-runs", json={"run_ids": [r]})


def _copy(c: httpx.Client, t: str, r: str, s: str) -> httpx.Response:
    return c.post("/checkpoints/copy", json={"source_thread_id": s, "target_thread_id": t})


def _delete(c: httpx.Client, t: str, r: str, s: str) -> httpx.Response:
    return c.delete("/checkpoints", params={"thread_id": t})


UNCHANGED = (2, 2, 1)
WRITE_ROUTES: dict[str, tuple[Callable[..., httpx.Response], int, tuple[int, int, int]]] = {
    "PutCheckpoint": (_put, 201, (3, 3, 1)),
    "PutCheckpointWrites": (_writes, 204, (2, 2, 2)),
    "PruneCheckpoints": (_prune, 200, (0, 0, 0)),
    "DeleteCheckpointRuns": (_runs, 200, (0, 0, 0)),
    "CopyCheckpointThread": (_copy, 200, (3, 3, 1)),
    "DeleteCheckpointThread": (_delete, 204, (0, 0, 0)),
}
# Who is refused, and how: a read scope or a read grant with a 403; a key that cannot see T as it answers for
# a thread that never existed (a put or a copy into it: 403, as for any thread outside the grants).
REFUSED = {"read scope": 403, "read grant": 403}
UNSEEN = {"PutCheckpoint": 403, "PutCheckpointWrites": 403, "PruneCheckpoints": 200, "DeleteCheckpointRuns": 200,
          "CopyCheckpointThread": 403, "DeleteCheckpointThread": 404}
CALLERS = ["admin", "write scope", "read scope", "write grant", "read grant", "no grant"]


def test_every_checkpoint_write_route_is_in_the_matrix() -> None:
    writes = {route.operation_id for route in ROUTES if "GET" not in route.http_methods}
    assert writes == set(WRITE_ROUTES)


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("route", list(WRITE_ROUTES))
def test_a_checkpoint_write_is_allowed_only_by_scope_and_grants(
        route: str, caller: str, tenant: dict[str, str], keys: dict[str, str], http, database_url: str) -> None:
    send, allowed, after = WRITE_ROUTES[route]
    owner = http(tenant["write"])
    run_id = fresh("run")
    thread = team_thread(owner, run_id)
    own = fresh("own")  # a thread of the caller's own (made by the write key for a read-scope key): a copy's source
    key, namespace = keys[caller]
    c = http(key)
    made = (owner if caller == "read scope" else c).post("/checkpoints", content=put_body(own, "cp-9", namespace))
    assert made.status_code == 201, made.text
    response = send(c, thread, run_id, own)
    expected = REFUSED.get(caller, UNSEEN[route] if caller == "no grant" else allowed)
    assert response.status_code == expected, (response.status_code, response.text)
    if expected >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
    changed = expected == allowed and caller != "no grant"
    assert rows(database_url, tenant["name"], thread) == (after if changed else UNCHANGED)

