"""What the statements of several aggregates share: the connection type, decoders, label filters, heads."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime, timezone
from typing import Any

import asyncpg
import msgspec

from recall_server.db.pool import Connection
from recall_server.models import Event, Link
from recall_server.rows import Labels

Conn = Connection  # `conn.sharded`: a Citus coordinator, where a statement that differs runs its other form

links_json = msgspec.json.Decoder(list[Link])
events_json = msgspec.json.Decoder(list[Event])


def labels_of(row: asyncpg.Record) -> dict[str, object]:
    return {"app_id": row["app_id"], "agent_id": row["agent_id"], "run_id": row["run_id"],
            "expires_at": row["expires_at"], "gone": row["gone"]}


HEAD_SIZE = 10  # recall_head_size() in schema.sql; spill.RECENT (tests/test_thread_head.py)


class HeadOwner(msgspec.Struct):
    id: str
    summary: str
    deleted: bool
    expires_at: datetime | None


head_owners_json = msgspec.json.Decoder(list[HeadOwner])


def gone_by(deleted: bool, expires_at: datetime | None, now: datetime) -> bool:
    """recall_is_gone, for a head's copy of an object, read with the statement's `now`."""
    return deleted or (expires_at is not None and expires_at <= now)


def head_owner(o: HeadOwner, now: datetime) -> Link:
    """recall_link of an owner (or a worker's thread), from a head."""
    if gone_by(o.deleted, o.expires_at, now):
        return Link(id=o.id, deleted=True)
    return Link(id=o.id, summary=o.summary)


# Where a keyset starts when no cursor is given, as values rather than as coalesce($n, ...) in the statement:
# under row-level security PostgreSQL uses only leakproof clauses as index conditions, and coalesce() is
# not one, so the bound became a filter on a walk from the first row (asyncpg sends datetime.max as
# 'infinity' and datetime.min as '-infinity').
NEWEST = (datetime.max.replace(tzinfo=timezone.utc), "")  # (created_at, id) < this for every row
OLDEST_READ = (datetime.min.replace(tzinfo=timezone.utc), 0)  # (pos, tick) > this for every read


def equal(column: str, param: str, given: bool) -> str:
    """`column = param` when the filter is given, else a clause that only types the parameter. In a generic
    plan, `(param IS NULL OR column = param)` can use no index on `column`, and its guessed selectivity
    makes every list look short (a worker's reports were all read to be sorted): the lists build one
    statement for each set of filters given, and PostgreSQL caches a plan for each."""
    return f"{column} = {param}" if given else f"{param}::text IS NULL"


def given(labels: Labels) -> tuple[bool, bool, bool]:
    return labels.app_id is not None, labels.agent_id is not None, labels.run_id is not None


def shown(links: str, table: str) -> str:
    """A stored head's links (`[{id, summary, ...}]`: a thread's owners, a worker's threads or reports, kept for
    every reader alike) as the bound key may see them: whole for a key without grants; else those whose row of
    `table` its policies let it read, as the log views, which read those rows, show them. A scalar subquery
    per link, so each is a primary-key probe (as EXISTS it became a join reading the whole table)."""
    return (f"CASE WHEN (SELECT recall_reads()) IS NULL THEN {links} ELSE ("
            f"SELECT coalesce(jsonb_agg(l ORDER BY n), '[]') FROM jsonb_array_elements({links}) WITH ORDINALITY a(l, n)"
            f" WHERE (SELECT true FROM {table} x WHERE x.tenant_id = auth.tenant AND x.id = l->>'id')) END")


def filed_summary(type_: str, summary: str, ref: str) -> str:
    """An event's summary as the bound key may see it. A trigger_filed or report_filed event copies its object's
    summary, and the object may be in a namespace the key's grants do not cover on a thread they do: for a key
    with grants that summary is empty (the event still shows the ID) unless its policies let it read the
    trigger or report (a primary-key probe, as shown() makes). Every other event, and every event for a key
    without grants, as it is."""
    probe = "(SELECT true FROM {table} x WHERE x.tenant_id = auth.tenant AND x.id = " + ref + ")"
    return (f"CASE WHEN {type_} NOT IN ('trigger_filed', 'report_filed') OR (SELECT recall_reads()) IS NULL"
            f" OR CASE {type_} WHEN 'trigger_filed' THEN {probe.format(table='triggers')}"
            f" ELSE {probe.format(table='reports')} END THEN {summary} ELSE '' END")


def shown_events(events: str) -> str:
    """A stored head's events (`[{seq, type, summary, ref, ...}]`, kept for every reader alike) as the bound key
    may see them: whole for a key without grants; else each with its filed_summary."""
    summary = filed_summary("e->>'type'", "e->>'summary'", "e->>'ref'")
    return (f"CASE WHEN (SELECT recall_reads()) IS NULL THEN {events} ELSE ("
            f"SELECT coalesce(jsonb_agg(jsonb_set(e, '{{summary}}', to_jsonb({summary})) ORDER BY n), '[]')"
            f" FROM jsonb_array_elements({events}) WITH ORDINALITY a(e, n)) END")


def under(column: str, param: str) -> str:
    """`column`, a namespace (segments joined by '/', COLLATE "C"), is `param` or under it: [p, p || '0') in "C"
    order holds the namespaces that start with p, and the filter keeps those where it ends a segment (p, p/...),
    not p-... ('-' sorts before '/'). A range on an index led by the namespace."""
    return (f"{column} >= {param} AND {column} < {param} || '0' "
            f"AND substr({column}, char_length({param}) + 1, 1) IN ('', '/')")


def label_filters(alias: str, first: int, given: tuple[bool, bool, bool]) -> str:
    """The filters on the labels given, app_id, agent_id and run_id from parameter $`first` on."""
    return " AND ".join(equal(f"{alias}.{name}", f"${first + n}", on)
                        for n, (name, on) in enumerate(zip(("app_id", "agent_id", "run_id"), given, strict=True)))


# A thread's head gains the new event and drops the oldest beyond recall_head_size(): the statements
# that append take it from here, under the row lock their UPDATE holds.
HEAD_PREPEND = """recall_head_with(jsonb_build_array(recall_head_event(t.last_seq + 1, {type}, v.at, {summary}, {ref},
                                                                 {gone_at})), t.head_events)"""


def arrays(rows: Iterable[msgspec.Struct]) -> list[list[Any]]:
    """Structs of one type as one array per field, in field order: what a batch statement's unnest takes."""
    return [list(column) for column in zip(*(msgspec.structs.astuple(r) for r in rows), strict=True)]


def least(*times: datetime | None) -> datetime | None:
    """least() as PostgreSQL has it: NULLs ignored."""
    given = [t for t in times if t is not None]
    return min(given) if given else None


def positions(table: str, owner: str, item: str) -> Callable[[Conn, str, str, list[str]], Awaitable[None]]:
    """The statement that files an object's ordered list (`table`'s (tenant_id, `owner`, position, `item`) rows,
    positions from 1): one INSERT ... SELECT FROM unnest WITH ORDINALITY; on a Citus coordinator rows of
    VALUES, since Citus sends an INSERT ... SELECT from no distributed table as a COPY, which row-level
    security refuses."""
    from_unnest = (f"INSERT INTO {table} (tenant_id, {owner}, position, {item})"
                   f" SELECT $1, $2, n.position, n.id FROM unnest($3::text[]) WITH ORDINALITY AS n(id, position)")
    values = f"INSERT INTO {table} (tenant_id, {owner}, position, {item}) VALUES ($1, $2, $3, $4)"

    async def insert(conn: Conn, tenant: str, owner_id: str, items: list[str]) -> None:
        if conn.sharded:
            await conn.executemany(values, [(tenant, owner_id, n, x) for n, x in enumerate(items, 1)])
        else:
            await conn.execute(from_unnest, tenant, owner_id, items)

    return insert


async def thread_expiry(conn: Conn, tenant: str, thread_id: str | None) -> datetime | None:
    """A thread's expiry, which caps what is filed on it (None: no thread, or none set)."""
    if thread_id is None:
        return None
    return await conn.fetchval("SELECT expires_at FROM threads WHERE tenant_id = $1 AND id = $2", tenant, thread_id)
