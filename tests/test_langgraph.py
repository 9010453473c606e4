"""RecallStore, the LangGraph BaseStore on recall memories, against a live server with the real langgraph:
the same answers as LangGraph's InMemoryStore, a compiled graph that remembers across a server restart,
and recall's versions kept out of the store's answers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from helpers import ServerProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.graph import START, StateGraph
from langgraph.store.base import BaseStore, GetOp, Item, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from recall_server import client as rc
from recall_server.client import RecallClient
from recall_server.langgraph import RecallStore, decode_label, encode_label, encode_namespace, stored_key
from recall_server.models import SEGMENT


def fresh_root() -> str:
    return f"lg{uuid.uuid4().hex[:12]}"


@pytest.fixture()
def store(base_url: str, api_key: str) -> Iterator[RecallStore]:
    s = RecallStore(base_url, api_key)
    yield s
    s.close()


# ---- namespaces ----------------------------------------------------------------------------------


@given(st.text(min_size=1, max_size=20))
@settings(max_examples=300)
def test_a_label_encodes_to_a_segment_and_back_exactly(label: str) -> None:
    import re

    segment = encode_label(label)
    assert decode_label(segment) == label
    assert re.fullmatch(SEGMENT.strip("^$").replace("{1,64}", "+"), segment), segment


def test_plain_labels_are_stored_as_they_are_and_others_are_escaped() -> None:
    assert encode_namespace(("users", "user_1", "my-app")) == ["users", "user_1", "my-app"]
    assert encode_namespace(("a b", "_-")) == ["a_-20-b", "_-5f--"]


def test_what_recall_cannot_hold_is_a_clear_error(store: RecallStore) -> None:
    with pytest.raises(ValueError, match="1-8 labels"):
        store.put(tuple("abcdefghi"), "k", {"v": 1})
    with pytest.raises(ValueError, match="once encoded"):
        store.put(("x" * 65,), "k", {"v": 1})
    assert store.get(tuple("abcdefghi"), "k") is None  # never stored, so never found
    assert store.search(tuple("abcdefghi")) == []


# ---- the differential: RecallStore answers as InMemoryStore ------------------------------------------

NAMESPACES = [("a",), ("a", "b"), ("a", "b", "c"), ("x y",), ("é", "b")]
KEYS = ["k1", "k2", "k 3"]
values = st.fixed_dictionaries(
    {"n": st.integers(0, 3)},
    optional={"s": st.sampled_from(["x", "y", "x y"]), "t": st.booleans(), "l": st.lists(st.integers(0, 2), max_size=2),
              "d": st.fixed_dictionaries({"s": st.sampled_from(["x", "y"])})},
)
FILTERS = [None, {"s": "x"}, {"n": 1}, {"t": 1}, {"t": True}, {"n": {"$gt": 1}}, {"n": {"$lte": 1}, "s": "y"},
           {"n": {"$ne": 2}}, {"l": [1]}, {"d": {"s": "x"}}, {"s": None}, {"n": {"$eq": 0}}]
namespaces = st.sampled_from(NAMESPACES)
keys = st.sampled_from(KEYS)
put_ops = st.builds(lambda ns, k, v: ("put", ns, k, v), namespaces, keys, values)
delete_ops = st.builds(lambda ns, k: ("delete", ns, k), namespaces, keys)
get_ops = st.builds(lambda ns, k: ("get", ns, k), namespaces, keys)
search_ops = st.builds(lambda p, f, lim, off: ("search", p, f, lim, off),
                       st.sampled_from([(), ("a",), ("a", "b"), ("x y",), ("z",)]), st.sampled_from(FILTERS),
                       st.sampled_from([1, 2, 100]), st.sampled_from([0, 1, 3]))
conditions = st.lists(st.sampled_from([
    MatchCondition("prefix", ("a",)), MatchCondition("prefix", ("a", "*")), MatchCondition("prefix", ("*", "b")),
    MatchCondition("suffix", ("b",)), MatchCondition("suffix", ("*", "b")), MatchCondition("suffix", ("c",)),
    MatchCondition("suffix", ("a", "b")),
]), max_size=2)
list_ops = st.builds(lambda c, d, lim, off: ("list", c, d, lim, off), conditions,
                     st.sampled_from([None, 1, 2, 3]), st.sampled_from([1, 100]), st.sampled_from([0, 1]))
batch_ops = st.builds(lambda a, b: ("batch", a, b), st.one_of(put_ops, delete_ops), get_ops)
operations = st.lists(st.one_of(put_ops, put_ops, delete_ops, get_ops, search_ops, list_ops, batch_ops),
                      min_size=1, max_size=10)


def _rooted(root: str, op: tuple[Any, ...]) -> Any:
    """The op under this example's own root label (the store is shared by every test and example)."""
    name = op[0]
    if name == "put":
        return PutOp((root, *op[1]), op[2], op[3])
    if name == "delete":
        return PutOp((root, *op[1]), op[2], None)
    if name == "get":
        return GetOp((root, *op[1]), op[2])
    if name == "search":
        return SearchOp((root, *op[1]), op[2], op[3], op[4])
    if name == "list":
        where = (MatchCondition("prefix", (root,)), *[MatchCondition(c.match_type, c.path if c.match_type == "suffix"
                                                                     else (root, *c.path)) for c in op[1]])
        depth = None if op[2] is None else op[2] + 1
        return ListNamespacesOp(where, depth, op[3], op[4])
    return [_rooted(root, op[1]), _rooted(root, op[2])]


