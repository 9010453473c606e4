"""RecallSaver, the LangGraph checkpointer on recall, against live servers with the real langgraph: a run
interrupted before a node resumes after the server is SIGKILLed and restarted; retention by the sweep;
erasure (410, gone from every table, verify-erasure); retries landing once; values stored once per version;
tenancy from the key; strict deserialisation; bad input as 4xx problems."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import httpx
import pytest
from click.testing import CliRunner
from helpers import Graph, ServerProcess, assert_problem, cli, create_key
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph

from recall_server.cli import main
from recall_server.langgraph import RecallSaver
from recall_server.models import ChannelBlob, PutCheckpoint, PutWrites, WriteItem


def fresh(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture()
def tenant_key(database_url: str) -> tuple[str, str]:
    """A tenant of its own (its retention policy is this test's) and a write key of it."""
    tenant = fresh("lgck")
    return tenant, create_key(database_url, tenant, "write")


@pytest.fixture()
def saver(base_url: str, tenant_key: tuple[str, str]) -> Iterator[RecallSaver]:
    with RecallSaver(base_url, tenant_key[1]) as s:
        yield s


def checkpoint(cid: str | None = None, **values: Any) -> dict[str, Any]:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    cp = empty_checkpoint()
    cp["id"] = cid or str(uuid6(clock_seq=-1))
    cp["channel_values"] = values
    cp["channel_versions"] = {k: 1 for k in values}
    return cp


def put_chain(saver: RecallSaver, thread_id: str, n: int, ns: str = "", **values: Any) -> list[dict[str, Any]]:
    """n checkpoints on a thread, each the child of the one before, each with a write; their configs."""
    configs: list[dict[str, Any]] = []
    for step in range(n):
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}
        if configs:
            config["configurable"]["checkpoint_id"] = configs[-1]["configurable"]["checkpoint_id"]
        cp = checkpoint(**values)
        stored = saver.put(config, cp, {"source": "loop", "step": step}, cp["channel_versions"])
        saver.put_writes(stored, [("ch", f"write {step}")], f"task-{step}")
        configs.append(stored)
    return configs


