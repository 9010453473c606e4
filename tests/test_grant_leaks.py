"""A key with grants cannot tell an object outside them from one that never existed: not by a list's
filter, a view's links, the trace or the status code (docs/tenancy.md#grants). Each test compares what the
key is answered for a hidden object with what it is answered for an ID that never existed."""

from __future__ import annotations

import httpx
import pytest
from helpers import uid
from test_grants import SELF_AND_PAYMENTS, as_key, assert_a_miss, issue, remember, tenant, unknown_like  # noqa: F401
from test_trace import settled


LATER = "9999-12-31T00:00:00Z"  # an instant after every write


def shape(response: httpx.Response) -> tuple[int, object]:
    """A response as a key could compare two of them: its status and its body, request_id left out."""
    body = response.json()
    if isinstance(body, dict):
        body.pop("request_id", None)
    return response.status_code, body


def test_a_worker_outside_the_grants_owns_no_thread_as_one_that_never_existed(tenant, issue, as_key) -> None:
    """GET /threads?owner=: a worker in another subject's namespace owning a thread the key sees lists no
    thread, exactly as an owner that never existed; the key's own worker lists its threads."""
    one, two = uid("u"), uid("u")
    service, bob = as_key(tenant["service"]), as_key(issue(f"user:{two}", SELF_AND_PAYMENTS))
    alices = service.post("/workers", json={"name": "alice-helper", "namespace": ["users", one]}).json()["id"]
    bobs = service.post("/workers", json={"name": "bob-helper", "namespace": ["users", two]}).json()["id"]
    shared = service.post("/threads", json={"title": "refund queue", "namespace": ["teams", "payments"]}).json()["id"]
    for worker in (alices, bobs):
        assert service.post(f"/threads/{shared}/owners", json={"worker_id": worker}).status_code == 201
    assert [t["id"] for t in service.get("/threads", params={"owner": alices}).json()["data"]] == [shared]
    assert [t["id"] for t in bob.get("/threads", params={"owner": bobs}).json()["data"]] == [shared]
    hidden = bob.get("/threads", params={"owner": alices})
    never = bob.get("/threads", params={"owner": unknown_like(alices)})
    assert shape(hidden) == shape(never) == (200, {"data": [], "next_cursor": None, "has_more": False})
    for status in ("open", "closed"):  # with another filter, the owned statement as well
        assert shape(bob.get("/threads", params={"owner": alices, "status": status})) == shape(
            bob.get("/threads", params={"owner": unknown_like(alices), "status": status}))


def test_every_list_of_an_object_outside_the_grants_is_the_miss_of_one_that_never_existed(
    tenant, issue, as_key
) -> None:
    """The lists that take an object's ID in their path answer a hidden object's ID with the 404 of an ID
    that never existed, the same body but for the ID."""
    one, two = uid("u"), uid("u")
    service, bob = as_key(tenant["service"]), as_key(issue(f"user:{two}", SELF_AND_PAYMENTS))
    worker = service.post("/workers", json={"name": "w", "namespace": ["users", one]}).json()["id"]
    thread = service.post("/threads", json={"title": "t", "namespace": ["users", one]}).json()["id"]
    memory = remember(service, f"users/{one}", uid("k"), "private").json()["id"]
    for path, object_id in ((f"/workers/{worker}/reports", worker), (f"/threads/{thread}/events", thread),
                            (f"/threads/{thread}/messages", thread), (f"/ids/{thread}/backlinks", thread),
                            (f"/ids/{memory}/backlinks", memory), (f"/ids/{memory}/reads", memory),
                            (f"/memories/{memory}/versions", memory),
                            (f"/memories/{memory}/versions?as_of={LATER}", memory),  # as of a time: the same
                            (f"/threads/{thread}/events?as_of={LATER}", thread)):
        assert service.get(path).status_code == 200, path
        assert_a_miss(bob, path, object_id)