def _comparable(result: Any) -> Any:
    """What both stores must agree on: items without their timestamps (and search scores)."""
    if isinstance(result, Item):
        return (result.namespace, result.key, result.value)
    if isinstance(result, list):
        return [_comparable(r) for r in result]
    return result


def _listing(model: InMemoryStore, root: str, op: ListNamespacesOp) -> list[tuple[str, ...]]:
    """InMemoryStore's answer without the empty namespaces it keeps after a delete or a get (a defaultdict):
    recall lists namespaces of current memories only. Asked of a copy holding only the live items."""
    live = InMemoryStore()
    for item in model.search((root,), limit=10_000):
        live.put(item.namespace, item.key, item.value)
    return live.batch([op])[0]


def _recall_order(item: Item) -> tuple[bytes, bytes]:
    """Recall lists in (namespace, key) order, bytewise (COLLATE "C") on the encoded namespace."""
    return "/".join(encode_namespace(item.namespace)).encode(), item.key.encode()


@given(operations)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_recall_store_answers_as_langgraphs_in_memory_store(base_url: str, api_key: str,
                                                            ops: list[tuple[Any, ...]]) -> None:
    """Deliberate differences: search pages in recall's (namespace, key) order, InMemoryStore in insertion
    order, so a search's page is compared with InMemoryStore's full answer sorted in recall's order;
    list_namespaces shows namespaces that hold items (InMemoryStore also keeps emptied ones); timestamps differ."""
    root = fresh_root()
    model = InMemoryStore()
    with RecallStore(base_url, api_key) as store:
        for raw in ops:
            op = _rooted(root, raw)
            batch = op if isinstance(op, list) else [op]
            if isinstance(op, SearchOp):
                everything = model.batch([op._replace(limit=10_000, offset=0)])[0]
                expected = [sorted(everything, key=_recall_order)[op.offset:op.offset + op.limit]]
            elif isinstance(op, ListNamespacesOp):
                expected = [_listing(model, root, op)]
            else:
                expected = model.batch(batch)
            assert _comparable(store.batch(batch)) == _comparable(expected), raw
        final = ListNamespacesOp((MatchCondition("prefix", (root,)),))
        assert store.batch([final]) == [_listing(model, root, final)]


ITEMS = [{"n": 1, "t": True}, {"n": 1, "t": False, "s": "x"}, {"n": 2, "s": "y", "l": [1]}, {"n": 0, "l": [1, 2]},
         {"n": 3, "d": {"s": "x"}, "s": "x y"}, {"n": 1.0, "s": None}, {"n": 0, "t": 1}]


def test_every_filter_and_prefix_answers_as_in_memory_store(store: RecallStore) -> None:
    """Where JSON containment and LangGraph's comparison differ (True == 1, a missing key == None, lists exact),
    the store must answer as LangGraph does."""
    root = fresh_root()
    model = InMemoryStore()
    for i, value in enumerate(ITEMS):
        for s in (store, model):
            s.put((root, *NAMESPACES[i % len(NAMESPACES)]), f"k{i}", value)
    for prefix in [(), ("a",), ("a", "b"), ("x y",)]:
        for f in FILTERS:
            op = SearchOp((root, *prefix), f, 100, 0)
            expected = sorted(model.batch([op])[0], key=_recall_order)
            assert _comparable(store.batch([op])) == _comparable([expected]), (prefix, f)


