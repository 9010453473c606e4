"""The Python client against a live server: the server's own Structs, one exception class per problem,
pages as iterators, and retried writes that land exactly once."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest
from faults import PostgresProxy
from helpers import ServerProcess, create_key, uid

from recall_server import demo, errors
from recall_server import client as rc
from recall_server.client import RecallClient
from recall_server.process import free_port
from recall_server.models import (
    Backlink,
    BacklinkPage,
    Event,
    EventPage,
    GrepResult,
    HookList,
    HookView,
    MemoryPage,
    MemoryVersionPage,
    MemoryView,
    NamespacePage,
    NewHook,
    Read,
    ReadPage,
    ReportView,
    Resolved,
    SearchHit,
    SearchPage,
    ThreadPage,
    ThreadView,
    TriggerView,
    WorkerView,
)


@pytest.fixture()
def recall(base_url: str, api_key: str) -> Iterator[RecallClient]:
    with RecallClient(base_url, api_key) as c:
        yield c


class Recording(httpx.HTTPTransport):
    """The real transport, remembering every request it sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[httpx.Request] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request)
        return super().handle_request(request)


class LoseFirstAnswer(Recording):
    """Delivers the first request to the server, then loses its answer: the connection drops, or a 503
    arrives in its place. Every later attempt goes through untouched."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if len(self.sent) > 1:
            return response
        response.read()  # the server has answered: the write committed
        response.close()
        if self.how == "drop":
            raise httpx.RemoteProtocolError("server disconnected without sending a response", request=request)
        return httpx.Response(503, headers={"Retry-After": "0", "Content-Type": errors.PROBLEM_JSON},
                              json={"type": "urn:recall-server:problem:unavailable", "title": "Service Unavailable",
                                    "status": 503, "detail": "injected", "instance": request.url.path},
                              request=request)


# ---- typed views -------------------------------------------------------------------------------


def test_reads_return_the_servers_structs(recall: RecallClient, base_url: str, api_key: str) -> None:
    demo.load(base_url, api_key)
    thread = recall.get("thr_pr_412")
    assert isinstance(thread, ThreadView) and thread.status == "merged"
    worker = recall.get(thread.owner_workers[0].id)
    assert isinstance(worker, WorkerView) and worker.id == "wkr_77a0"
    assert worker.reports[0].refs == ["trg_8f21"]
    trigger = recall.get("trg_8f21")
    assert isinstance(trigger, TriggerView) and trigger.spilled.payload.href == "/triggers/trg_8f21/payload"
    report = recall.get("rpt_412a")
    assert isinstance(report, ReportView) and report.thread_id == "thr_pr_412"
    assert recall.resolve("rpt_412a") == Resolved(id="rpt_412a", type="report", href="/reports/rpt_412a",
                                                  summary=report.summary)
    events = recall.list_events("thr_pr_412", limit=2)
    assert isinstance(events, EventPage) and [e.seq for e in events.data] == [1, 2] and events.has_more
    assert isinstance(recall.list_threads(limit=1), ThreadPage)
    assert recall.list_reports("wkr_77a0").data[0].id == "rpt_412a"


def test_payloads_and_bodies_are_bytes_with_optional_ranges(recall: RecallClient, base_url: str,
                                                            api_key: str) -> None:
    demo.load(base_url, api_key)
    log = demo.ci_log().encode()
    assert recall.read_payload("trg_8f21") == log
    assert recall.read_payload("trg_8f21", 0, 99) == log[:100]
    assert recall.read_payload("trg_8f21", 100) == log[100:]
    body = recall.read_body("rpt_412a")
    assert b"payment timeout" in body
    assert recall.read_body("rpt_412a", 2, 5) == body[2:6]
    content = recall.read("trg_8f21", 10, 19)
    assert content.data == log[10:20] and content.content_type.startswith("text/plain")


def test_writes_return_views(recall: RecallClient) -> None:
    worker = recall.create_worker(id=uid("wkr"), name="w", summary="a worker")
    thread = recall.create_thread(id=uid("thr"), title="t", summary="a thread")
    assert isinstance(worker, WorkerView) and isinstance(thread, ThreadView)
    assert recall.assign_owner(thread.id, worker.id).owner_workers[0].id == worker.id
    trigger = recall.create_trigger(source="test", thread_id=thread.id, summary="CI red", payload={"k": 1})
    assert isinstance(trigger, TriggerView) and trigger.payload == {"k": 1}
    report = recall.create_report(worker.id, thread_id=thread.id, summary="fixed", body="text", refs=[trigger.id])
    assert isinstance(report, ReportView) and report.refs[0].id == trigger.id
    note = recall.add_note(thread.id, "retrying", ref=report.id)
    assert isinstance(note, Event) and note.type == "note" and note.ref == report.id
    assert recall.update_thread(thread.id, status="closed").status == "closed"
    assert [e.type for e in recall.iter_events(thread.id)] == [
        "owner_assigned", "trigger_filed", "report_filed", "note", "status_changed"]
    recall.delete_trigger(trigger.id)
    with pytest.raises(rc.Gone):
        recall.get(trigger.id)


def test_reads_as_of_an_instant_through_the_client(recall: RecallClient) -> None:
    root = uid("mem")[4:]
    word = uid("w")[2:].lower()
    first = recall.remember(namespace=[root], key="plan", value=f"basic {word}")
    second = recall.remember(namespace=[root], key="plan", value="pro")
    then = first.created_at + (second.created_at - first.created_at) / 2
    assert [e.id for e in recall.list_memories(namespace=[root], as_of=then).data] == [first.id]
    assert [v.status for v in recall.memory_versions(second.id, as_of=second.created_at + timedelta(seconds=1)).data] \
        == ["current", "superseded"]
    assert [h.id for h in recall.search(word, as_of=then).data] == [first.id]
    thread = recall.create_thread(title="t")
    note = recall.add_note(thread.id, "first")
    assert recall.list_events(thread.id, as_of=note.at - timedelta(seconds=1)).data == []
    with pytest.raises(rc.NotFound):
        recall.memory_versions(second.id, as_of=then)  # not written yet


def test_the_client_vocabulary_is_the_servers() -> None:
    assert {s: c.__name__ for s, c in rc.BY_STATUS.items()} == {s: c.__name__ for s, c in errors.BY_STATUS.items()}
    assert all(issubclass(c, rc.RecallError) for c in rc.BY_STATUS.values())


# ---- memories ------------------------------------------------------------------------------------


def test_memories_through_the_client(recall: RecallClient) -> None:
    root = uid("mem")[4:]
    trigger = recall.create_trigger(source="test", summary="said so", payload="prefers casual")
    first = recall.remember(namespace=[root, "u1"], key="tone", kind="preference", value={"tone": "casual", "n": 1},
                            summary="prefers a casual tone", sources=[trigger.id], tags={"src": "chat"},
                            confirmed="user")
    assert isinstance(first, MemoryView) and first.version == 1 and first.chain_created_at is None
    second = recall.remember(namespace=[root, "u1"], key="tone", kind="preference", value={"tone": "formal", "n": 2})
    assert second.supersedes.id == first.id and second.chain_created_at == first.created_at
    recall.remember(namespace=[root, "u2"], key="tone", value={"tone": "casual"}, tags={"src": "chat"})
    recall.remember(namespace=[root, "u2", "work"], key="editor", value="vim", content_type="text/plain",
                    kind="procedure")

    current = recall.current_memory([root, "u1"], "tone")
    assert current.id == second.id and current.value == {"tone": "formal", "n": 2}
    assert recall.current_memory(f"{root}/u1", "tone").id == second.id  # a namespace joined by '/' too
    assert recall.get(first.id).status == "superseded" and recall.get_memory(first.id).value["tone"] == "casual"
    assert recall.memory_value(second.id) == b'{"tone":"formal","n":2}'
    assert recall.memory_value(second.id, 2, 5) == b'tone'

    page = recall.list_memories(namespace=[root], limit=2)
    assert isinstance(page, MemoryPage) and page.has_more and len(page.data) == 2
    assert [(m.namespace, m.key) for m in recall.iter_memories(namespace=root, limit=1)] == [
        ([root, "u1"], "tone"), ([root, "u2"], "tone"), ([root, "u2", "work"], "editor")]
    assert [m.namespace for m in recall.iter_memories(namespace=root, value_contains={"tone": "casual"})] == [
        [root, "u2"]]
    assert [m.key for m in recall.iter_memories(namespace=root, kind="procedure")] == ["editor"]
    assert [m.namespace for m in recall.iter_memories(namespace=root, tags={"src": "chat"})] == [[root, "u2"]]
    assert [m.namespace for m in recall.iter_memories(namespace=root, tags=["src:chat"])] == [[root, "u2"]]
    assert [m.chain_created_at for m in recall.iter_memories(namespace=[root, "u1"])] == [first.created_at]

    versions = recall.memory_versions(second.id, limit=1)
    assert isinstance(versions, MemoryVersionPage) and versions.data[0].id == second.id and versions.has_more
    assert [v.status for v in recall.iter_memory_versions(first.id)] == ["current", "superseded"]

    namespaces = recall.memory_namespaces(prefix=[root], limit=2)
    assert isinstance(namespaces, NamespacePage) and namespaces.data == [[root, "u1"], [root, "u2"]]
    assert list(recall.iter_memory_namespaces(prefix=root, limit=1)) == [[root, "u1"], [root, "u2"],
                                                                          [root, "u2", "work"]]
    assert list(recall.iter_memory_namespaces(prefix=root, suffix="work")) == [[root, "u2", "work"]]
    assert list(recall.iter_memory_namespaces(prefix=root, max_depth=1)) == [[root]]

    recall.delete_memory(first.id)  # every version of the pair
    with pytest.raises(rc.Gone):
        recall.current_memory([root, "u1"], "tone")
    with pytest.raises(rc.Gone):
        recall.get_memory(second.id)
    with pytest.raises(rc.NotFound) as miss:
        recall.current_memory([root, "u9"], "tone")
    assert miss.value.extra == {"namespace": [root, "u9"], "key": "tone"}
    with pytest.raises(rc.BadRequest):
        recall.current_memory(["not a segment"], "tone")


# ---- search, backlinks, grep, the trace, hooks -----------------------------------------------------


def test_search_backlinks_and_grep_through_the_client(recall: RecallClient, base_url: str, api_key: str) -> None:
    demo.load(base_url, api_key)
    page = recall.search("PaymentGatewayError", mode="exact")  # every object with the word, and only those
    assert isinstance(page, SearchPage) and all(isinstance(h, SearchHit) for h in page.data)
    [hit] = page.data
    assert recall.search("PaymentGatewayError").data[0].id == hit.id  # hybrid, the default: first too
    assert (hit.id, hit.type, hit.thread_id) == ("trg_8f21", "trigger", "thr_pr_412")
    assert "**paymentgatewayerror**" in hit.snippet.lower()
    assert {h.id for h in recall.search('"payment timeout"', mode="exact", type=["trigger", "report"]).data} >= {
        "trg_8f21", "rpt_412a"}
    assert recall.search('"payment timeout"', mode="exact", type="thread").data == []

    word = uid("thr")[4:].lower()
    made = [recall.create_trigger(source="test", summary=f"{word} {i}", payload="-").id for i in range(5)]
    first = recall.search(word, mode="exact", limit=2)
    assert len(first.data) == 2 and first.has_more and first.next_cursor
    assert sorted(h.id for h in recall.iter_search(word, mode="exact", limit=2)) == sorted(made)
    assert [h.id for h in recall.iter_search(word, mode="exact", since=datetime.now(UTC) + timedelta(minutes=5))] == []
    assert len(list(recall.iter_search(word, mode="exact", until=datetime.now(UTC) + timedelta(minutes=5)))) == 5

    links = recall.backlinks("trg_8f21")
    assert isinstance(links, BacklinkPage) and all(isinstance(b, Backlink) for b in links.data)
    assert {(b.relation, b.id) for b in links.data} >= {("cites", "rpt_412a"), ("event", "thr_pr_412")}
    assert [(b.relation, b.id) for b in recall.iter_backlinks("trg_8f21", limit=1)] == [
        (b.relation, b.id) for b in links.data]
    with pytest.raises(rc.NotFound):
        recall.backlinks(uid("trg"))

    found = recall.grep_payload("trg_8f21", "payment timeout")
    assert isinstance(found, GrepResult) and found.bytes == len(demo.ci_log().encode())
    [match] = found.matches
    assert match.line == 201 and "payment timeout after 30s" in match.lines[0].text
    first_byte, last_byte = (int(n) for n in match.range.removeprefix("bytes=").split("-"))
    assert recall.read_payload("trg_8f21", first_byte, last_byte).decode().rstrip("\n") == match.lines[0].text
    around = recall.grep_payload("trg_8f21", r"payment\s+timeout", regex=True, context=1, max=1)
    assert [line.number for line in around.matches[0].lines] == [200, 201, 202]
    assert recall.grep_payload("trg_8f21", "payment\\s+timeout").matches == []  # literal without regex
    assert recall.grep("trg_8f21", "payment timeout") == found
    body = recall.grep_body("rpt_412a", "timeout")
    assert body.matches[0].line == 1 and recall.grep("rpt_412a", "timeout") == body
    with pytest.raises(rc.BadRequest):
        recall.grep_payload("trg_8f21", "(", regex=True)


@pytest.mark.slow
def test_the_trace_pages_through_the_client(base_url: str, api_key: str) -> None:
    demo.load(base_url, api_key)
    run = f"client-{uid('thr')[4:]}"
    with RecallClient(base_url, api_key, run=run) as traced:
        traced.get("thr_pr_412")
        traced.get("wkr_77a0")
        traced.read_payload("trg_8f21")
    with RecallClient(base_url, api_key) as recall:
        deadline = time.monotonic() + 20
        while len(reads := list(recall.iter_run_reads(run, limit=1))) < 3 and time.monotonic() < deadline:
            time.sleep(0.3)  # reads show once they are older than the settle horizon (2 flush intervals)
        assert all(isinstance(r, Read) for r in reads)
        assert [(r.object_id, r.status) for r in reads] == [
            ("thr_pr_412", 200), ("wkr_77a0", 200), ("trg_8f21", 200)]
        page = recall.run_reads(run, limit=2)
        assert isinstance(page, ReadPage) and page.has_more and page.next_cursor
        assert recall.run_reads(run, page.next_cursor).data == reads[2:]
        assert run in {r.run for r in recall.iter_object_reads("wkr_77a0")}
        assert isinstance(recall.object_reads("wkr_77a0", limit=1), ReadPage)
        assert recall.run_reads(f"never-{run}").data == []  # a run is a label: no reads is an empty page
        with pytest.raises(rc.NotFound):
            recall.object_reads(uid("wkr"))


def test_hooks_admin_through_the_client(base_url: str, database_url: str) -> None:
    tenant = f"hooks-{uid('thr')[4:12].lower()}"
    with RecallClient(base_url, create_key(database_url, tenant, "admin")) as admin:
        made = admin.create_hook(label="payments")
        assert isinstance(made, NewHook) and made.secret and made.url == f"/hooks/github/{made.id}"
        listed = admin.list_hooks()
        assert isinstance(listed, HookList) and [h.id for h in listed.data] == [made.id]
        assert listed.data[0].revoked_at is None and listed.data[0].label == "payments"
        revoked = admin.revoke_hook(made.id)
        assert isinstance(revoked, HookView) and revoked.revoked_at is not None
        with pytest.raises(rc.NotFound):
            admin.revoke_hook("hk_" + "A" * 32)
    with RecallClient(base_url, create_key(database_url, tenant, "write")) as writer, pytest.raises(rc.Forbidden):
        writer.create_hook()


# ---- problems as exceptions ----------------------------------------------------------------------


def test_each_problem_is_its_own_exception_with_the_problem_members(
    recall: RecallClient, base_url: str, database_url: str
) -> None:
    missing = uid("thr")
    with pytest.raises(rc.NotFound) as miss:
        recall.get_thread(missing)
    e = miss.value
    assert (e.status, e.title, e.type) == (404, "Not Found", "urn:recall-server:problem:not-found")
    assert e.detail == f"No thread with ID {missing} exists." and e.instance == f"/threads/{missing}"
    assert e.request_id and e.extra == {"id": missing}

    with pytest.raises(rc.NotFound, match="is not a recall ID"):
        recall.get("not-an-id")
    with pytest.raises(rc.NotFound, match="is a trigger ID"):
        recall.get_thread("trg_8f21")

    thread = recall.create_thread(id=uid("thr"), title="t")
    with pytest.raises(rc.Conflict):
        recall.create_thread(id=thread.id, title="another title")
    with pytest.raises(rc.Unprocessable) as dangling:
        recall.add_note(thread.id, "cites nothing", ref=(ghost := uid("trg")))
    assert dangling.value.extra["missing"] == [ghost]
    with pytest.raises(rc.BadRequest, match="cursor"):
        recall.list_events(thread.id, cursor="forged.cursor")
    with pytest.raises(rc.RangeNotSatisfiable):
        recall.read_payload(recall.create_trigger(source="t", summary="s", payload="tiny").id, 100, 200)
    with pytest.raises(rc.Forbidden):  # a write key is not an admin key
        recall.list_keys()
    recall.delete_thread(thread.id)
    with pytest.raises(rc.Gone) as gone:
        recall.get(thread.id)
    assert gone.value.status == 410 and thread.id in gone.value.detail

    visible = recall.create_thread(title="x")
    with RecallClient(base_url, create_key(database_url, "default", "read")) as reader:
        assert reader.get_thread(visible.id).id == visible.id
        with pytest.raises(rc.Forbidden, match="read scope"):
            reader.create_thread(title="not allowed")
        assert not reader.can_write() and recall.can_write()
    for bad in (None, "rk_nonsense", "rk_0123456789abcdef." + "A" * 43):
        with RecallClient(base_url, bad) as stranger, pytest.raises(rc.Unauthorized) as denied:
            stranger.get_thread("thr_pr_412")
        assert denied.value.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.fault
def test_an_unavailable_database_is_unavailable_after_the_retries(database_url: str, tmp_path: Path) -> None:
    proxy = PostgresProxy(database_url)
    server = ServerProcess(proxy.url, tmp_path / "server.log", RECALL_DB_TIMEOUT="1",
                           RECALL_SWEEP_INTERVAL="0").start()
    try:
        key = create_key(database_url, "default", "write")
        proxy.cut()
        with RecallClient(server.url, key, max_retries=1, max_retry_wait=0.1) as client:
            started = time.monotonic()
            with pytest.raises(rc.Unavailable) as down:
                client.get_thread("thr_pr_412")
        assert down.value.status == 503 and "retry-after" in down.value.headers
        assert time.monotonic() - started < 10
    finally:
        server.stop()
        proxy.close()


# ---- pages as iterators ------------------------------------------------------------------------


def test_iter_events_follows_a_live_thread_and_yields_every_event_once(
    recall: RecallClient, base_url: str, api_key: str
) -> None:
    thread = recall.create_thread(id=uid("thr"), title="hot")
    appends = 60
    seen: list[int] = []

    def append() -> None:
        with RecallClient(base_url, api_key) as writer:
            for i in range(appends):
                writer.add_note(thread.id, f"note {i}")

    def follow() -> None:
        with RecallClient(base_url, api_key) as reader:
            for event in reader.iter_events(thread.id, follow=True, limit=7, poll_interval=0.02):
                seen.append(event.seq)
                if len(seen) >= appends:
                    return

    writer, tail = threading.Thread(target=append), threading.Thread(target=follow, daemon=True)
    tail.start()
    writer.start()
    writer.join(60)
    tail.join(60)
    assert not tail.is_alive(), f"the tail stopped receiving events after {len(seen)}"
    assert seen == list(range(1, appends + 1))
    assert [e.seq for e in recall.iter_events(thread.id, limit=9)] == seen  # and a plain walk, all pages


def test_iter_events_resumes_after_a_cursor(recall: RecallClient) -> None:
    thread = recall.create_thread(id=uid("thr"), title="t")
    for i in range(5):
        recall.add_note(thread.id, f"n{i}")
    first = recall.list_events(thread.id, limit=2)
    assert [e.summary for e in recall.iter_events(thread.id, after=first.next_cursor, limit=2)] == ["n2", "n3", "n4"]


def test_iter_threads_and_iter_reports_walk_every_page(recall: RecallClient) -> None:
    app = f"app-{uid('thr')[4:]}"
    worker = recall.create_worker(id=uid("wkr"), name="w", app_id=app)
    made = [recall.create_thread(id=uid("thr"), title="t", app_id=app).id for _ in range(5)]
    assert sorted(t.id for t in recall.iter_threads(app_id=app, limit=2)) == sorted(made)
    reports = [recall.create_report(worker.id, thread_id=t, summary="r", app_id=app).id for t in made]
    assert sorted(r.id for r in recall.iter_reports(worker.id, limit=2)) == sorted(reports)


# ---- retries, idempotency, runs -----------------------------------------------------------------


@pytest.mark.parametrize("how", ["drop", "503"])
def test_a_write_whose_answer_is_lost_is_retried_with_the_same_key_and_lands_once(
    recall: RecallClient, base_url: str, api_key: str, how: str
) -> None:
    thread = recall.create_thread(id=uid("thr"), title="t")
    transport = LoseFirstAnswer(how)
    with RecallClient(base_url, api_key, transport=transport, max_retry_wait=0.05) as flaky:
        note = flaky.add_note(thread.id, "exactly once")
    assert [e.summary for e in recall.iter_events(thread.id)] == ["exactly once"], "the retry wrote again"
    assert note.seq == 1
    first, retry = transport.sent
    assert first.headers["idempotency-key"] == retry.headers["idempotency-key"]


def test_each_call_has_its_own_idempotency_key(base_url: str, api_key: str) -> None:
    transport = Recording()
    with RecallClient(base_url, api_key, transport=transport) as client:
        thread = client.create_thread(title="t")
        client.add_note(thread.id, "same words")
        client.add_note(thread.id, "same words")
    keys = [r.headers["idempotency-key"] for r in transport.sent]
    assert len(set(keys)) == 3
    assert [e.summary for e in RecallClient(base_url, api_key).iter_events(thread.id)] == ["same words"] * 2


def test_retries_are_bounded(base_url: str, api_key: str) -> None:
    class AlwaysDown(httpx.BaseTransport):
        calls = 0

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            AlwaysDown.calls += 1
            raise httpx.ConnectError("refused", request=request)

    with RecallClient(base_url, api_key, transport=AlwaysDown(), max_retries=2, max_retry_wait=0.01) as client:
        with pytest.raises(rc.Unreachable):
            client.get_thread("thr_pr_412")
    assert AlwaysDown.calls == 3


def test_the_run_is_sent_on_every_call(base_url: str, api_key: str) -> None:
    """Reads carry the run for the trace, writes for the audit; a call's own run wins over the client's."""
    transport = Recording()
    with RecallClient(base_url, api_key, transport=transport, run="run-a") as client:
        thread = client.create_thread(title="t")
        client.get_thread(thread.id)
        client.get_thread(thread.id, run="run-b")
    with RecallClient(base_url, api_key, transport=transport) as client:
        client.get_thread(thread.id)
    create, read, other, unrun = transport.sent[-4:]
    assert (create.headers["x-recall-run"], read.headers["x-recall-run"], other.headers["x-recall-run"]) == (
        "run-a", "run-a", "run-b")
    assert "x-recall-run" not in unrun.headers


def test_defaults_come_from_the_environment_then_the_local_server(
    base_url: str, api_key: str, server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RECALL_URL", base_url)
    monkeypatch.setenv("RECALL_API_KEY", api_key)
    with RecallClient() as client:
        assert client.create_thread(title="from env").title == "from env"
    monkeypatch.delenv("RECALL_URL")
    monkeypatch.delenv("RECALL_API_KEY")
    (tmp_path / "api-key").write_text(api_key + "\n")
    monkeypatch.setenv("RECALL_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("RECALL_PORT", str(server.port))
    with RecallClient() as client:
        assert client.url == base_url and client.create_thread(title="local").title == "local"
    monkeypatch.setenv("RECALL_URL", base_url)  # a named server never gets the local key file's key
    with RecallClient() as client, pytest.raises(rc.Unauthorized):
        client.get_thread("thr_pr_412")


# ---- async --------------------------------------------------------------------------------------


def test_the_async_client_has_the_same_operations(base_url: str, api_key: str) -> None:
    import asyncio

    async def go() -> None:
        async with rc.AsyncRecallClient(base_url, api_key) as client:
            demo.load(base_url, api_key)
            assert isinstance(await client.get("thr_pr_412"), ThreadView)
            assert b"payment timeout" in await client.read_payload("trg_8f21")
            assert await client.can_write()
            thread = await client.create_thread(title="t")
            await client.add_note(thread.id, "a")
            assert [e.summary async for e in client.iter_events(thread.id)] == ["a"]
            with pytest.raises(rc.NotFound):
                await client.get(uid("wkr"))
            root = uid("mem")[4:]
            made = await client.remember(namespace=[root], key="k", value={"v": 1})
            assert (await client.current_memory([root], "k")).id == made.id
            assert await client.memory_value(made.id) == b'{"v":1}'
            assert [m.id async for m in client.iter_memories(namespace=root)] == [made.id]
            assert [v.id async for v in client.iter_memory_versions(made.id)] == [made.id]
            assert [n async for n in client.iter_memory_namespaces(prefix=root)] == [[root]]
            assert (await client.get_memory(made.id)).version == 1
            await client.delete_memory(made.id)
            with pytest.raises(rc.Gone):
                await client.current_memory([root], "k")
            assert [h.id async for h in client.iter_search("PaymentGatewayError", mode="exact")] == ["trg_8f21"]
            assert (await client.search("PaymentGatewayError", type="trigger")).data[0].thread_id == "thr_pr_412"
            assert ("cites", "rpt_412a") in {(b.relation, b.id) async for b in client.iter_backlinks("trg_8f21")}
            assert (await client.backlinks("trg_8f21", limit=1)).has_more
            assert (await client.grep_payload("trg_8f21", "payment timeout")).matches[0].line == 201
            assert (await client.grep_body("rpt_412a", "timeout")).matches[0].line == 1
            assert (await client.grep("trg_8f21", "payment timeout", context=1)).matches[0].lines[0].number == 200
            assert isinstance(await client.run_reads("no-such-run"), ReadPage)
            assert [r async for r in client.iter_run_reads("no-such-run")] == []
            assert isinstance(await client.object_reads("trg_8f21"), ReadPage)
            assert isinstance([r async for r in client.iter_object_reads("trg_8f21")], list)
            with pytest.raises(rc.Forbidden):  # a write key: the hook routes want admin
                await client.list_hooks()

    asyncio.run(go())


# ---- paths: an ID is one segment of the route the method names ----------------------------------

HOSTILE_IDS = ["x/../../admin/hooks", "../metrics#", "trg_x/../../admin/keys", "..", ".", "thr_a/events", "a?b=1",
               "%2F..%2Fadmin%2Fhooks", "thr_a%2Fevents"]


def test_an_id_reaches_only_the_route_its_method_names(base_url: str, database_url: str) -> None:
    """An ID a model wrote cannot reach another GET route: not the hook list, not the keys, not /metrics."""
    tenant = f"paths-{uid('thr')[4:12].lower()}"
    transport = Recording()
    with RecallClient(base_url, create_key(database_url, tenant, "admin"), transport=transport) as admin:
        admin.create_hook(label="must-not-leak")
        for hostile in HOSTILE_IDS:
            for method in (admin.get, admin.resolve, admin.read, admin.get_thread, admin.get_trigger,
                           admin.read_payload, admin.read_body, admin.backlinks, admin.list_events,
                           admin.memory_value, admin.object_reads, admin.run_reads, admin.list_reports,
                           lambda i: admin.grep(i, "x")):
                sent = len(transport.sent)
                try:
                    answer = method(hostile)
                except (rc.NotFound, rc.BadRequest) as refused:  # a run ID that is no label: 400
                    assert refused.status == 404 or method == admin.run_reads, (hostile, refused)
                else:  # a run is a label: one that is well-formed names an (empty) run
                    assert method == admin.run_reads and answer.data == [], (hostile, answer)
                [request] = transport.sent[sent:]
                # The path as the server routes it (percent-decoded once): the method's own route, one segment
                # for the ID, no dot segments, nothing of /admin or /metrics.
                seen = unquote(request.url.raw_path.decode().split("?")[0]).split("/")
                assert seen[1] in {"ids", "triggers", "threads", "reports", "memories", "runs", "workers"}, seen
                assert not {".", "..", "admin", "hooks", "keys", "metrics"} & set(seen), (hostile, seen)
        with pytest.raises(ValueError, match="empty"):
            admin.get_thread("")


# ---- a server that is down, or restarting ---------------------------------------------------------


@pytest.mark.slow
def test_a_stopped_server_is_unreachable_naming_the_url_and_the_fix(database_url: str, api_key: str,
                                                                     tmp_path: Path) -> None:
    server = ServerProcess(database_url, tmp_path / "server.log", RECALL_SWEEP_INTERVAL="0").start()
    server.stop()
    with RecallClient(server.url, api_key, max_retries=1, max_retry_wait=0.01) as client, \
            pytest.raises(rc.Unreachable) as down:
        client.get_thread("thr_pr_412")
    assert isinstance(down.value, rc.RecallError) and down.value.url == server.url
    assert str(down.value).startswith(f"Cannot reach the recall server at {server.url} (ConnectError")
    assert "recall-server serve" in str(down.value) and "RECALL_URL" in str(down.value)
    assert down.value.__cause__ is None and isinstance(down.value.cause, httpx.ConnectError)


class Front:
    """The server's address, as a loopback forwarder the test opens and closes: closed, it refuses
    connections and drops the open ones, as a restarting server does; opened, it forwards to a server."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.listener: socket.socket | None = None
        self.conns: list[socket.socket] = []

    def open(self, target: int) -> None:
        self.listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, args=(self.listener, target), daemon=True).start()

    def close(self) -> None:
        assert self.listener is not None
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # stops listening now (close alone waits for accept)
        self.listener.close()
        for conn in self.conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
        self.conns.clear()

    def _accept(self, listener: socket.socket, target: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", target))
            except OSError:
                client.close()
                continue
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


@pytest.mark.slow
def test_the_default_retries_ride_out_a_server_restart(database_url: str, api_key: str, tmp_path: Path) -> None:
    """Reads and writes made while the server at the client's URL restarts land once it is back: the first
    server process stops (its connections drop), the address refuses connections for 2.5 s, then a fresh
    process answers there. (A forwarder holds the address: how long a real restart keeps the port closed
    depends on the machine's load, and this test must not.)"""
    first = ServerProcess(database_url, tmp_path / "first.log", RECALL_SWEEP_INTERVAL="0").start()
    second = ServerProcess(database_url, tmp_path / "second.log", RECALL_SWEEP_INTERVAL="0").start()
    front = Front()
    front.open(first.port)

    def restart() -> None:
        first.stop()
        front.close()
        time.sleep(2.5)
        front.open(second.port)

    try:
        with RecallClient(front.url, api_key) as client:
            thread = client.create_thread(title="across a restart")  # a pooled connection the restart drops
            restarting = threading.Thread(target=restart)
            restarting.start()
            while front.listener is not None and front.listener.fileno() != -1:
                time.sleep(0.01)  # closed: the restart has begun
            started = time.monotonic()
            assert client.get_thread(thread.id).id == thread.id
            assert time.monotonic() - started >= 2  # it did wait for the restart
            note = client.add_note(thread.id, "written while restarting")
            restarting.join(30)
            assert [e.summary for e in client.iter_events(thread.id)] == [note.summary]
        with RecallClient(front.url, api_key, max_retries=3) as impatient:  # the old budget: 0.7 s
            front.close()
            threading.Timer(2.5, front.open, args=(second.port,)).start()
            with pytest.raises(rc.Unreachable):
                impatient.get_thread(thread.id)
    finally:
        first.stop()
        second.stop()


def test_no_key_for_a_named_server_says_the_saved_key_is_withheld_on_purpose(
    base_url: str, api_key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "api-key").write_text(api_key + "\n")
    monkeypatch.setenv("RECALL_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("RECALL_API_KEY", raising=False)
    monkeypatch.setenv("RECALL_URL", base_url)
    with RecallClient() as client, pytest.raises(rc.Unauthorized) as refused:
        client.get_thread("thr_pr_412")
    message = str(refused.value)
    assert message.startswith("401 Unauthorized: This endpoint needs an API key")
    assert f"No API key was sent to {base_url}" in message and "withheld on purpose" in message
    assert str(tmp_path / "api-key") in message and "RECALL_API_KEY" in message
    with RecallClient(base_url, "rk_nonsense") as wrong, pytest.raises(rc.Unauthorized) as refused:
        wrong.get_thread("thr_pr_412")
    assert "No API key was sent" not in str(refused.value)  # a key was sent: the server's own words
