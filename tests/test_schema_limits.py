"""The database enforces the field limits the inline-view budget relies on, whoever writes the row.

Each case is a direct INSERT as the owner (no server, no msgspec) that breaks exactly one limit and
must be refused by the named constraint; the same row within the limit is accepted, so a failure
here is about that limit and nothing else.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator

import asyncpg
import pytest
from helpers import run_script, run_sql, with_database

from recall_server import ids, models
from recall_server.db.migrate import migrate

THREAD = ("INSERT INTO threads (tenant_id, id, title, summary, status, app_id, request_hash) "
          "VALUES ('default', $1, $2, $3, $4, $5, '\\x')")
WORKER = "INSERT INTO workers (tenant_id, id, name, summary, request_hash) VALUES ('default', $1, $2, $3, '\\x')"
TRIGGER = ("INSERT INTO triggers (tenant_id, id, source, summary, content_type, payload, payload_sha256, "
           "request_hash, occurred_at, run_id) VALUES ('default', $1, $2, $3, 'text/plain', '\\x', '\\x', '\\x', now(), $4)")
REPORT = ("INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256, "
          "request_hash, agent_id) VALUES ('default', $1, 'wkr_fixed', 'thr_fixed', $2, 'text/plain', '\\x', '\\x', '\\x', $3)")
NEIGHBOUR = "INSERT INTO trigger_neighbours (tenant_id, trigger_id, position, neighbour_id) VALUES ('default', 'trg_fixed', $1, 'trg_fixed')"
REF = "INSERT INTO report_refs (tenant_id, report_id, position, trigger_id) VALUES ('default', 'rpt_fixed', $1, 'trg_fixed')"


@pytest.fixture(scope="module")
def store(database_url: str) -> Iterator[str]:
    """A new database migrated to the current schema, with one thread, worker, trigger and report to link to."""
    name = f"recall_limits_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    try:
        asyncio.run(migrate(url))
        run_script(url, """
            INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
            VALUES ('default', 'thr_fixed', 't', 's', 'open', '\\x');
            INSERT INTO workers (tenant_id, id, name, summary, request_hash) VALUES ('default', 'wkr_fixed', 'w', 's', '\\x');
            INSERT INTO triggers (tenant_id, id, source, summary, content_type, payload, payload_sha256, request_hash,
                                  occurred_at) VALUES ('default', 'trg_fixed', 'src', 's', 'text/plain', '\\x', '\\x', '\\x', now());
            INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256, request_hash)
            VALUES ('default', 'rpt_fixed', 'wkr_fixed', 'thr_fixed', 's', 'text/plain', '\\x', '\\x', '\\x');
        """)
        yield url
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


def attempt(url: str, statement: str, *args: object) -> str | None:
    """Run one INSERT in a transaction that is rolled back; the violated constraint's name, or None if accepted."""
    async def go() -> str | None:
        conn = await asyncpg.connect(url)
        try:
            tx = conn.transaction()
            await tx.start()
            try:
                await conn.execute(statement, *args)
                await conn.execute("SET CONSTRAINTS ALL IMMEDIATE")  # deferred triggers fire now
            except asyncpg.CheckViolationError as e:
                return e.constraint_name
            finally:
                await tx.rollback()
            return None
        finally:
            await conn.close()

    return asyncio.run(go())


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


LONG_ONE_LINE = "x" * 201