def ids_of(saver: RecallSaver, thread_id: str, ns: str = "") -> list[str]:
    return [t.config["configurable"]["checkpoint_id"]
            for t in saver.list({"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}})]


# ---- a graph interrupted before a node, resumed after a crash ---------------------------------------


class Approval(TypedDict, total=False):
    request: str
    drafted: str
    sent: str


def draft(state: Approval) -> Approval:
    return {"drafted": f"reply to {state['request']}"}


def send(state: Approval) -> Approval:
    return {"sent": f"sent: {state['drafted']}"}


def approval_graph(saver: RecallSaver) -> Any:
    builder = StateGraph(Approval)
    builder.add_node("draft", draft)
    builder.add_node("send", send)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "send")
    builder.add_edge("send", END)
    return builder.compile(checkpointer=saver, interrupt_before=["send"])


@pytest.mark.slow
def test_an_interrupted_run_resumes_with_its_state_after_the_server_is_killed(
        database_url: str, api_key: str, tmp_path: Path) -> None:
    config = {"configurable": {"thread_id": fresh("approval")}}
    first = ServerProcess(database_url, tmp_path / "first.log", RECALL_SWEEP_INTERVAL="0").start()
    try:
        with RecallSaver(first.url, api_key) as saver:
            paused = approval_graph(saver).invoke({"request": "refund #77"}, config, durability="sync")
            assert paused == {"request": "refund #77", "drafted": "reply to refund #77"}
            assert approval_graph(saver).get_state(config).next == ("send",)
    finally:
        first.kill()  # SIGKILL: nothing is flushed on the way out
    second = ServerProcess(database_url, tmp_path / "second.log", port=first.port, RECALL_SWEEP_INTERVAL="0").start()
    try:
        with RecallSaver(second.url, api_key) as saver:  # a new process's saver: nothing held in memory
            graph = approval_graph(saver)
            state = graph.get_state(config)
            assert state.next == ("send",)
            assert state.values == {"request": "refund #77", "drafted": "reply to refund #77"}
            done = graph.invoke(None, config, durability="sync")
            assert done["sent"] == "sent: reply to refund #77"
            assert graph.get_state(config).next == ()
    finally:
        second.stop()


async def test_the_async_saver_runs_a_graph_to_its_interrupt_and_on(base_url: str, api_key: str) -> None:
    config = {"configurable": {"thread_id": fresh("approval")}}
    saver = RecallSaver(base_url, api_key)
    try:
        graph = approval_graph(saver)
        await graph.ainvoke({"request": "invoice"}, config, durability="sync")
        assert (await graph.aget_state(config)).next == ("send",)
        assert (await graph.ainvoke(None, config, durability="sync"))["sent"] == "sent: reply to invoice"
        history = [s async for s in graph.aget_state_history(config)]
        assert len(history) >= 4 and history[0].next == ()
    finally:
        await saver.aclose()


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


pytestmark = pytest.mark.anyio


# ---- retention and prune ----------------------------------------------------------------------------


def test_the_sweep_keeps_the_newest_n_of_each_thread_and_namespace(
        saver: RecallSaver, tenant_key: tuple[str, str], database_url: str, sql: Any) -> None:
    tenant = tenant_key[0]
    a, b = fresh("a"), fresh("b")
    never = new_id()  # a checkpoint whose writes came and whose put never did
    root = put_chain(saver, a, 5, step="x")
    saver.put_writes(at(a, never), [("ch", "lost")], "task-lost")
    child = put_chain(saver, a, 3, ns="child:1", step="y")
    only = put_chain(saver, b, 1)
    out = cli(database_url, "tenants", "checkpoint-retention", tenant, "--keep", "2")
    assert "keep the newest 2" in out
    cli(database_url, "sweep")
    newest = lambda configs, n: [c["configurable"]["checkpoint_id"] for c in configs[::-1][:n]]  # noqa: E731
    assert ids_of(saver, a) == newest(root, 2)
    assert ids_of(saver, a, "child:1") == newest(child, 2)
    assert ids_of(saver, b) == newest(only, 1)
    # nothing of the dropped ones is left: their writes, writes of no checkpoint, values no kept checkpoint names
    kept = {*newest(root, 2), *newest(child, 2), *newest(only, 1)}
    written = sql("SELECT checkpoint_id FROM checkpoint_writes WHERE tenant_id = $1", tenant)
    assert {r[0] for r in written} == kept
    assert sql("SELECT count(*) FROM checkpoints WHERE tenant_id = $1", tenant)[0][0] == 5
    tup = saver.get_tuple(root[-1])
    assert tup is not None and tup.checkpoint["channel_values"] == {"step": "x"} and len(tup.pending_writes) == 1


def test_the_sweep_drops_checkpoints_past_the_age_but_the_newest(
        saver: RecallSaver, tenant_key: tuple[str, str], database_url: str, sql: Any) -> None:
    tenant, thread = tenant_key[0], fresh("aged")
    configs = put_chain(saver, thread, 4, v=1)
    sql("UPDATE checkpoints SET created_at = now() - interval '2 hours' WHERE tenant_id = $1", tenant)
    put_chain(saver, fresh("young"), 2)
    cli(database_url, "tenants", "checkpoint-retention", tenant, "--max-age", "3600")
    cli(database_url, "sweep")
    assert ids_of(saver, thread) == [configs[-1]["configurable"]["checkpoint_id"]]
    assert sql("SELECT count(*) FROM checkpoints WHERE tenant_id = $1", tenant)[0][0] == 3


def test_prune_on_demand_keeps_the_latest_or_none(saver: RecallSaver) -> None:
    thread = fresh("prune")
    configs = put_chain(saver, thread, 3)
    saver.prune([thread])
    assert ids_of(saver, thread) == [configs[-1]["configurable"]["checkpoint_id"]]
    saver.prune([thread], strategy="delete")
    assert ids_of(saver, thread) == []
    put_chain(saver, thread, 1)  # pruning is no erasure: the thread is written again
    assert len(ids_of(saver, thread)) == 1
    with pytest.raises(ValueError, match="strategy"):
        saver.prune([thread], strategy="keep_some")


# ---- erasure ----------------------------------------------------------------------------------------


def test_a_deleted_thread_answers_410_and_is_gone_from_every_table(
        saver: RecallSaver, tenant_key: tuple[str, str], base_url: str, database_url: str, sql: Any) -> None:
    tenant, key = tenant_key
    thread = fresh("erase")
    configs = put_chain(saver, thread, 2, secret="the payment token")
    put_chain(saver, thread, 1, ns="child:1", secret="another")
    live = CliRunner().invoke(main, ["verify-erasure", "--checkpoints", "--tenant", tenant, thread],
                              env={"DATABASE_URL": database_url})
    assert live.exit_code == 1 and "is live" in live.output

    saver.delete_thread(thread)
    assert saver.get_tuple(configs[-1]) is None and ids_of(saver, thread) == []
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as http:
        assert_problem(http.get("/checkpoints/tuple", params={"thread_id": thread}), 410, thread)
        assert_problem(http.get("/checkpoints/tuple", params={"thread_id": thread, "checkpoint_id":
                                                              configs[0]["configurable"]["checkpoint_id"]}), 410)
        assert_problem(http.get("/checkpoints", params={"thread_id": thread}), 410)
        assert http.delete("/checkpoints", params={"thread_id": thread}).status_code == 204  # again: a no-op
        assert_problem(http.delete("/checkpoints", params={"thread_id": fresh("never")}), 404)
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        assert sql(f"SELECT count(*) FROM {table} WHERE tenant_id = $1 AND thread_id = $2", tenant, thread)[0][0] == 0
    assert sql("SELECT count(*) FROM checkpoint_threads WHERE tenant_id = $1 AND thread_id = $2 "
               "AND deleted_at IS NOT NULL", tenant, thread)[0][0] == 1  # the tombstone
    erased = CliRunner().invoke(main, ["verify-erasure", "--checkpoints", "--tenant", tenant, thread],
                                env={"DATABASE_URL": database_url})
    assert erased.exit_code == 0 and "erased" in erased.output
    # its thread_id is retired: a put is refused, not a silent resurrection
    from recall_server.client import Conflict

    with pytest.raises(Conflict, match="retired"):
        put_chain(saver, thread, 1)


def test_delete_for_runs_and_copy_thread(saver: RecallSaver) -> None:
    thread, target = fresh("runs"), fresh("copy")
    cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    first = saver.put(cfg, checkpoint(v=1), {"source": "loop", "step": 0, "run_id": "run-a"}, {"v": 1})
    cfg["configurable"]["checkpoint_id"] = first["configurable"]["checkpoint_id"]
    later = checkpoint(v=2)
    later["channel_versions"] = {"v": 2}
    second = saver.put(cfg, later, {"source": "loop", "step": 1, "run_id": "run-b"}, {"v": 2})
    saver.copy_thread(thread, target)
    assert ids_of(saver, target) == ids_of(saver, thread)
    saver.delete_for_runs(["run-a"])
    assert ids_of(saver, thread) == [second["configurable"]["checkpoint_id"]]
    assert saver.get_tuple(second).checkpoint["channel_values"] == {"v": 2}
    saver.copy_thread(fresh("nothing"), fresh("nowhere"))  # an unknown source copies nothing, as LangGraph's savers


# ---- writes land once; values once per version ------------------------------------------------------


def _put_body(thread: str, cid: str, value: bytes = b"\x01") -> PutCheckpoint:
    return PutCheckpoint(thread_id=thread, checkpoint_id=cid, type="msgpack", checkpoint=b"\x80",
                         channel_versions={"a": "1"}, metadata={"step": 0},
                         blobs=[ChannelBlob(channel="a", version="1", type="msgpack", data=value)])


def test_a_retried_put_lands_once_and_another_body_under_its_id_is_409(
        saver: RecallSaver, tenant_key: tuple[str, str], sql: Any) -> None:
    tenant, thread = tenant_key[0], fresh("retry")
    body = _put_body(thread, "cp-1")
    import msgspec

    with httpx.Client(base_url=saver.client.url, headers={"Authorization": f"Bearer {tenant_key[1]}",
                                                          "Content-Type": "application/json"}) as http:
        assert http.post("/checkpoints", content=msgspec.json.encode(body)).status_code == 201
        again = http.post("/checkpoints", content=msgspec.json.encode(body))
        assert again.status_code == 200 and again.json() == {"thread_id": thread, "checkpoint_ns": "",
                                                             "checkpoint_id": "cp-1"}
        assert_problem(http.post("/checkpoints", content=msgspec.json.encode(_put_body(thread, "cp-1", b"\x02"))),
                       409, "cp-1")
        writes = PutWrites(thread_id=thread, checkpoint_id="cp-1", task_id="t1",
                           writes=[WriteItem(idx=0, channel="c", type="msgpack", data=b"\x01")])
        for _ in range(2):
            assert http.post("/checkpoints/writes", content=msgspec.json.encode(writes)).status_code == 204
        # one idx twice in one request: the first regular write stays, a special channel's last one wins
        twice = msgspec.structs.replace(writes, task_id="t2", writes=[
            WriteItem(idx=0, channel="c", type="msgpack", data=b"\x01"),
            WriteItem(idx=0, channel="c", type="msgpack", data=b"\x02"),
            WriteItem(idx=-3, channel="__interrupt__", type="msgpack", data=b"\x03"),
            WriteItem(idx=-3, channel="__interrupt__", type="msgpack", data=b"\x04")])
        assert http.post("/checkpoints/writes", content=msgspec.json.encode(twice)).status_code == 204
    assert sql("SELECT count(*) FROM checkpoints WHERE tenant_id = $1 AND thread_id = $2", tenant, thread)[0][0] == 1
    rows = sql("SELECT task_id, idx, blob FROM checkpoint_writes WHERE tenant_id = $1 AND thread_id = $2 "
               "ORDER BY task_id, idx", tenant, thread)
    assert [tuple(r) for r in rows] == [("t1", 0, b"\x01"), ("t2", -3, b"\x04"), ("t2", 0, b"\x01")]


def test_an_unchanged_channel_is_stored_once(saver: RecallSaver, tenant_key: tuple[str, str], sql: Any) -> None:
    tenant, thread = tenant_key[0], fresh("blobs")
    cfg: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    big = "x" * 100_000
    first = checkpoint(doc=big, counter=1)
    stored = saver.put(cfg, first, {"source": "loop", "step": 0}, {"doc": 1, "counter": 1})
    second = checkpoint(doc=big, counter=2)
    second["channel_versions"] = {"doc": 1, "counter": 2}
    cfg["configurable"]["checkpoint_id"] = stored["configurable"]["checkpoint_id"]
    latest = saver.put(cfg, second, {"source": "loop", "step": 1}, {"counter": 2})  # only the counter changed
    rows = sql("SELECT channel, version FROM checkpoint_blobs WHERE tenant_id = $1 AND thread_id = $2 "
               "ORDER BY channel, version", tenant, thread)
    assert [tuple(r) for r in rows] == [("counter", "1"), ("counter", "2"), ("doc", "1")]
    assert saver.get_tuple(latest).checkpoint["channel_values"] == {"doc": big, "counter": 2}
    assert saver.get_tuple(stored).checkpoint["channel_values"] == {"doc": big, "counter": 1}


# ---- tenancy, deserialisation, bad input ----------------------------------------------------------


def test_a_thread_id_grants_nothing_in_another_tenant(saver: RecallSaver, base_url: str, database_url: str) -> None:
    thread = fresh("mine")
    configs = put_chain(saver, thread, 2)
    with RecallSaver(base_url, create_key(database_url, fresh("lgother"), "write")) as other:
        assert other.get_tuple(configs[-1]) is None
        assert list(other.list({"configurable": {"thread_id": thread}})) == []
        other.delete_thread(thread)
        other.prune([thread], strategy="delete")
        other.copy_thread(thread, fresh("stolen"))
        assert list(other.list(None)) == []
    assert len(ids_of(saver, thread)) == 2


@dataclasses.dataclass
class Unlisted:
    """A class no allow-list names: strict deserialisation must not construct it."""

    note: str


def test_strict_msgpack_does_not_construct_unlisted_classes(base_url: str, tenant_key: tuple[str, str]) -> None:
    thread = fresh("strict")
    permissive = JsonPlusSerializer(allowed_msgpack_modules=True)
    with RecallSaver(base_url, tenant_key[1], serde=permissive) as writer:
        stored = put_chain(writer, thread, 1, obj=Unlisted("hi"))[-1]
        assert writer.get_tuple(stored).checkpoint["channel_values"]["obj"] == Unlisted("hi")
    with RecallSaver(base_url, tenant_key[1]) as strict:  # the default: strict_serde()
        value = strict.get_tuple(stored).checkpoint["channel_values"]["obj"]
        assert not isinstance(value, Unlisted)
    allowed = JsonPlusSerializer(allowed_msgpack_modules=[(__name__, "Unlisted")])
    with RecallSaver(base_url, tenant_key[1], serde=allowed) as listed:
        assert listed.get_tuple(stored).checkpoint["channel_values"]["obj"] == Unlisted("hi")


@pytest.mark.parametrize(("method", "path", "kwargs"), [
    ("GET", "/checkpoints", {"params": {"metadata_contains": "[1]"}}),
    ("GET", "/checkpoints", {"params": {"metadata_contains": "{"}}),
    ("GET", "/checkpoints/tuple", {"params": {"thread_id": "two\nlines"}}),
    ("GET", "/checkpoints/tuple", {"params": {}}),
    ("POST", "/checkpoints", {"json": {"thread_id": "t", "checkpoint_id": "c", "type": "msgpack",
                                       "checkpoint": "not base64!"}}),
    ("POST", "/checkpoints", {"json": {"thread_id": "t", "checkpoint_id": "c", "type": "msgpack",
                                       "checkpoint": "", "metadata": {"k": "nul \u0000 here"}}}),
    ("POST", "/checkpoints/prune", {"json": {"thread_ids": ["t"], "keep": -1}}),
])
def test_bad_input_is_a_400_problem(client: httpx.Client, method: str, path: str, kwargs: dict[str, Any]) -> None:
    assert_problem(client.request(method, path, **kwargs), 400)


def test_a_read_key_reads_checkpoints_and_writes_none(saver: RecallSaver, base_url: str, database_url: str,
                                                      tenant_key: tuple[str, str]) -> None:
    from recall_server.client import Forbidden

    thread = fresh("scoped")
    configs = put_chain(saver, thread, 1)
    with RecallSaver(base_url, create_key(database_url, tenant_key[0], "read")) as reader:
        assert reader.get_tuple(configs[-1]) is not None
        with pytest.raises(Forbidden):
            put_chain(reader, thread, 1)
        with pytest.raises(Forbidden):
            reader.put_writes(configs[-1], [("ch", 1)], "task")
        with pytest.raises(Forbidden):
            reader.delete_thread(thread)
    assert len(ids_of(saver, thread)) == 1


def test_concurrent_puts_and_an_erasure_leave_nothing_behind(base_url: str, tenant_key: tuple[str, str],
                                                             sql: Any) -> None:
    import asyncio

    tenant, thread = tenant_key[0], fresh("race")
    asyncio.run(_race(base_url, tenant_key[1], thread))
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        assert sql(f"SELECT count(*) FROM {table} WHERE tenant_id = $1 AND thread_id = $2", tenant, thread)[0][0] == 0


async def _race(base_url: str, key: str, thread: str) -> None:
    import asyncio

    from recall_server.client import Conflict

    saver = RecallSaver(base_url, key)

    async def one(i: int) -> Any:
        cp = checkpoint(v=i)
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        stored = await saver.aput(config, cp, {"source": "loop", "step": i}, cp["channel_versions"])
        await saver.aput_writes(stored, [("ch", i)], f"task-{i}")
        return stored

    try:
        await asyncio.gather(*(one(i) for i in range(8)))  # a new thread's row made by one, waited for by the rest
        assert len([t async for t in saver.alist({"configurable": {"thread_id": thread}})]) == 8
        # puts racing an erasure: each lands before it (and is erased) or is refused after it
        results = await asyncio.gather(*(one(i) for i in range(8, 16)), saver.adelete_thread(thread),
                                       return_exceptions=True)
        assert all(r is None or isinstance(r, (dict, Conflict)) for r in results), results
    finally:
        await saver.aclose()


def test_a_recall_thread_shows_the_langgraph_run_kept_under_its_id(saver: RecallSaver, base_url: str,
                                                                   tenant_key: tuple[str, str]) -> None:
    """A router hops from GET /threads/{id} into the run's state: when a LangGraph thread_id is a recall thread's
    ID, the thread's view counts its checkpoints, names the newest, and links to it."""
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {tenant_key[1]}"}, timeout=30) as c:
        thread = Graph(c).thread(summary="a LangGraph run's thread")["id"]
        assert "checkpoints" not in c.get(f"/threads/{thread}").json()  # none yet: nothing shown
        configs = put_chain(saver, thread, 3, x=1)
        put_chain(saver, thread, 2, ns="sub:1", y=2)  # a subgraph's namespace is not counted
        view = c.get(f"/threads/{thread}").json()
        newest = configs[-1]["configurable"]["checkpoint_id"]
        assert (view["checkpoints"], view["latest_checkpoint"]) == (3, newest)
        state = c.get(view["links"]["checkpoint"])
        assert state.status_code == 200 and newest in state.text
        assert c.get(view["links"]["checkpoints"]).status_code == 200
        saver.delete_thread(thread)
        assert "checkpoints" not in c.get(f"/threads/{thread}").json()


# ---- large values ---------------------------------------------------------------------------------------


def test_a_channel_value_above_64_kib_is_read_from_its_link_with_etag_and_range(
    saver: RecallSaver, base_url: str, tenant_key: tuple[str, str]
) -> None:
    """A tuple stays small: a 1 MB value comes as its size and a link, served like a payload, and the saver
    reads it from there; a small one stays inline."""
    thread = fresh()
    big, small = "x" * 1_000_000, "fits"
    stored = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                       checkpoint(big=big, small=small), {}, {"big": 1, "small": 1})
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {tenant_key[1]}"}) as c:
        tuple_ = c.get("/checkpoints/tuple", params={"thread_id": thread})
        assert tuple_.status_code == 200 and len(tuple_.content) < 10_000
        values = {v["channel"]: v for v in tuple_.json()["channel_values"]}
        assert values["small"]["data"] is not None and "href" not in values["small"]
        assert values["big"]["data"] is None and values["big"]["size"] > 1_000_000
        whole = c.get(values["big"]["href"])
        assert whole.status_code == 200 and len(whole.content) == values["big"]["size"]
        assert c.get(values["big"]["href"], headers={"If-None-Match": whole.headers["etag"]}).status_code == 304
        part = c.get(values["big"]["href"], headers={"Range": "bytes=0-9"})
        assert part.status_code == 206 and part.content == whole.content[:10]
        assert_problem(c.get("/checkpoints/value", params={"thread_id": thread, "channel": "big", "version": "9"}),
                       404, "big")
    got = saver.get_tuple(stored)
    assert got is not None and got.checkpoint["channel_values"] == {"big": big, "small": small}
    assert [t.checkpoint["channel_values"]["big"] for t in saver.list({"configurable": {"thread_id": thread}})] == [big]


async def test_the_async_saver_reads_a_large_value_from_its_link(base_url: str, api_key: str) -> None:
    saver = RecallSaver(base_url, api_key)
    try:
        thread = fresh()
        stored = await saver.aput({"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
                                  checkpoint(big="y" * 300_000), {}, {"big": 1})
        got = await saver.aget_tuple(stored)
        assert got is not None and got.checkpoint["channel_values"] == {"big": "y" * 300_000}
        listed = [t async for t in saver.alist({"configurable": {"thread_id": thread}})]
        assert [t.checkpoint["channel_values"]["big"] for t in listed] == ["y" * 300_000]
    finally:
        await saver.aclose()


def test_a_pending_write_above_64_kib_is_read_from_its_link_with_etag_and_range(
    saver: RecallSaver, base_url: str, tenant_key: tuple[str, str]
) -> None:
    """A task's large result stays out of the tuple and the list: it comes as its size and a link, served like a
    payload, and the saver reads it from there; a small write stays inline."""
    thread, big = fresh("tool"), "r" * 1_000_000
    stored = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint(v=1), {}, {"v": 1})
    saver.put_writes(stored, [("result", big), ("note", "small")], "task-1")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {tenant_key[1]}"}) as c:
        tuple_ = c.get("/checkpoints/tuple", params={"thread_id": thread})
        assert tuple_.status_code == 200 and len(tuple_.content) < 10_000
        writes = {w["channel"]: w for w in tuple_.json()["pending_writes"]}
        assert writes["note"]["data"] is not None and "href" not in writes["note"]
        assert writes["result"]["data"] is None and writes["result"]["size"] > 1_000_000
        listed = c.get("/checkpoints", params={"thread_id": thread})
        assert listed.status_code == 200 and len(listed.content) < 10_000
        assert [w["href"] for w in listed.json()["data"][0]["pending_writes"] if "href" in w] == [writes["result"]["href"]]
        href = writes["result"]["href"]
        whole = c.get(href)
        assert whole.status_code == 200 and len(whole.content) == writes["result"]["size"]
        assert whole.headers["content-type"] == "application/octet-stream"
        assert c.get(href, headers={"If-None-Match": whole.headers["etag"]}).status_code == 304
        part = c.get(href, headers={"Range": "bytes=10-19"})
        assert part.status_code == 206 and part.content == whole.content[10:20]
        one = {"thread_id": thread, "checkpoint_id": stored["configurable"]["checkpoint_id"], "task_id": "task-1"}
        assert_problem(c.get("/checkpoints/writes/value", params={**one, "idx": 7}), 404, "task-1")
        assert_problem(c.get("/checkpoints/writes/value", params={**one, "task_id": "task-2", "idx": 0}), 404)
        assert_problem(c.get("/checkpoints/writes/value", params={**one, "idx": "first"}), 400)
    got = saver.get_tuple(stored)
    assert got is not None and got.pending_writes == [("task-1", "result", big), ("task-1", "note", "small")]
    assert [t.pending_writes for t in saver.list({"configurable": {"thread_id": thread}})] == [got.pending_writes]
    saver.delete_thread(thread)
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {tenant_key[1]}"}) as c:
        assert_problem(c.get(href), 410, thread)


async def test_the_async_saver_reads_a_large_pending_write_from_its_link(base_url: str, api_key: str) -> None:
    saver = RecallSaver(base_url, api_key)
    try:
        thread, big = fresh(), {"rows": ["y" * 100] * 3_000}
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": "tools:1"}}
        stored = await saver.aput(config, checkpoint(v=1), {}, {"v": 1})
        await saver.aput_writes(stored, [("result", big)], "task-a", "~path")
        view = await saver.aclient.checkpoint_tuple(thread, "tools:1")
        assert view.pending_writes[0].data is None and "checkpoint_ns=tools%3A1" in (view.pending_writes[0].href or "")
        got = await saver.aget_tuple(stored)
        assert got is not None and got.pending_writes == [("task-a", "result", big)]
        listed = [t async for t in saver.alist({"configurable": {"thread_id": thread, "checkpoint_ns": "tools:1"}})]
        assert [t.pending_writes for t in listed] == [[("task-a", "result", big)]]
    finally:
        await saver.aclose()


def test_a_large_pending_write_is_a_404_for_a_key_whose_grants_miss_its_thread(
        base_url: str, database_url: str, tenant_key: tuple[str, str]) -> None:
    tenant, key = tenant_key
    thread = fresh("granted")
    with RecallSaver(base_url, key, namespace=["users", "ann"]) as writer:
        stored = writer.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint(v=1), {}, {"v": 1})
        writer.put_writes(stored, [("result", "z" * 200_000)], "task-1")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {create_key(database_url, tenant, 'admin')}"}) as admin:
        def reader(namespace: str) -> httpx.Client:
            made = admin.post("/admin/keys", json={"scope": "read",
                                                   "grants": [{"namespace": f"{namespace}/**", "access": "read"}]})
            assert made.status_code == 201, made.text
            return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {made.json()['key']}"})

        with reader("users/ann") as ann, reader("users/bob") as bob:
            href = ann.get("/checkpoints/tuple", params={"thread_id": thread}).json()["pending_writes"][0]["href"]
            assert ann.get(href).status_code == 200 and len(ann.get(href).content) > 200_000
            assert_problem(bob.get(href), 404, thread)
            assert_problem(bob.get("/checkpoints/tuple", params={"thread_id": thread}), 404, thread)