def test_the_async_batch_answers_as_the_sync_one(base_url: str, api_key: str) -> None:
    root = fresh_root()

    async def go() -> None:
        store = RecallStore(base_url, api_key)
        await store.aput((root, "u1"), "tone", {"tone": "casual"})
        await store.aput((root, "u2"), "tone", {"tone": "formal"})
        item = await store.aget((root, "u1"), "tone")
        assert item is not None and item.value == {"tone": "casual"} and item.namespace == (root, "u1")
        assert [i.key for i in await store.asearch((root,), filter={"tone": "formal"})] == ["tone"]
        assert await store.alist_namespaces(prefix=(root,)) == [(root, "u1"), (root, "u2")]
        await store.adelete((root, "u1"), "tone")
        assert await store.aget((root, "u1"), "tone") is None
        await store.aclose()

    asyncio.run(go())


def test_one_store_serves_graphs_run_in_successive_event_loops(store: RecallStore) -> None:
    ns = (fresh_root(),)
    asyncio.run(store.aput(ns, "k", {"v": 1}))
    assert asyncio.run(store.aget(ns, "k")).value == {"v": 1}  # a new loop: the first loop's connections are dead


# ---- versions: recall keeps them, the store never shows them ------------------------------------------


def test_a_superseded_version_never_comes_back_from_the_store(store: RecallStore, base_url: str,
                                                              api_key: str) -> None:
    ns = (fresh_root(), "u1")
    store.put(ns, "tone", {"tone": "casual"})
    first = store.get(ns, "tone")
    store.put(ns, "tone", {"tone": "formal"})
    item = store.get(ns, "tone")
    assert item is not None and item.value == {"tone": "formal"}
    assert item.created_at == first.created_at and item.updated_at > first.updated_at  # the chain's first write
    assert [(i.key, i.value) for i in store.search(ns)] == [("tone", {"tone": "formal"})]
    assert store.search(ns, filter={"tone": "casual"}) == []
    with RecallClient(base_url, api_key) as recall:  # recall itself keeps both versions
        current = recall.current_memory(list(ns), "tone")
        assert [v.status for v in recall.iter_memory_versions(current.id)] == ["current", "superseded"]
        store.delete(ns, "tone")  # LangGraph's delete erases every version of the pair
        assert store.get(ns, "tone") is None
        with pytest.raises(rc.Gone):
            recall.get_memory(current.id)


def test_a_large_value_is_read_from_its_value_link(store: RecallStore) -> None:
    ns = (fresh_root(),)
    big = {"text": "x" * 100_000}  # past the view budget a get asks for
    store.put(ns, "big", big)
    assert store.get(ns, "big").value == big
    assert store.search(ns)[0].value == big  # a list entry carries at most 2048 bytes inline


def test_ttl_is_minutes_and_becomes_the_memorys_expiry(store: RecallStore, base_url: str, api_key: str) -> None:
    ns = (fresh_root(),)
    store.put(ns, "short", {"v": 1}, ttl=1.5)
    with RecallClient(base_url, api_key) as recall:
        view = recall.current_memory(list(ns), "short")
    assert view.expires_at is not None
    assert 85 <= (view.expires_at - view.created_at).total_seconds() <= 95


TTL_SECONDS = 2
TTL_MINUTES = TTL_SECONDS / 60


