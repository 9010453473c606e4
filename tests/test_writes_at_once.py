"""The one-statement writes (queries.ingest_many, file_on_threads and note_many: the plain triggers, on
threads or not, and the notes that coalesce.py writes together): they write in the plain case and write
nothing at all otherwise, so the service's transaction can answer the request exactly."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from helpers import Graph, create_key, uid

from recall_server.db import pool
from recall_server import auth, config
from recall_server.app import create_app
from recall_server.db import queries
from recall_server.db.pool import Database, as_app_role
from recall_server.errors import Forbidden


def run(database_url: str, key: str, call: Any) -> Any:
    async def go() -> Any:
        conn = await pool.connect(as_app_role(database_url))
        try:
            return await call(conn, auth.parse(f"Bearer {key}"))
        finally:
            await conn.close()

    return asyncio.run(go())


def heads_and_logs(database_url: str, key: str, *threads: str) -> list[tuple[Any, Any]]:
    """Each thread's default row rendered from its head and from its log, in one snapshot (one now())."""
    async def render(conn: asyncpg.Connection, cred: auth.Credential) -> list[tuple[Any, Any]]:
        async with conn.transaction(isolation="repeatable_read"):
            return [((await queries.fetch_thread(conn, cred, t, queries.HEAD_SIZE))[1],
                     (await queries.fetch_thread(conn, cred, t, queries.HEAD_SIZE, from_log=True))[1])
                    for t in threads]

    return run(database_url, key, render)


def trigger(trigger_id: str, expires_at: datetime | None = None) -> queries.NewTrigger:
    return queries.NewTrigger(trigger_id, "test", "filed at once", "text/plain", b"p", b"s" * 32, b"h", None, None,
                              None, None, None, expires_at)


def ingest(trigger_id: str, thread_id: str):
    """One trigger filed on a thread (file_on_threads): its times, or None."""
    async def call(conn: asyncpg.Connection, cred: auth.Credential) -> Any:
        [written] = await queries.file_on_threads(conn, cred, [(thread_id, trigger(trigger_id))])
        return written

    return call