CASES = [
    # (what, statement, arguments within the limit, arguments over it, constraint)
    ("title 120 characters", THREAD, ("t" * 120, "s", "open", None), ("t" * 121, "s", "open", None), "threads_title_limit"),
    ("title not empty", THREAD, ("t", "s", "open", None), ("", "s", "open", None), "threads_title_limit"),
    ("title one line", THREAD, ("a title", "s", "open", None), ("a\ntitle", "s", "open", None), "threads_title_limit"),
    # recall_server/models' patterns end in `$`, which in Python also matches before one final newline: the API takes
    # "a title\n", so the database must too (else a 500); anything after that newline is refused.
    ("title one final newline, as the API", THREAD, ("a title\n", "s", "open", None), ("a title\n\n", "s", "open", None),
     "threads_title_limit"),
    ("label one final newline, as the API", THREAD, ("t", "s", "open", "app\n"), ("t", "s", "open", "app\nx"),
     "threads_app_id_limit"),
    ("thread summary 200", THREAD, ("t", "s" * 200, "open", None), ("t", LONG_ONE_LINE, "open", None),
     "threads_summary_limit"),
    ("thread summary one line", THREAD, ("t", "tab-free", "open", None), ("t", "a\tb", "open", None),
     "threads_summary_limit"),
    ("thread summary no DEL", THREAD, ("t", "ok", "open", None), ("t", "a\x7fb", "open", None), "threads_summary_limit"),
    ("status 32", THREAD, ("t", "s", "s" * 32, None), ("t", "s", "s" * 33, None), "threads_status_limit"),
    ("status charset", THREAD, ("t", "s", "in-review", None), ("t", "s", "in review", None), "threads_status_limit"),
    ("status not empty", THREAD, ("t", "s", "open", None), ("t", "s", "", None), "threads_status_limit"),
    ("app_id 64", THREAD, ("t", "s", "open", "a" * 64), ("t", "s", "open", "a" * 65), "threads_app_id_limit"),
    ("app_id charset", THREAD, ("t", "s", "open", "app:1"), ("t", "s", "open", "app 1"), "threads_app_id_limit"),
    ("app_id not empty", THREAD, ("t", "s", "open", None), ("t", "s", "open", ""), "threads_app_id_limit"),
    ("name 80", WORKER, ("n" * 80, "s"), ("n" * 81, "s"), "workers_name_limit"),
    ("name not empty", WORKER, ("n", "s"), ("", "s"), "workers_name_limit"),
    ("name one line", WORKER, ("n", "s"), ("n\r", "s"), "workers_name_limit"),
    ("worker summary 200", WORKER, ("n", "s" * 200), ("n", LONG_ONE_LINE), "workers_summary_limit"),
    ("source 80", TRIGGER, ("s" * 80, "sum", None), ("s" * 81, "sum", None), "triggers_source_limit"),
    ("source charset", TRIGGER, ("github.check_run", "sum", None), ("github check", "sum", None), "triggers_source_limit"),
    ("trigger summary 200", TRIGGER, ("src", "s" * 200, None), ("src", LONG_ONE_LINE, None), "triggers_summary_limit"),
    ("trigger summary one line", TRIGGER, ("src", "one", None), ("src", "one\ntwo", None), "triggers_summary_limit"),
    ("trigger run_id", TRIGGER, ("src", "sum", "run-1"), ("src", "sum", "run/1"), "triggers_run_id_limit"),
    ("report summary 200", REPORT, ("s" * 200, None), (LONG_ONE_LINE, None), "reports_summary_limit"),
    ("report summary one line", REPORT, ("one", None), ("one\x1btwo", None), "reports_summary_limit"),
    ("report agent_id", REPORT, ("s", "agent.1"), ("s", "a" * 65), "reports_agent_id_limit"),
]


@pytest.mark.parametrize(("statement", "within", "over", "constraint"),
                         [pytest.param(*case[1:], id=case[0]) for case in CASES])
def test_a_direct_insert_over_a_limit_is_refused(store: str, statement: str, within: tuple, over: tuple,
                                                 constraint: str) -> None:
    prefix = {THREAD: "thr", WORKER: "wkr", TRIGGER: "trg", REPORT: "rpt"}[statement]
    assert attempt(store, statement, new_id(prefix), *within) is None
    assert attempt(store, statement, new_id(prefix), *over) == constraint


@pytest.mark.parametrize(("statement", "constraint"), [(NEIGHBOUR, "trigger_neighbours_position_limit"),
                                                       (REF, "report_refs_position_limit")])
def test_at_most_16_neighbours_and_refs(store: str, statement: str, constraint: str) -> None:
    assert attempt(store, statement, 1) is None
    assert attempt(store, statement, 16) is None
    assert attempt(store, statement, 17) == constraint
    assert attempt(store, statement, 0) == constraint  # positions count from 1 (WITH ORDINALITY)


def test_at_most_16_owners_per_thread(store: str) -> None:
    """A CHECK cannot count rows: a deferred constraint trigger refuses the 17th owner at commit."""
    thread = new_id("thr")
    workers = [new_id("wkr") for _ in range(17)]
    run_script(store, f"""
        INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
        VALUES ('default', '{thread}', 't', 's', 'open', '\\x');
        INSERT INTO workers (tenant_id, id, name, summary, request_hash)
        SELECT 'default', w, 'w', 's', '\\x' FROM unnest(ARRAY{workers!r}) w;
        INSERT INTO thread_owners (tenant_id, thread_id, worker_id)
        SELECT 'default', '{thread}', w FROM unnest(ARRAY{workers[:16]!r}) w;
    """)
    assert attempt(store, "INSERT INTO thread_owners (tenant_id, thread_id, worker_id) VALUES ('default', $1, $2)",
                   thread, workers[16]) == "thread_owners_limit"
    with pytest.raises(asyncpg.CheckViolationError):  # and at a plain commit, not only under SET CONSTRAINTS
        run_script(store, f"INSERT INTO thread_owners (tenant_id, thread_id, worker_id) "
                          f"VALUES ('default', '{thread}', '{workers[16]}')")
    assert run_sql(store, "SELECT count(*) FROM thread_owners WHERE thread_id = $1", thread)[0][0] == 16