@pytest.mark.parametrize("query", [None, "foo"])
def test_a_read_with_refresh_ttl_keeps_an_item_alive(base_url: str, api_key: str, query: str | None) -> None:
    """As LangGraph's own TTL tests (langgraph-checkpoint-sqlite, test_store_ttl): an item read with
    refresh_ttl within its ttl lives a ttl longer; read without, it expires on time. With the store's
    TTLConfig: default_ttl for a put without one, refresh_on_read the default of every read."""
    with RecallStore(base_url, api_key, ttl={"default_ttl": TTL_MINUTES, "refresh_on_read": True}) as store:
        ns = (fresh_root(),)
        store.put(ns, "item1", {"foo": "bar"})  # the store's default_ttl
        time.sleep(TTL_SECONDS - 0.5)
        assert len(store.search(ns, query=query, refresh_ttl=True)) == 1
        time.sleep(TTL_SECONDS - 0.5)
        assert store.get(ns, "item1") is not None  # refreshed by default (refresh_on_read)
        time.sleep(TTL_SECONDS - 0.5)
        assert len(store.search(ns, query=query, refresh_ttl=False)) == 1
        time.sleep(TTL_SECONDS - 0.5)
        assert store.get(ns, "item1", refresh_ttl=False) is None
        assert store.search(ns, query=query) == []


def test_refresh_on_read_false_leaves_the_expiry(base_url: str, api_key: str) -> None:
    with RecallStore(base_url, api_key, ttl={"default_ttl": TTL_MINUTES, "refresh_on_read": False}) as store:
        ns = (fresh_root(),)
        store.put(ns, "item1", {"foo": "bar"})
        store.put(ns, "kept", {"foo": "bar"}, ttl=None)  # no expiry: nothing to refresh
        time.sleep(TTL_SECONDS - 0.5)
        assert store.get(ns, "item1") is not None
        time.sleep(1)
        assert store.get(ns, "item1") is None
        assert [i.key for i in store.search(ns)] == ["kept"]


def test_an_async_read_refreshes_as_the_sync_one(base_url: str, api_key: str) -> None:
    async def go() -> None:
        store = RecallStore(base_url, api_key)
        ns = (fresh_root(),)
        await store.aput(ns, "item1", {"foo": "bar"}, ttl=TTL_MINUTES)
        await asyncio.sleep(TTL_SECONDS - 0.5)
        assert await store.aget(ns, "item1") is not None  # refresh_on_read defaults to True, as LangGraph's
        await asyncio.sleep(TTL_SECONDS - 0.5)
        assert len(await store.asearch(ns)) == 1
        await store.aclose()

    asyncio.run(go())


def test_a_query_is_ranked_by_the_servers_search_best_first(store: RecallStore) -> None:
    ns = (fresh_root(),)
    store.put(ns, "a", {"text": "the payment timeout after 30s"})
    store.put(ns, "b", {"text": "payment ok"})
    store.put(ns, "c", {"text": "unrelated"})
    found = store.search(ns, query="payment timeout")  # hybrid: words and meaning, the server's score
    assert [i.key for i in found][:2] == ["a", "b"]
    assert [i.score for i in found] == sorted((i.score for i in found), reverse=True) and found[0].score > 0
    assert store.search((fresh_root(),), query="payment timeout") == []  # nothing under another prefix


# ---- a real graph, across a server restart -------------------------------------------------------------


class Turn(TypedDict, total=False):
    user: str
    said: str
    recalled: str


def remember_tone(state: Turn, *, store: BaseStore) -> Turn:
    namespace = ("users", state["user"])
    if state.get("said"):
        store.put(namespace, "tone", {"tone": state["said"]})
    item = store.get(namespace, "tone")
    return {"recalled": item.value["tone"] if item else ""}


async def recall_tone(state: Turn, *, store: BaseStore) -> Turn:
    item = await store.aget(("users", state["user"]), "tone")
    return {"recalled": item.value["tone"] if item else ""}


def compiled(node: Any, store: BaseStore) -> Any:
    graph = StateGraph(Turn)
    graph.add_node("turn", node)
    graph.add_edge(START, "turn")
    return graph.compile(store=store)


@pytest.mark.slow
def test_a_graph_remembers_across_runs_and_a_server_restart(database_url: str, api_key: str, tmp_path: Path) -> None:
    user = fresh_root()
    first = ServerProcess(database_url, tmp_path / "first.log", RECALL_SWEEP_INTERVAL="0").start()
    try:
        with RecallStore(first.url, api_key) as store:
            assert compiled(remember_tone, store).invoke({"user": user, "said": "casual"})["recalled"] == "casual"
    finally:
        first.stop()
    second = ServerProcess(database_url, tmp_path / "second.log", port=first.port, RECALL_SWEEP_INTERVAL="0").start()
    try:
        store = RecallStore(second.url, api_key)
        later = asyncio.run(compiled(recall_tone, store).ainvoke({"user": user}))
        assert later["recalled"] == "casual"
        assert compiled(remember_tone, store).invoke({"user": user})["recalled"] == "casual"
        store.close()
    finally:
        second.stop()