def test_a_plain_ingest_and_note_write_in_one_statement(database_url: str, api_key: str, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    trigger = uid("trg")
    assert run(database_url, api_key, ingest(trigger, thread)) is not None
    [event] = run(database_url, api_key, lambda conn, cred: queries.note_many(conn, cred, [
        queries.NewNote(thread, "n", trigger)]))
    assert event is not None and event.seq == 2
    rows = sql("SELECT seq, type, ref FROM thread_events WHERE thread_id = $1 ORDER BY seq", thread)
    assert [tuple(r) for r in rows] == [(1, "trigger_filed", trigger), (2, "note", trigger)]


def test_a_taken_id_or_a_missing_thread_writes_nothing(database_url: str, api_key: str, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    taken = graph.trigger()["id"]
    assert run(database_url, api_key, ingest(taken, thread)) is None
    assert run(database_url, api_key, ingest(uid("trg"), uid("thr"))) is None
    assert run(database_url, api_key, lambda conn, cred: queries.note_many(
        conn, cred, [queries.NewNote(thread, "n", uid("trg"))])) == [None], "a dangling ref"
    assert sql("SELECT last_seq, head_events FROM threads WHERE id = $1", thread)[0][0] == 0
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = $1", thread)[0][0] == 0


def test_a_read_key_is_refused_and_writes_nothing(database_url: str, graph: Graph, sql) -> None:
    thread = graph.thread()["id"]
    reader = create_key(database_url, "default", "read")
    trigger = uid("trg")
    with pytest.raises(Forbidden):
        run(database_url, reader, ingest(trigger, thread))
    with pytest.raises(Forbidden):
        run(database_url, reader, lambda conn, cred: queries.note_many(conn, cred, [
            queries.NewNote(thread, "n", None)]))
    assert not sql("SELECT 1 FROM triggers WHERE id = $1", trigger)
    assert sql("SELECT last_seq FROM threads WHERE id = $1", thread)[0][0] == 0


def many(*trigger_ids: str) -> Any:
    return lambda conn, cred: queries.ingest_many(conn, cred, [
        queries.NewTrigger(t, "test", "filed together", "text/plain", b"p", b"s" * 32, b"h", None, None, None, None,
                           None, None) for t in trigger_ids])


def test_plain_triggers_file_together_in_one_statement_or_not_at_all(database_url: str, api_key: str, graph: Graph,
                                                                     sql) -> None:
    first, second = uid("trg"), uid("trg")
    written = run(database_url, api_key, many(first, second))
    assert len(written) == 2 and all(w is not None for w in written)
    assert {r[0] for r in sql("SELECT id FROM triggers WHERE id = ANY($1)", [first, second])} == {first, second}
    taken, fresh = graph.trigger()["id"], uid("trg")
    assert run(database_url, api_key, many(fresh, taken)) == [None, None]
    assert not sql("SELECT 1 FROM triggers WHERE id = $1", fresh), "one taken ID undoes the whole statement"
    reader = create_key(database_url, "default", "read")
    with pytest.raises(Forbidden):
        run(database_url, reader, many(fresh))
    assert not sql("SELECT 1 FROM triggers WHERE id = $1", fresh)


def test_concurrent_plain_triggers_of_one_key_share_statements(server: Any, database_url: str) -> None:
    """In process, one pooled connection with a query logger: 24 triggers filed at once take fewer
    statements than triggers, and every one of them is answered 201 with its own view."""
    key = create_key(database_url, "default", "write")
    app = create_app(config.Settings(database_url=database_url, pool_min=1, pool_max=1, sweep_interval=0))
    inserts: list[str] = []

    async def go() -> list[Any]:  # litestar's test client runs one request at a time: httpx's transport
        async with app.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
            c.headers["Authorization"] = f"Bearer {key}"
            async with app.state.service.db.pool.acquire() as conn:  # the pool's only connection
                conn.add_query_logger(lambda record: inserts.append(record.query)
                                      if "INSERT INTO triggers" in record.query else None)
            return await asyncio.gather(*(c.post("/triggers", json={"source": "test", "summary": f"t{i}",
                                                                   "payload": f"payload {i}"}) for i in range(24)))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [201] * 24
    assert [r.json()["summary"] for r in responses] == [f"t{i}" for i in range(24)]
    assert len({r.json()["id"] for r in responses}) == 24
    assert len(inserts) < 24, f"{len(inserts)} statements for 24 triggers"


def test_coalesced_triggers_keep_each_answer_exact(client: httpx.Client, base_url: str, database_url: str) -> None:
    """Over HTTP, at once: a taken ID among the plain triggers, a wrong secret for a valid key ID, a read key.
    Each is answered as it would be alone; nothing rides on another request's key."""
    key = client.headers["authorization"][7:]
    wrong_secret = key.split(".")[0] + "." + "A" * 43
    reader = create_key(database_url, "default", "read")
    same_id = uid("trg")
    body = {"id": same_id, "source": "test", "summary": "twice", "payload": "p"}

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url) as c:
            def post(k: str, json: dict[str, Any]) -> Any:
                return c.post("/triggers", json=json, headers={"Authorization": f"Bearer {k}"})
            return await asyncio.gather(
                *(post(key, {"source": "test", "summary": f"t{i}", "payload": "p"}) for i in range(10)),
                post(key, body), post(key, body), post(key, {**body, "summary": "other"}),
                *(post(wrong_secret, {"source": "test", "summary": "forged", "payload": "p"}) for _ in range(3)),
                post(reader, {"source": "test", "summary": "read key", "payload": "p"}))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses[:10]] == [201] * 10
    assert sorted(r.status_code for r in responses[10:13]) in ([200, 201, 409], [201, 409, 409]), \
        [r.text for r in responses[10:13]]
    assert [r.status_code for r in responses[13:16]] == [401] * 3
    assert responses[16].status_code == 403
    stored = client.get(f"/triggers/{same_id}").json()
    assert stored["summary"] in ("twice", "other")