def test_erasure_leaves_tombstones_the_limits_accept(store: str) -> None:
    """recall_erase overwrites titles, names and summaries with '': allowed once the row is deleted."""
    thread, worker, trigger, report = new_id("thr"), new_id("wkr"), new_id("trg"), new_id("rpt")
    run_script(store, f"""
        INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
        VALUES ('default', '{thread}', 'a title', 'a summary', 'open', '\\x');
        INSERT INTO workers (tenant_id, id, name, summary, request_hash) VALUES ('default', '{worker}', 'w', 's', '\\x');
        INSERT INTO triggers (tenant_id, id, source, thread_id, summary, content_type, payload, payload_sha256,
                              request_hash, occurred_at)
        VALUES ('default', '{trigger}', 'src', '{thread}', 's', 'text/plain', '\\x', '\\x', '\\x', now());
        INSERT INTO reports (tenant_id, id, worker_id, thread_id, summary, content_type, body, body_sha256, request_hash)
        VALUES ('default', '{report}', '{worker}', '{thread}', 's', 'text/plain', '\\x', '\\x', '\\x');
        SELECT recall_erase('default', '{worker}');
        SELECT recall_erase('default', '{thread}');
    """)
    rows = run_sql(store, "SELECT title, deleted_at IS NOT NULL FROM threads WHERE id = $1", thread)
    assert [tuple(r) for r in rows] == [("", True)]
    assert run_sql(store, "SELECT name FROM workers WHERE id = $1", worker)[0][0] == ""
    # An empty title on a live row is still refused (the tombstone allowance needs deleted_at).
    assert attempt(store, f"UPDATE threads SET deleted_at = NULL WHERE id = '{thread}'") == "threads_title_limit"


def test_every_limit_is_validated(store: str) -> None:
    """NOT VALID constraints only check new rows: the migration validates them on existing ones too."""
    rows = run_sql(store, "SELECT conname, convalidated FROM pg_constraint WHERE conname LIKE '%\\_limit' AND contype = 'c'")
    assert len(rows) == 10 + 12
    assert all(r["convalidated"] for r in rows), [r["conname"] for r in rows if not r["convalidated"]]


# Each ID, namespace and run CHECK (schema.sql, version 5) against the grammar it stands for: the API's
# patterns (ids.pattern, models.SEGMENT and Namespace, ids.RUN_PATTERN) and the tenant's. The CHECKs
# avoid bounded repetitions, which PostgreSQL's regex engine makes slow; they must accept the same values.
_BODIES = ["", "a", "Z9_-", "a" * 63, "a" * 64, "a" * 65, "a" * 128, "a" * 129, "a.b", "a:b", "a/b", "a b", "é",
           "a\n", "\na", "A", "-a", "_"]
_SEGMENT = models.SEGMENT.removeprefix("^").removesuffix(r"\Z")
GRAMMARS = {
    **{(f"{ids.PLURAL[kind]}", f"{ids.PLURAL[kind]}_id_check"):
       ("id", ids.pattern(kind).removeprefix("^").removesuffix(r"\Z"), [f"{ids.PREFIX[kind]}_{b}" for b in _BODIES]
        + [f"{ids.PREFIX[kind]}{b}" for b in _BODIES] + ["trg_a" if kind != "trigger" else "thr_a"])
       for kind in ids.PLURAL},
    ("tenants", "tenants_id_check"): ("id", r"[a-z0-9][a-z0-9_-]{0,62}", _BODIES),
    ("trace_reads", "trace_reads_run_id_check"):
        ("run_id", ids.RUN_PATTERN.removeprefix("^").removesuffix(r"\Z"), _BODIES),
    ("memories", "memories_check"):
        ("namespace", rf"{_SEGMENT}(/{_SEGMENT}){{0,7}}",
         [*_BODIES, "a/" * 7 + "a", "a/" * 8 + "a", "a/" + "b" * 64 + "/c", "a/" + "b" * 65 + "/c", "b" * 65 + "/c",
          "a//b", "/a", "a/", "a/b.c", "a/" * 7 + "a" * 64, "a/" * 7 + "a" * 65]),
}


@pytest.mark.parametrize(("table", "constraint"), list(GRAMMARS))
def test_each_id_namespace_and_run_check_accepts_exactly_its_grammar(store: str, table: str, constraint: str) -> None:
    column, grammar, values = GRAMMARS[(table, constraint)]
    [row] = run_sql(store, "SELECT pg_get_constraintdef(oid) AS def, convalidated FROM pg_constraint "
                           "WHERE conrelid = $1::regclass AND conname = $2", table, constraint)
    assert row["convalidated"]
    assert "{1," not in row["def"] and "{0,6" not in row["def"], "a bounded repetition is back: " + row["def"]
    others = "NULL::timestamptz AS deleted_at, 'k'::text AS key, " if table == "memories" else ""
    check = row["def"].removeprefix("CHECK ")
    got = {value: run_sql(store, f"SELECT coalesce({check}, true) FROM (SELECT {others}$1::text AS {column}) x",
                          value)[0][0] for value in values}
    want = {value: re.fullmatch(grammar, value) is not None for value in values}
    assert got == want
    assert any(want.values()) and not all(want.values())
