"""Contract 3: a miss fails loudly, 404 problem+json naming the ID, on every GET route."""

from __future__ import annotations

import httpx
import pytest
from helpers import Graph, assert_problem, uid

ROUTES = {
    "thread": ["/threads/{id}", "/threads/{id}/events"],
    "worker": ["/workers/{id}", "/workers/{id}/reports"],
    "trigger": ["/triggers/{id}", "/triggers/{id}/payload"],
    "report": ["/reports/{id}", "/reports/{id}/body"],
}
PREFIX = {"thread": "thr", "worker": "wkr", "trigger": "trg", "report": "rpt"}
EVERY_ROUTE = [(kind, route) for kind, routes in ROUTES.items() for route in routes]


@pytest.mark.parametrize(("kind", "route"), EVERY_ROUTE)
def test_unknown_id_is_404_problem_naming_it(client: httpx.Client, kind: str, route: str) -> None:
    missing = uid(PREFIX[kind])
    body = assert_problem(client.get(route.format(id=missing)), 404, missing)
    assert body["id"] == missing


@pytest.mark.parametrize(("kind", "route"), EVERY_ROUTE)
@pytest.mark.parametrize("malformed", ["nope", "thr_", "thr_" + "x" * 65, "THR_abc", "thr_a.b", "thr_%C3%A9"])
def test_malformed_id_is_404_problem(client: httpx.Client, kind: str, route: str, malformed: str) -> None:
    assert_problem(client.get(route.format(id=malformed)), 404, "not a recall ID")


@pytest.mark.parametrize(("kind", "route"), EVERY_ROUTE)
def test_wrong_kind_id_is_404_saying_what_it_is_and_where_it_lives(
    client: httpx.Client, graph: Graph, kind: str, route: str
) -> None:
    other = "trigger" if kind != "trigger" else "thread"
    existing = graph.trigger()["id"] if other == "trigger" else graph.thread()["id"]
    body = assert_problem(client.get(route.format(id=existing)), 404, existing)
    assert body["kind"] == other
    assert f"/{other}s/{existing}" in body["detail"]


def test_ids_resolve_is_404_for_unknown_and_malformed(client: httpx.Client) -> None:
    assert_problem(client.get(f"/ids/{uid('thr')}"), 404)
    assert_problem(client.get("/ids/not-an-id"), 404)


def test_ids_resolves_any_kind_to_type_href_and_summary(client: httpx.Client, graph: Graph) -> None:
    worker, thread, trigger = graph.worker(), graph.thread(), graph.trigger()
    report = graph.report(worker["id"], thread["id"])
    for obj, kind in ((worker, "worker"), (thread, "thread"), (trigger, "trigger"), (report, "report")):
        resolved = client.get(f"/ids/{obj['id']}").json()
        assert resolved == {"id": obj["id"], "type": kind, "href": f"/{kind}s/{obj['id']}", "summary": obj["summary"]}
        assert client.get(resolved["href"]).status_code == 200


def test_a_miss_never_answers_200_with_an_empty_body(client: httpx.Client) -> None:
    for kind, routes in ROUTES.items():
        for route in routes:
            response = client.get(route.format(id=uid(PREFIX[kind])))
            assert response.status_code == 404
            assert response.json() not in ({}, [], None)


def test_unknown_route_is_a_404_problem(client: httpx.Client) -> None:
    assert_problem(client.get("/nothing/here"), 404)


def test_unsupported_method_is_405_problem_with_allow(client: httpx.Client) -> None:
    response = client.delete("/threads")
    assert_problem(response, 405)
    assert "GET" in response.headers["allow"] and "POST" in response.headers["allow"]