def test_triggers_on_threads_file_together_each_thread_in_submission_order(database_url: str, api_key: str,
                                                                           graph: Graph, client: httpx.Client,
                                                                           sql) -> None:
    """One statement over several threads: 12 triggers on one thread (more than its head holds) and 2 on another
    take their trigger_filed seqs in the order submitted, a trigger's expiry is capped by its thread's, and
    triggers on a deleted or missing thread are not filed (None); both heads show what their logs show."""
    soon = datetime.now(UTC) + timedelta(hours=1)
    busy, short, deleted = graph.thread()["id"], graph.thread(expires_at=soon.isoformat())["id"], graph.thread()["id"]
    assert client.delete(f"/threads/{deleted}").status_code == 204
    ids = [uid("trg") for _ in range(16)]
    filings = [(short if i in (2, 5) else busy, trigger(ids[i], soon + timedelta(days=1) if i == 5 else None))
               for i in range(14)]
    filings[7:7] = [(deleted, trigger(ids[14])), (uid("thr"), trigger(ids[15]))]
    written = run(database_url, api_key, lambda conn, cred: queries.file_on_threads(conn, cred, filings))
    assert [w is None for w in written] == [False] * 7 + [True] * 2 + [False] * 7
    assert written[2][2] == written[5][2] == sql("SELECT expires_at FROM threads WHERE id = $1", short)[0][0]
    logged = sql("SELECT ref FROM thread_events WHERE thread_id = $1 ORDER BY seq", busy)
    assert [r[0] for r in logged] == [t.id for thread, t in filings if thread == busy]
    assert [r[0] for r in sql("SELECT ref FROM thread_events WHERE thread_id = $1 ORDER BY seq", short)] == \
        [ids[2], ids[5]]
    assert not sql("SELECT 1 FROM triggers WHERE id = ANY($1)", ids[14:])

    for head, log in heads_and_logs(database_url, api_key, busy, short):
        assert head == log


def test_a_taken_id_among_triggers_on_threads_files_none_of_them(database_url: str, api_key: str, graph: Graph,
                                                                 sql) -> None:
    thread, taken, fresh = graph.thread()["id"], graph.trigger()["id"], uid("trg")
    assert run(database_url, api_key, lambda conn, cred: queries.file_on_threads(
        conn, cred, [(thread, trigger(fresh)), (thread, trigger(taken))])) == [None, None]
    assert not sql("SELECT 1 FROM triggers WHERE id = $1", fresh), "one taken ID undoes the whole statement"
    assert sql("SELECT last_seq FROM threads WHERE id = $1", thread)[0][0] == 0


def test_coalesced_triggers_on_threads_keep_each_answer_exact(client: httpx.Client, base_url: str,
                                                              graph: Graph) -> None:
    """Over HTTP, at once: triggers on two threads beside ones on a deleted and a missing thread, and an ID sent
    twice. Each is answered as it would be alone, and each thread's log has its own triggers in some order."""
    key = client.headers["authorization"][7:]
    one, two, deleted, missing = graph.thread()["id"], graph.thread()["id"], graph.thread()["id"], uid("thr")
    assert client.delete(f"/threads/{deleted}").status_code == 204
    twice = {"id": uid("trg"), "source": "test", "thread_id": one, "summary": "twice", "payload": "p"}

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {key}"}) as c:
            def post(thread: str, i: int) -> Any:
                return c.post("/triggers", json={"source": "test", "thread_id": thread, "summary": f"t{i}",
                                                 "payload": "p"})
            return await asyncio.gather(*(post((one, two)[i % 2], i) for i in range(10)), post(deleted, 10),
                                        post(missing, 11), c.post("/triggers", json=twice),
                                        c.post("/triggers", json=twice))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses[:12]] == [201] * 10 + [422, 422], [r.text for r in responses]
    assert sorted(r.status_code for r in responses[12:]) == [200, 201]
    for thread, mine in ((one, responses[0:10:2] + responses[12:13]), (two, responses[1:10:2])):
        logged = client.get(f"/threads/{thread}/events").json()["data"]
        assert sorted(e["ref"] for e in logged) == sorted(r.json()["id"] for r in mine)