def test_tenancy_comes_from_the_key(store: RecallStore, base_url: str, database_url: str) -> None:
    from helpers import create_key

    ns = (fresh_root(),)
    store.put(ns, "secret", {"v": 1})
    with RecallStore(base_url, create_key(database_url, f"lg-{ns[0]}", "write")) as other:
        assert other.get(ns, "secret") is None and other.search(ns) == [] and other.list_namespaces() == []


# ---- what recall cannot hold as it is, held anyway ----------------------------------------------------


def test_a_filter_value_holding_nul_answers_as_in_memory_store(store: RecallStore) -> None:
    root = fresh_root()
    model = InMemoryStore()
    for s in (store, model):
        s.put((root,), "nul", {"t": "a\x00b", "u": {"v": "\x00"}})
        s.put((root,), "plain", {"t": "ab", "u": {"v": "x"}})
    for f in ({"t": "a\x00b"}, {"u": {"v": "\x00"}}, {"t": "ab"}, {"t": {"$ne": "a\x00b"}}, {"a\x00": "b"}):
        assert _comparable(store.search((root,), filter=f)) == _comparable(model.search((root,), filter=f)), f


LONG_KEYS = ["k" * 257, "x" * 5000, "two\nlines", "tab\there", "", "~sha256:" + "0" * 64, "é" * 300,
             "bidi\u202eb", "k" * 256]


def test_keys_recall_cannot_hold_round_trip_exactly(store: RecallStore) -> None:
    root = fresh_root()
    model = InMemoryStore()
    for i, key in enumerate(LONG_KEYS):
        value = {"i": i, "~key": "mine"} if i % 2 else {"i": i}
        for s in (store, model):
            s.put((root, "u"), key, value)
    for key in LONG_KEYS:
        got = store.get((root, "u"), key)
        assert got is not None and (got.key, got.value) == (key, model.get((root, "u"), key).value), key[:20]
    found = sorted((i.key, i.value["i"]) for i in store.search((root,), limit=100))
    assert found == sorted((i.key, i.value["i"]) for i in model.search((root,), limit=100))
    assert _comparable(store.search((root,), filter={"~key": "mine"}, limit=100)) == _comparable(
        sorted(model.search((root,), filter={"~key": "mine"}, limit=100), key=lambda i: stored_key(i.key)))
    assert store.list_namespaces(prefix=(root,)) == [(root, "u")]
    store.delete((root, "u"), "x" * 5000)
    assert store.get((root, "u"), "x" * 5000) is None and store.get((root, "u"), "k" * 257).value == {"i": 0}
    assert asyncio.run(store.aget((root, "u"), "two\nlines")).key == "two\nlines"


@pytest.mark.slow
def test_thousands_of_gathered_async_calls_complete_with_a_pools_worth_in_flight(base_url: str,
                                                                                 api_key: str) -> None:
    """All at once through asyncio.gather: the async client keeps at most its pool's worth of requests in
    flight (the rest wait their turn on it, not in httpcore's pool queue, where thousands crawl)."""
    import httpx

    root = fresh_root()
    in_flight = peak = 0

    class Counting(httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            nonlocal in_flight, peak
            in_flight += 1
            peak = max(peak, in_flight)
            try:
                return await super().handle_async_request(request)
            finally:
                in_flight -= 1

    async def go() -> tuple[list[Any], list[Any]]:
        store = RecallStore(aclient=rc.AsyncRecallClient(base_url, api_key, transport=Counting()))
        try:
            await asyncio.wait_for(asyncio.gather(*[store.aput((root,), f"k{i}", {"i": i}) for i in range(1000)]),
                                   600)
            got = await asyncio.wait_for(asyncio.gather(*[store.aget((root,), f"k{i}") for i in range(300)]), 600)
            return got, await store.asearch((root,), limit=5000)
        finally:
            await store.aclose()

    got, found = asyncio.run(go())
    assert [item.value["i"] for item in got] == list(range(300))
    assert sorted(item.value["i"] for item in found) == list(range(1000))
    assert peak == rc.MAX_IN_FLIGHT
