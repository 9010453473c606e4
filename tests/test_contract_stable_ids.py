"""Contract 1: an ID names the same object on every fetch, across restarts, and is never reassigned."""

from __future__ import annotations

import re

import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, uid


def test_the_same_id_fetched_twice_is_the_same_object(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread()
    first = client.get(f"/threads/{thread['id']}")
    second = client.get(f"/threads/{thread['id']}")
    assert first.status_code == second.status_code == 200
    assert first.json() == second.json() == thread


def test_server_generated_ids_have_the_kind_prefix_and_sort_by_creation(client: httpx.Client) -> None:
    made = [client.post("/threads", json={"title": f"t{i}"}).json()["id"] for i in range(3)]
    for value in made:
        assert re.fullmatch(r"thr_[0-9A-Z]{26}", value)
    assert made == sorted(made)
    assert len(set(made)) == 3


@pytest.mark.slow
def test_objects_survive_a_server_restart_unchanged(database_url: str, tmp_path, graph: Graph) -> None:
    worker = graph.worker()
    thread = graph.thread()
    graph.c.post(f"/threads/{thread['id']}/owners", json={"worker_id": worker["id"]})
    trigger = graph.trigger(thread_id=thread["id"])
    before = {path: graph.c.get(path).json() for path in
              (f"/threads/{thread['id']}", f"/workers/{worker['id']}", f"/triggers/{trigger['id']}")}

    other = ServerProcess(database_url, tmp_path / "restart.log").start()
    try:
        other.stop()
        again = ServerProcess(database_url, tmp_path / "restart2.log").start()
        try:
            with httpx.Client(base_url=again.url, headers=graph.c.headers) as c:
                for path, view in before.items():
                    assert c.get(path).json() == view
        finally:
            again.stop()
    finally:
        other.stop()


def test_identical_create_is_an_idempotent_retry(client: httpx.Client) -> None:
    body = {"id": uid("thr"), "title": "retry me", "summary": "s"}
    first = client.post("/threads", json=body)
    retry = client.post("/threads", json=body)
    assert first.status_code == 201 and retry.status_code == 200
    assert retry.json() == first.json()
    assert retry.headers["location"] == first.headers["location"] == f"/threads/{body['id']}"


def test_create_with_an_existing_id_and_a_different_body_is_409(client: httpx.Client, graph: Graph) -> None:
    thread = graph.thread(title="original")
    clash = client.post("/threads", json={"id": thread["id"], "title": "impostor", "summary": "a thread"})
    assert_problem(clash, 409, thread["id"])
    assert client.get(f"/threads/{thread['id']}").json()["title"] == "original"


def test_every_kind_refuses_a_clashing_create(client: httpx.Client, graph: Graph) -> None:
    worker, thread = graph.worker(), graph.thread()
    trigger = graph.trigger()
    report = graph.report(worker["id"], thread["id"])
    assert_problem(client.post("/workers", json={"id": worker["id"], "name": "other"}), 409)
    assert_problem(client.post("/triggers", json={"id": trigger["id"], "source": "x", "summary": "other"}), 409)
    assert_problem(client.post(f"/workers/{worker['id']}/reports",
                               json={"id": report["id"], "thread_id": thread["id"], "summary": "other"}), 409)


def test_a_client_id_with_the_wrong_prefix_is_400(client: httpx.Client) -> None:
    assert_problem(client.post("/threads", json={"id": "wkr_not_a_thread", "title": "t"}), 400, "'^thr_")
    assert_problem(client.post("/workers", json={"id": "thr_x", "name": "n"}), 400, "'^wkr_")
    assert_problem(client.post("/triggers", json={"id": "rpt_x", "source": "s", "summary": "s"}), 400, "'^trg_")
    assert_problem(client.get("/ids/wkr_not_a_thread"), 404)  # nothing was created


def test_natural_keys_from_the_issue_are_valid_ids(client: httpx.Client) -> None:
    for value in ("thr_pr_412", "wkr_77a0", "trg_8f21"):
        assert client.get(f"/ids/{value}").status_code in (200, 404)  # well-formed: a lookup, not a parse error
    assert client.get("/ids/thr_" + "a" * 64).status_code == 404