def test_plain_notes_append_together_each_thread_in_submission_order(database_url: str, api_key: str, graph: Graph,
                                                                     client: httpx.Client, sql) -> None:
    """One statement over several threads: 13 notes to one thread (more than its head holds) and 2 to another,
    interleaved, take seqs in the order they were submitted; notes to a deleted or missing thread, or
    with a dangling or deleted ref, are not written (None) and cost the others nothing; and both heads
    show what their logs show."""
    busy, other, deleted = graph.thread()["id"], graph.thread()["id"], graph.thread()["id"]
    graph.note(busy, "before")
    live_ref, gone_ref = graph.trigger()["id"], graph.trigger()["id"]
    assert client.delete(f"/threads/{deleted}").status_code == 204
    assert client.delete(f"/triggers/{gone_ref}").status_code == 204
    notes = [queries.NewNote(busy if i % 3 else other, f"n{i}", live_ref if i == 4 else None) for i in range(6)]
    notes += [queries.NewNote(deleted, "to a deleted thread", None), queries.NewNote(uid("thr"), "nowhere", None),
              queries.NewNote(busy, "dangling", uid("trg")), queries.NewNote(busy, "gone ref", gone_ref)]
    notes += [queries.NewNote(busy, f"n{i}", None) for i in range(6, 15)]
    written = run(database_url, api_key, lambda conn, cred: queries.note_many(conn, cred, notes))
    assert [w is None for w in written] == [False] * 6 + [True] * 4 + [False] * 9
    assert [(w.summary, w.seq) for w in written if w and w.summary in ("n0", "n3")] == [("n0", 1), ("n3", 2)]
    assert [w.seq for w in written if w and w.summary not in ("n0", "n3")] == list(range(2, 15))
    assert written[4].ref == live_ref and len({w.at for w in written if w}) == 1
    logged = sql("SELECT summary FROM thread_events WHERE thread_id = $1 ORDER BY seq", busy)
    assert [r[0] for r in logged] == ["before", "n1", "n2", "n4", "n5", *(f"n{i}" for i in range(6, 15))]
    assert sql("SELECT last_seq FROM threads WHERE id = $1", busy)[0][0] == 14
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = $1", deleted)[0][0] == 0

    rendered = heads_and_logs(database_url, api_key, busy, other)
    for head, log in rendered:
        assert head == log
    assert [e.summary for e in rendered[0][0].events] == [f"n{i}" for i in range(14, 4, -1)]


@pytest.mark.slow
def test_notes_that_lose_a_deadlock_are_all_left_to_their_own_paths(database_url: str, api_key: str,
                                                                    graph: Graph, sql) -> None:
    """The batch locks its threads in ID order; a transaction that locks them the other way round (as a
    deletion does: the deleted thread, then the threads pointing at it) closes a cycle. PostgreSQL undoes
    the batch (it waits longest: the other side's deadlock_timeout is raised), and note_many answers
    None for every note, having written none of them."""
    first, second = sorted(graph.thread()["id"] for _ in range(2))

    async def go() -> list[Any]:
        other = await asyncpg.connect(database_url)
        batch = await pool.connect(as_app_role(database_url))
        try:
            await other.execute("SET deadlock_timeout = '10s'")
            tx = other.transaction()
            await tx.start()
            await other.execute("UPDATE threads SET updated_at = now() WHERE id = $1", second)
            notes = asyncio.ensure_future(queries.note_many(batch, auth.parse(f"Bearer {api_key}"), [
                queries.NewNote(first, "a", None), queries.NewNote(second, "b", None)]))
            await asyncio.sleep(0.3)  # the batch holds `first` and waits for `second`
            await other.execute("UPDATE threads SET updated_at = now() WHERE id = $1", first)
            written = await notes
            await tx.commit()
            return written
        finally:
            await other.close()
            await batch.close()

    assert asyncio.run(go()) == [None, None]
    assert sql("SELECT count(*) FROM thread_events WHERE thread_id = ANY($1)", [first, second])[0][0] == 0
    assert [r[0] for r in sql("SELECT last_seq FROM threads WHERE id = ANY($1)", [first, second])] == [0, 0]