def test_a_source_outside_the_grants_is_left_out_as_a_link_never_made(tenant, issue, as_key) -> None:
    """A memory the key sees, learned from a memory in another subject's namespace: the key's view lists no
    such source (a source is live when linked, so one shown as deleted would tell the key it existed), while
    a source it sees is shown, deleted or not; a key without grants sees every source as before."""
    one, two = uid("u"), uid("u")
    service, bob = as_key(tenant["service"]), as_key(issue(f"user:{two}", SELF_AND_PAYMENTS))
    secret = remember(service, f"users/{one}", uid("k"), "alice's secret").json()["id"]
    thread = service.post("/threads", json={"title": "t", "namespace": ["teams", "payments"]}).json()["id"]
    closed = service.post("/threads", json={"title": "t", "namespace": ["teams", "payments"]}).json()["id"]
    learned = service.post("/memories", json={"namespace": ["teams", "payments"], "key": uid("k"),
                                              "value": "learned", "sources": [secret, thread, closed]})
    assert learned.status_code == 201, learned.text
    assert service.delete(f"/threads/{closed}").status_code == 204
    memory = learned.json()["id"]
    assert service.get(f"/memories/{memory}").json()["sources"] == [
        {"id": secret, "summary": ""}, {"id": thread, "summary": ""}, {"id": closed, "deleted": True}]
    seen = bob.get(f"/memories/{memory}").json()
    assert seen["sources"] == [{"id": thread, "summary": ""}, {"id": closed, "deleted": True}]
    assert secret not in bob.get(f"/memories/{memory}", params={"budget": 1_048_576}).text
    # what the key is told when it names the hidden source itself: the answers for an ID never made
    assert_a_miss(bob, f"/ids/{secret}", secret)
    sourced = [bob.post("/memories", json={"namespace": ["users", two], "key": uid("k"), "value": 1,
                                           "sources": [s]}) for s in (secret, unknown_like(secret))]
    assert sourced[0].status_code == sourced[1].status_code == 422
    assert sourced[0].json()["detail"] == sourced[1].json()["detail"].replace(unknown_like(secret), secret)


@pytest.mark.slow
def test_the_trace_shows_a_key_with_grants_only_its_own_reads(tenant, issue, as_key) -> None:
    """One run read by a key without grants and by two keys with grants, of an object all of them see: each
    key with grants is shown its own reads and no other key's ID; by run and by object alike. Its own reads
    of a hidden object and of an ID never made are both left out, as before."""
    service = as_key(tenant["service"])
    payments = remember(service, "teams/payments", uid("k"), "visible").json()["id"]
    secret = remember(service, f"users/{uid('u')}", uid("k"), "hidden").json()["id"]
    keys = [issue(f"user:{uid('u')}", SELF_AND_PAYMENTS) for _ in range(2)]
    ana, ben = (as_key(k) for k in keys)
    ana_id, ben_id = (k.split(".")[0].removeprefix("rk_") for k in keys)
    run = uid("run")
    for c in (service, ana, ben):
        assert c.get(f"/memories/{payments}", headers={"X-Recall-Run": run}).status_code == 200
    for missing in (secret, unknown_like(secret)):
        assert ana.get(f"/memories/{missing}", headers={"X-Recall-Run": run}).status_code == 404
    everything = settled(service, f"/runs/{run}/reads", 5)
    assert len({r["key_id"] for r in everything}) == 3
    for c, own in ((ana, ana_id), (ben, ben_id)):
        for path in (f"/runs/{run}/reads", f"/ids/{payments}/reads"):
            shown = c.get(path)
            assert shown.status_code == 200, shown.text
            assert [(r["object_id"], r["key_id"]) for r in shown.json()["data"]] == [(payments, own)], path
    assert_a_miss(ana, f"/ids/{secret}/reads", secret)


def test_reads_as_of_a_time_show_a_key_with_grants_only_what_they_cover(tenant, issue, as_key) -> None:
    """A memory list and a search as of a time, like those of now, leave out the memories outside the key's
    grants (and their lineage), whatever the time."""
    one, two = uid("u"), uid("u")
    service, bob = as_key(tenant["service"]), as_key(issue(f"user:{two}", SELF_AND_PAYMENTS))
    word = uid("w")[2:].lower()
    hidden = remember(service, f"users/{one}", "k", f"alice {word}").json()["id"]
    mine = remember(service, f"users/{two}", "k", f"bob {word}").json()["id"]
    for c, seen in ((service, {hidden, mine}), (bob, {mine})):
        listed = c.get("/memories", params={"namespace": "users", "as_of": LATER})
        ids = {e["id"] for e in listed.json()["data"]}
        assert ids >= seen and (hidden in ids) == (c is service), listed.text
        found = c.get("/search", params={"q": word, "as_of": LATER})
        assert {h["id"] for h in found.json()["data"]} == seen, found.text
