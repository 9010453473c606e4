"""Thread and worker heads show what the log and the tables show, whatever happened.

The default thread and worker views are read from the head kept on the row (threads.head_events,
head_owners; workers.head_threads, head_reports); bigger budgets, and this test, render them from
the log and the tables. Random sequences of the writes that change a view (notes pointing anywhere,
one at a time and several at once, filings, owners, deletions, short expiries, closes under a
retention, summary changes) run over HTTP against the real server; after each, every thread's and
worker's head-rendered row must equal its log-rendered row, before and after the short expiries
have run out.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import msgspec
import pytest
from helpers import cli, create_key, expire, run_sql, uid
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from recall_server import auth, spill
from recall_server.db import pool, queries
from recall_server.db.pool import as_app_role

TENANT = "head-property"
SHORT = 3600  # seconds: the short expiries and the closed-thread retention, run out by expire() in each example

pick = st.integers(min_value=0, max_value=7)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("note"), pick, st.sampled_from(["none", "thread", "worker", "trigger", "report"]), pick),
        # notes and triggers on threads sent at once, which the server writes together (queries.note_many,
        # file_on_threads), often several to one thread
        st.tuples(st.just("burst"), st.lists(st.one_of(
            st.tuples(st.just("note"), pick, st.sampled_from(["none", "thread", "trigger"]), pick),
            st.tuples(st.just("trigger"), pick, st.booleans())), min_size=2, max_size=8)),
        # the last flag: with an Idempotency-Key, filed through the transaction instead of the one-statement path
        st.tuples(st.just("trigger"), pick, st.booleans(), st.booleans()),
        st.tuples(st.just("report"), pick, pick, st.booleans()),
        st.tuples(st.just("owner"), pick, pick),
        st.tuples(st.just("delete"), st.sampled_from(["trigger", "report", "worker", "thread"]), pick),
        st.tuples(st.just("close"), pick),
        st.tuples(st.just("summary"), pick),
    ),
    min_size=1, max_size=24,
)


@pytest.fixture(scope="module")
def head_key(database_url: str) -> str:
    key = create_key(database_url, TENANT, "write")
    cli(database_url, "tenants", "retention", TENANT, "--closed-threads", str(SHORT / 86400))
    return key


def soon() -> str:
    return (datetime.now(UTC) + timedelta(seconds=SHORT)).isoformat()


class World:
    """The objects one example made, and the writes it applies to them (refusals are part of the game)."""

    def __init__(self, c: httpx.Client) -> None:
        self.c = c
        self.made: dict[str, list[str]] = {"thread": [], "worker": [], "trigger": [], "report": []}

    def _of(self, kind: str, i: int) -> str | None:
        found = self.made[kind]
        return found[i % len(found)] if found else None

    def create(self, kind: str, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        r = self.c.post(path, json=body, headers=headers)
        if r.status_code == 201:
            self.made[kind].append(r.json()["id"])

    def _note(self, thread_pick: int, ref_kind: str, j: int) -> tuple[str, dict[str, Any]] | None:
        thread = self._of("thread", thread_pick)
        ref = None if ref_kind == "none" else self._of(ref_kind, j)
        return None if thread is None else (f"/threads/{thread}/events", {"summary": f"note {thread_pick} {j}",
                                                                          **({"ref": ref} if ref else {})})

    def _filing(self, thread_pick: int, short: bool) -> tuple[str, dict[str, Any]] | None:
        thread = self._of("thread", thread_pick)
        return None if thread is None else ("/triggers", {"id": uid("trg"), "source": "test", "summary": "filed",
                                                          "payload": "p", "thread_id": thread,
                                                          **({"expires_at": soon()} if short else {})})

    def apply(self, op: tuple[Any, ...]) -> None:
        name, *args = op
        if name == "note":
            if note := self._note(*args):
                path, body = note
                self.c.post(path, json=body)
        elif name == "burst":
            writes = [w for w in (self._note(*a) if kind == "note" else self._filing(*a) for kind, *a in args[0]) if w]

            async def at_once() -> list[httpx.Response]:
                async with httpx.AsyncClient(base_url=self.c.base_url, headers=self.c.headers, timeout=30) as c:
                    return await asyncio.gather(*(c.post(path, json=body) for path, body in writes))

            for (path, body), r in zip(writes, asyncio.run(at_once()), strict=True):
                if path == "/triggers" and r.status_code == 201:
                    self.made["trigger"].append(body["id"])
        elif name == "trigger":
            thread = self._of("thread", args[0])
            self.create("trigger", "/triggers", {"id": uid("trg"), "source": "test", "summary": "filed trigger",
                                                 "payload": "p", **({"thread_id": thread} if thread else {}),
                                                 **({"expires_at": soon()} if args[1] else {})},
                        {"Idempotency-Key": uid("idem")} if args[2] else None)
        elif name == "report":
            worker, thread = self._of("worker", args[0]), self._of("thread", args[1])
            if worker and thread:
                self.create("report", f"/workers/{worker}/reports",
                            {"id": uid("rpt"), "thread_id": thread, "summary": "filed report", "body": "b",
                             **({"expires_at": soon()} if args[2] else {})})
        elif name == "owner":
            thread, worker = self._of("thread", args[0]), self._of("worker", args[1])
            if thread and worker:
                self.c.post(f"/threads/{thread}/owners", json={"worker_id": worker})
        elif name == "delete":
            target = self._of(args[0], args[1])
            if target:
                self.c.delete(f"/{args[0]}s/{target}")
        elif name == "summary":
            thread = self._of("thread", args[0])
            if thread:
                self.c.patch(f"/threads/{thread}", json={"summary": f"summary {args[0]}"})
        elif name == "close":
            thread = self._of("thread", args[0])
            if thread:
                self.c.patch(f"/threads/{thread}", json={"status": "closed"})


async def rendered(dsn: str, key: str, world: World) -> list[tuple[str, bytes, bytes, bytes, bytes]]:
    """Each thread's and worker's row and default view, from its head and from the tables, in one
    snapshot (one now())."""
    cred = auth.parse(f"Bearer {key}")
    conn = await pool.connect(dsn)
    try:
        out = []
        async with conn.transaction(isolation="repeatable_read"):
            for kind, fetch, view in (("thread", queries.fetch_thread, spill.thread_view),
                                      ("worker", queries.fetch_worker, spill.worker_view)):
                for object_id in world.made[kind]:
                    _, head = await fetch(conn, cred, object_id, spill.RECENT)
                    _, log = await fetch(conn, cred, object_id, spill.RECENT, from_log=True)
                    assert head is not None and log is not None
                    out.append((object_id, msgspec.json.encode(head), msgspec.json.encode(log),
                                msgspec.json.encode(view(head, spill.DEFAULT_BUDGET)),
                                msgspec.json.encode(view(log, spill.DEFAULT_BUDGET))))
        return out
    finally:
        await conn.close()


def assert_head_matches_log(dsn: str, key: str, world: World, when: str) -> None:
    for object_id, head_row, log_row, head_view, log_view in asyncio.run(rendered(dsn, key, world)):
        if b'"gone":true' in log_row:  # answered 410; an erasure empties the head, the log keeps its IDs
            assert b'"gone":true' in head_row
            continue
        assert head_row == log_row, f"{when}, {object_id}: the head shows\n{head_row!r}\nthe log shows\n{log_row!r}"
        assert head_view == log_view


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(ops=operations, short_worker=st.booleans())
@example(ops=[("trigger", 0, True, True), ("trigger", 1, False, True)], short_worker=False)  # both filing paths,
@example(ops=[("trigger", 0, True, False), ("trigger", 1, False, False)], short_worker=False)  # every run
@example(ops=[("trigger", 0, True, False), ("delete", "thread", 1),  # notes together: live, gone and dangling targets
              ("burst", [("note", 0, "none", 0), ("note", 0, "trigger", 0), ("trigger", 0, True),
                         ("note", 1, "none", 0), ("trigger", 1, False), ("note", 0, "thread", 1)] * 3)],
         short_worker=False)
def test_the_head_renders_what_the_log_renders(database_url: str, base_url: str, head_key: str,
                                               ops: list[tuple[Any, ...]], short_worker: bool) -> None:
    dsn = as_app_role(database_url)
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {head_key}"}) as c:
        world = World(c)
        for _ in range(2):
            world.create("thread", "/threads", {"id": uid("thr"), "title": "t", "summary": "a thread"})
        world.create("worker", "/workers", {"id": uid("wkr"), "name": "w", "summary": "a worker"})
        world.create("worker", "/workers", {"id": uid("wkr"), "name": "w", "summary": "short-lived",
                                            **({"expires_at": soon()} if short_worker else {})})
        for op in ops:
            world.apply(op)
        assert_head_matches_log(dsn, head_key, world, "right after the writes")
        expire(database_url, *expiring(database_url, world))
        assert_head_matches_log(dsn, head_key, world, "once the short expiries ran out")


def expiring(database_url: str, world: World) -> list[str]:
    """What the example made that is live and has an expiry (its own, its thread's, a retention's)."""
    made = [i for ids in world.made.values() for i in ids]
    return [r["id"] for r in run_sql(database_url, " UNION ALL ".join(
        f"SELECT id FROM {table} WHERE id = ANY($1) AND expires_at IS NOT NULL AND deleted_at IS NULL"
        for table in ("threads", "workers", "triggers", "reports")), made)]


def test_the_head_holds_as_many_events_as_the_default_view_shows(sql) -> None:
    assert sql("SELECT recall_head_size()")[0][0] == spill.RECENT == queries.HEAD_SIZE


def test_concurrent_writers_leave_a_head_that_matches_the_log(database_url: str, base_url: str, head_key: str) -> None:
    """Appends prepend under the row lock while rebuilds (owners, filings, deletions) render from the log
    after taking it: whatever the interleaving, the head ends as the log renders it."""
    from concurrent.futures import ThreadPoolExecutor

    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {head_key}"}) as c:
        world = World(c)
        world.create("thread", "/threads", {"id": uid("thr"), "title": "t", "summary": "a busy thread"})
        for _ in range(4):
            world.create("worker", "/workers", {"id": uid("wkr"), "name": "w", "summary": "a worker"})
    thread = world.made["thread"][0]

    def writer(n: int) -> None:
        with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {head_key}"}) as c:
            w = World(c)
            w.made = {k: list(v) for k, v in world.made.items()}
            for i in range(12):
                w.apply(("note", 0, "none", 0) if (n + i) % 3 else ("owner", 0, n + i))
                if i % 4 == n % 4:
                    w.apply(("trigger", 0, False, i % 2 == 0))
                    w.apply(("delete", "trigger", i))

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {head_key}"}) as c:
        assert c.get(f"/threads/{thread}").json()["events_total"] >= 30
    assert_head_matches_log(as_app_role(database_url), head_key, world, "after concurrent writers")