def test_concurrent_plain_notes_of_one_key_share_statements(server: Any, database_url: str, graph: Graph) -> None:
    """In process, one pooled connection with a query logger: 24 notes to three threads at once take fewer
    statements than notes, each is answered 201 with its own event, and each thread's seqs run 1..8."""
    key = create_key(database_url, "default", "write")
    threads = [graph.thread()["id"] for _ in range(3)]
    app = create_app(config.Settings(database_url=database_url, pool_min=1, pool_max=1, sweep_interval=0))
    inserts: list[str] = []

    async def go() -> list[Any]:
        async with app.lifespan(), httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
            c.headers["Authorization"] = f"Bearer {key}"
            async with app.state.service.db.pool.acquire() as conn:  # the pool's only connection
                conn.add_query_logger(lambda record: inserts.append(record.query)
                                      if "INSERT INTO thread_events" in record.query else None)
            return await asyncio.gather(*(c.post(f"/threads/{threads[i % 3]}/events", json={"summary": f"n{i}"})
                                          for i in range(24)))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [201] * 24
    assert [r.json()["summary"] for r in responses] == [f"n{i}" for i in range(24)]
    for t in range(3):
        assert sorted(r.json()["seq"] for r in responses[t::3]) == list(range(1, 9))
    assert len(inserts) < 24, f"{len(inserts)} statements for 24 notes"


def test_coalesced_notes_keep_each_answer_exact(client: httpx.Client, base_url: str, database_url: str,
                                                graph: Graph) -> None:
    """Over HTTP, at once: plain notes beside notes to a deleted and a missing thread, with a dangling ref, with
    a wrong secret and with a read key. Each is answered as it would be alone."""
    key = client.headers["authorization"][7:]
    wrong_secret = key.split(".")[0] + "." + "A" * 43
    reader = create_key(database_url, "default", "read")
    live, deleted, missing = graph.thread()["id"], graph.thread()["id"], uid("thr")
    assert client.delete(f"/threads/{deleted}").status_code == 204

    async def go() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url) as c:
            def post(k: str, thread: str, json: dict[str, Any]) -> Any:
                return c.post(f"/threads/{thread}/events", json=json, headers={"Authorization": f"Bearer {k}"})
            return await asyncio.gather(
                *(post(key, live, {"summary": f"n{i}"}) for i in range(8)),
                post(key, deleted, {"summary": "late"}), post(key, missing, {"summary": "lost"}),
                post(key, live, {"summary": "dangling", "ref": uid("trg")}),
                post(wrong_secret, live, {"summary": "forged"}), post(reader, live, {"summary": "read key"}))

    responses = asyncio.run(go())
    assert [r.status_code for r in responses] == [201] * 8 + [410, 404, 422, 401, 403], [r.text for r in responses]
    assert sorted(r.json()["seq"] for r in responses[:8]) == list(range(1, 9))
    assert client.get(f"/threads/{live}").json()["events_total"] == 8


def test_the_pool_asks_for_no_notices(server: Any, database_url: str) -> None:
    """A payload token over to_tsvector's 2047-character limit made PostgreSQL send "word is too long to be
    indexed" with every trigger filed; the pool's connections ask for warnings and errors only (pool.SESSION)."""
    async def go() -> tuple[list[str], list[str]]:
        db = await Database.open(as_app_role(database_url), min_size=1, max_size=1, timeout=5,
                                 queue_limit=1, queue_wait=1)
        try:
            async with db.connection() as conn:
                heard: list[str] = []

                def listener(_conn: Any, message: Any) -> None:
                    heard.append(message.message)

                conn.add_log_listener(listener)
                try:
                    await conn.fetchval("SELECT to_tsvector('simple', repeat('x', 3000))")
                    pooled = list(heard)
                    await conn.execute("SET client_min_messages = notice")  # PostgreSQL's default
                    await conn.fetchval("SELECT to_tsvector('simple', repeat('y', 3000))")  # not the plan cached above
                    await conn.execute("RESET client_min_messages")
                finally:
                    conn.remove_log_listener(listener)  # a listener left on a pooled connection: asyncpg warns
                return pooled, heard[len(pooled):]
        finally:
            await db.close()

    pooled, by_default = asyncio.run(go())
    assert pooled == []
    assert any("too long to be indexed" in m for m in by_default), by_default