# ---- pending writes without their checkpoint ------------------------------------------------------------


def new_id() -> str:
    """A checkpoint ID as LangGraph makes them: above every one made before."""
    from langgraph.checkpoint.base.id import uuid6

    return str(uuid6(clock_seq=-1))


def writes_without_checkpoint(sql: Any, tenant: str, thread: str) -> list[str]:
    """The checkpoint IDs of the thread's pending writes whose checkpoint is not stored (read as the owner)."""
    rows = sql("""SELECT DISTINCT w.checkpoint_id FROM checkpoint_writes w
                   WHERE w.tenant_id = $1 AND w.thread_id = $2 AND NOT EXISTS (
                         SELECT 1 FROM checkpoints c WHERE c.tenant_id = w.tenant_id AND c.thread_id = w.thread_id
                            AND c.checkpoint_ns = w.checkpoint_ns AND c.checkpoint_id = w.checkpoint_id)
                   ORDER BY 1""", tenant, thread)
    return [r[0] for r in rows]


def at(thread: str, checkpoint_id: str, ns: str = "") -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


def test_prune_deletes_the_writes_whose_checkpoint_is_gone_and_the_run_resumes(
        saver: RecallSaver, tenant_key: tuple[str, str], sql: Any) -> None:
    """keep_latest drops the pruned checkpoints' writes and those put for a checkpoint that never came (below the
    newest); a write above the newest is kept, as its checkpoint's put may be on its way; the run resumes."""
    tenant, thread = tenant_key[0], fresh("orphans")
    config = {"configurable": {"thread_id": thread}}
    never = new_id()
    graph = approval_graph(saver)
    assert graph.invoke({"request": "refund #78"}, config, durability="sync")["drafted"] == "reply to refund #78"
    saver.put_writes(at(thread, never), [("request", "lost")], "task-never")
    ahead = new_id()
    saver.put_writes(at(thread, ahead), [("request", "on its way")], "task-ahead")
    assert len(ids_of(saver, thread)) > 1 and writes_without_checkpoint(sql, tenant, thread) == [never, ahead]

    saver.prune([thread])
    assert writes_without_checkpoint(sql, tenant, thread) == [ahead]
    assert graph.invoke(None, config, durability="sync")["sent"] == "sent: reply to refund #78"
    saver.prune([thread])  # now below the newest, and no checkpoint has its ID
    assert writes_without_checkpoint(sql, tenant, thread) == []
    assert graph.get_state(config).values["sent"] == "sent: reply to refund #78"

    saver.put_writes(at(thread, new_id()), [("request", "on its way")], "task-ahead")
    saver.prune([thread], strategy="delete")  # every checkpoint, and every write of the thread
    assert sql("SELECT count(*) FROM checkpoint_writes WHERE tenant_id = $1 AND thread_id = $2",
               tenant, thread)[0][0] == 0


def test_the_sweep_deletes_the_writes_whose_checkpoint_is_gone_without_a_retention_policy(
        saver: RecallSaver, tenant_key: tuple[str, str], database_url: str, sql: Any) -> None:
    tenant, thread = tenant_key[0], fresh("late")
    root = put_chain(saver, thread, 3)
    child = put_chain(saver, thread, 2, ns="child:1")
    saver.prune([thread])
    late = root[0]["configurable"]["checkpoint_id"]
    saver.put_writes(root[0], [("ch", "landed after the prune")], "task-late")  # a write racing the prune
    ahead = new_id()
    saver.put_writes(at(thread, ahead, "child:1"), [("ch", "on its way")], "task-ahead")
    assert writes_without_checkpoint(sql, tenant, thread) == sorted([late, ahead])
    cli(database_url, "sweep")
    assert writes_without_checkpoint(sql, tenant, thread) == [ahead]
    assert saver.get_tuple(root[-1]).pending_writes == [("task-2", "ch", "write 2")]
    assert saver.get_tuple(child[-1]).pending_writes == [("task-1", "ch", "write 1")]
