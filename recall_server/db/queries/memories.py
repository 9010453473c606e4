"""Memories: the view by ID or (namespace, key), the lists (memories, versions, namespaces), writing a version."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

import asyncpg
import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn, given, label_filters, labels_of, links_json, positions, under
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.models import Link
from recall_server.rows import Labels, MemoryRow

# A memory's namespace is stored as its segments joined by '/' (COLLATE "C"), so a namespace
# prefix p is the index range [p || '/', p || '0') plus p itself ('0' follows '/').

_link = msgspec.json.Decoder(Link | None)
_tags = msgspec.json.Decoder(dict[str, str])
_ids = msgspec.json.Decoder(list[str])


def _columns(as_of: str | None = None) -> str:
    """A memory's view columns; `as_of` (a parameter): as it was then, the version current then (its later
    supersession not yet made)."""
    current = "m.current" if as_of is None else "true AS current"
    gone = ("recall_is_gone(m.deleted_at, m.expires_at)" if as_of is None
            else f"(m.deleted_at IS NOT NULL OR coalesce(m.expires_at <= {as_of}, false))")
    successor = ("CASE WHEN m.superseded_by IS NOT NULL THEN recall_link_of(m.tenant_id, m.superseded_by) END"
                 if as_of is None else "NULL::json")
    return f"""
    m.id, m.namespace, m.key, m.kind, m.summary, m.content_type, octet_length(m.value) AS size,
    CASE WHEN octet_length(m.value) <= $4 THEN m.value ELSE substring(m.value FROM 1 FOR $5) END AS head,
    CASE WHEN octet_length(m.value) <= $4 THEN ''::bytea
         ELSE substring(m.value FROM octet_length(m.value) - $5 + 1) END AS tail,
    m.tags::text AS tags, m.confirmed, {current}, m.version, m.created_at, m.app_id, m.agent_id, m.run_id,
    m.expires_at, {gone} AS gone,
    CASE WHEN m.version > 1 THEN (SELECT c.created_at FROM memories c
                                   WHERE c.tenant_id = auth.tenant AND c.id = m.chain) END AS chain_created_at,
    CASE WHEN m.supersedes IS NOT NULL THEN recall_link_of(m.tenant_id, m.supersedes) END AS supersedes,
    {successor} AS superseded_by,
    (SELECT coalesce(json_agg(recall_link_of(s.tenant_id, s.source_id) ORDER BY s.position), '[]')
       FROM memory_sources s WHERE s.tenant_id = auth.tenant AND s.memory_id = m.id
        AND ((SELECT recall_reads()) IS NULL OR recall_sees(s.tenant_id, s.source_id))) AS sources,
    (SELECT coalesce(json_agg(l.source_id ORDER BY l.source_id), '[]') FROM memory_lineage l
      WHERE l.tenant_id = auth.tenant AND l.memory_id = m.id AND l.policy = 'flag') AS source_erased
"""


# A memory's sources existed when it was written (a dangling source is a 422), so a source shown as deleted tells
# a key it existed. For a key with grants, a source its policies hide is left out, as views leave out owners
# outside the grants: what it cannot see reads as a link that was never made (tests/test_grant_leaks.py).
_MEMORY_COLUMNS = _columns()
_MEMORY = keyed(f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE m.tenant_id = auth.tenant AND m.id = $3")
_MEMORY_CURRENT = keyed(f"""
    SELECT {_MEMORY_COLUMNS} FROM memories m
    WHERE m.tenant_id = auth.tenant AND m.namespace = $3 AND m.key = $6 AND m.current
""")


def _memory_row(row: asyncpg.Record) -> MemoryRow:
    return MemoryRow(
        id=row["id"], namespace=row["namespace"], key=row["key"], kind=row["kind"], summary=row["summary"],
        content_type=row["content_type"], size=row["size"], head=row["head"], tail=row["tail"],
        tags=_tags.decode(row["tags"]),
        confirmed=row["confirmed"], current=row["current"], version=row["version"], created_at=row["created_at"],
        sources=links_json.decode(row["sources"]), chain_created_at=row["chain_created_at"],
        source_erased=_ids.decode(row["source_erased"]),
        supersedes=_link.decode(row["supersedes"]) if row["supersedes"] else None,
        superseded_by=_link.decode(row["superseded_by"]) if row["superseded_by"] else None,
        **labels_of(row),
    )


async def fetch_memory(conn: Conn, cred: Credential, memory_id: str, inline_max: int,
                       preview: int) -> tuple[str, MemoryRow | None]:
    tenant, row = await tenancy.fetch(conn, cred, _MEMORY, memory_id, inline_max, preview)
    return tenant, None if row is None else _memory_row(row)


async def fetch_current_memory(conn: Conn, cred: Credential, namespace: str, key: str, inline_max: int,
                               preview: int) -> tuple[str, MemoryRow | None]:
    """The current version of (namespace, key), gone or not; None when the pair has none."""
    tenant, row = await tenancy.fetch(conn, cred, _MEMORY_CURRENT, namespace, inline_max, preview, key)
    return tenant, None if row is None else _memory_row(row)


# The version of (namespace, key) that was current at $7: the newest created at or before it, gone if it had
# expired by then (or is erased: an erased version's namespace and key are wiped, so it is never found, at any
# time). As of then it was the current version, superseded by nothing yet.
_MEMORY_AS_OF = keyed(f"""
    SELECT {_columns("$7")} FROM memories m
     WHERE m.tenant_id = auth.tenant AND m.namespace = $3 AND m.key = $6 AND m.created_at <= $7
     ORDER BY m.created_at DESC, m.version DESC LIMIT 1
""")


async def fetch_memory_as_of(conn: Conn, cred: Credential, namespace: str, key: str, as_of: datetime,
                             inline_max: int, preview: int) -> tuple[str, MemoryRow | None]:
    """The version of (namespace, key) current at `as_of`, gone or not; None when the pair had none then."""
    tenant, row = await tenancy.fetch(conn, cred, _MEMORY_AS_OF, namespace, inline_max, preview, key, as_of)
    return tenant, None if row is None else _memory_row(row)


_PAIR_EXISTED = keyed("SELECT true AS existed FROM memories WHERE tenant_id = auth.tenant AND pair = $3 "
                      "AND ($4::timestamptz IS NULL OR created_at <= $4) LIMIT 1")


async def memory_pair_existed(conn: Conn, cred: Credential, pair: bytes, by: datetime | None = None) -> bool:
    """Whether the pair had a version in the key's tenant (ever, or at or before `by`), after a miss on it."""
    _, row = await tenancy.fetch(conn, cred, _PAIR_EXISTED, pair, by)
    return row is not None


class _MemoryKey(msgspec.Struct):
    id: str
    namespace: str
    key: str
    kind: str
    version: int
    summary: str
    content_type: str
    tags: dict[str, str]
    confirmed: str
    created_at: datetime
    chain_created_at: datetime | None  # version 1's, on later versions
    expires_at: datetime | None
    text: str | None  # the value, when it is small enough to show in the list
    source_erased: list[str] | None = None  # flagged by the tenant's lineage policy


_memory_keys = msgspec.json.Decoder(list[_MemoryKey])

_MEMORIES = """
    SELECT coalesce(json_agg(x ORDER BY x.namespace, x.key), '[]') AS memories FROM (
      SELECT m.id, m.namespace, m.key, m.kind, m.version, m.summary, m.content_type, m.tags, m.confirmed,
             m.created_at, m.expires_at,
             CASE WHEN m.version > 1 THEN (SELECT c.created_at FROM memories c
                                            WHERE c.tenant_id = auth.tenant AND c.id = m.chain) END AS chain_created_at,
             CASE WHEN octet_length(m.value) <= $13 THEN convert_from(m.value, 'UTF8') END AS text,
             (SELECT array_agg(l.source_id ORDER BY l.source_id) FROM memory_lineage l
               WHERE l.tenant_id = auth.tenant AND l.memory_id = m.id AND l.policy = 'flag') AS source_erased
        FROM memories m
       WHERE m.tenant_id = auth.tenant AND {live}
         AND {namespace}
         AND ($4::text IS NULL OR m.kind = $4)
         AND ($5::jsonb IS NULL OR m.tags @> $5)
         AND {labels}
         AND ($9::text IS NULL OR CASE WHEN m.content_type = 'application/json' OR m.content_type LIKE '%+json'
                                        THEN {value} @> (SELECT {filter}) ELSE false END)
         AND (m.namespace, m.key) > ($10, $11)
       ORDER BY m.namespace, m.key LIMIT $12) x
"""
# jsonb cannot hold the NUL character (U+0000): the cast of a JSON value holding one fails. Such a JSON
# text is cast with each NUL written as U+FFFF '0' and each U+FFFF as U+FFFF 'e', a code that keeps every
# string and member name as distinct from the others as it was, so containment (@>) answers as it would
# on the values themselves. Escaped backslashes are first written \u005c, so that every backslash left
# starts an escape of its own and the escapes of U+0000 and U+FFFF can be found as text.
_NUL_FREE = (r"replace(replace(regexp_replace(regexp_replace({0}, '\\\\', '\\u005c', 'g'), "
             r"'\\u[fF][fF][fF][fF]', chr(65535), 'g'), chr(65535), chr(65535) || 'e'), "
             r"'\u0000', chr(65535) || '0')")
# A stored value is recoded when it may hold a NUL (its bytes hold the text \u0000) or, when the filter
# is recoded ($14: it holds a NUL or a U+FFFF), a U+FFFF (raw, or escaped); others are the same either way.
_VALUE = (r"CASE WHEN position('\x5c7530303030'::bytea IN m.value) > 0 OR ($14 AND ("
          r"position('\xefbfbf'::bytea IN m.value) > 0 OR convert_from(m.value, 'UTF8') ~ '\\u[fF][fF][fF][fF]')) "
          "THEN " + _NUL_FREE.format("convert_from(m.value, 'UTF8')") + "::jsonb "
          "ELSE convert_from(m.value, 'UTF8')::jsonb END")
_FILTER = f"(CASE WHEN $14 THEN {_NUL_FREE.format('$9')} ELSE $9 END)::jsonb"  # once a statement: (SELECT ...)


_LIVE = "m.current AND m.deleted_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > now())"
# As of $15: the version of each pair that was current then, the newest written by then, unless it had expired
# by then. An erased version is wiped (in no namespace) and kept as a later version of its pair, so what was
# erased never comes back: neither it nor the version it superseded.
_LIVE_AS_OF = """m.created_at <= $15 AND m.deleted_at IS NULL AND (m.expires_at IS NULL OR m.expires_at > $15)
         AND NOT EXISTS (SELECT 1 FROM memories n WHERE n.tenant_id = auth.tenant AND n.pair = m.pair
                            AND n.created_at <= $15 AND (n.created_at, n.version) > (m.created_at, m.version))"""


@functools.cache
def _memories(namespace: bool, labels: tuple[bool, bool, bool], as_of: bool = False) -> str:
    """The statement listing current memories with these filters given: along memories_current (or
    memories_current_by_app ... for a label) from the cursor on, or from the namespace when there is none;
    `as_of`: those current at $15, read from every version in the range."""
    return keyed(_MEMORIES.format(namespace=under("m.namespace", "$3") if namespace else "$3::text IS NULL",
                                  labels=label_filters("m", 6, labels), value=_VALUE, filter=_FILTER,
                                  live=_LIVE_AS_OF if as_of else _LIVE))


async def list_memories(
    conn: Conn, cred: Credential, namespace: str | None, kind: str | None, tags: str | None, labels: Labels,
    value_contains: str | None, after: tuple[str, str] | None, limit: int, inline_max: int,
    recode_filter: bool, as_of: datetime | None = None,
) -> tuple[str, list[_MemoryKey]]:
    """The key's tenant, and its current live memories (`as_of`: those current then) in (namespace, key) order
    after `after`. `tags` and `value_contains` are JSON objects the tags / JSON value must contain;
    `recode_filter`: value_contains holds a NUL or a U+FFFF (_NUL_FREE)."""
    start = after or (namespace or "", "")  # every key is longer than ''
    tenant, row = await tenancy.fetch(
        conn, cred, _memories(namespace is not None, given(labels), as_of is not None), namespace, kind, tags,
        labels.app_id, labels.agent_id, labels.run_id, value_contains, *start, limit, inline_max, recode_filter,
        *([as_of] if as_of is not None else []),
    )
    assert row is not None  # an aggregate: always one row
    return tenant, _memory_keys.decode(row["memories"])


class _VersionKey(msgspec.Struct):
    id: str
    version: int
    summary: str
    current: bool
    gone: bool
    created_at: datetime


_version_keys = msgspec.json.Decoder(list[_VersionKey])

_VERSIONS = keyed("""
    SELECT recall_is_gone(m.deleted_at, m.expires_at) AS gone,
           (SELECT coalesce(json_agg(x ORDER BY x.version DESC), '[]') FROM (
              SELECT v.id, v.version, v.summary, v.current, recall_is_gone(v.deleted_at, v.expires_at) AS gone,
                     v.created_at
                FROM memories v WHERE v.tenant_id = auth.tenant AND v.chain = m.chain AND v.version < $4
               ORDER BY v.version DESC LIMIT $5) x) AS versions
    FROM memories m WHERE m.tenant_id = auth.tenant AND m.id = $3
""")


# As of $6: the versions written by then, each current (superseded by none written by then), superseded, or
# gone (erased, or expired by then); the memory itself missing when written later.
_VERSIONS_AS_OF = keyed("""
    SELECT (m.deleted_at IS NOT NULL OR coalesce(m.expires_at <= $6, false)) AS gone, m.created_at <= $6 AS written,
           (SELECT coalesce(json_agg(x ORDER BY x.version DESC), '[]') FROM (
              SELECT v.id, v.version, v.summary,
                     NOT EXISTS (SELECT 1 FROM memories n WHERE n.tenant_id = auth.tenant AND n.chain = v.chain
                                    AND n.version > v.version AND n.created_at <= $6) AS current,
                     (v.deleted_at IS NOT NULL OR coalesce(v.expires_at <= $6, false)) AS gone, v.created_at
                FROM memories v WHERE v.tenant_id = auth.tenant AND v.chain = m.chain AND v.version < $4
                 AND v.created_at <= $6
               ORDER BY v.version DESC LIMIT $5) x) AS versions
    FROM memories m WHERE m.tenant_id = auth.tenant AND m.id = $3
""")


async def list_memory_versions(conn: Conn, cred: Credential, memory_id: str, before: int, limit: int,
                               as_of: datetime | None = None) -> tuple[str, State, list[_VersionKey]]:
    """The key's tenant, the memory's state, and the versions of its chain below `before`, newest first
    (`as_of`: as they were then; the memory MISSING if it was written later, unless erased)."""
    if as_of is None:
        tenant, row = await tenancy.fetch(conn, cred, _VERSIONS, memory_id, before, limit)
    else:
        tenant, row = await tenancy.fetch(conn, cred, _VERSIONS_AS_OF, memory_id, before, limit, as_of)
    if row is None or (as_of is not None and not row["written"] and not row["gone"]):  # erased: gone at every time
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _version_keys.decode(row["versions"])


_NAMESPACES = """
    SELECT coalesce(json_agg(p.ns ORDER BY p.ns), '[]') AS namespaces FROM (SELECT d.ns FROM (
      SELECT DISTINCT (CASE WHEN $5::int IS NULL THEN m.namespace
                       ELSE array_to_string((string_to_array(m.namespace, '/'))[1:$5], '/') END) COLLATE "C" AS ns
        FROM memories m
       WHERE m.tenant_id = auth.tenant AND m.current AND m.deleted_at IS NULL
         AND (m.expires_at IS NULL OR m.expires_at > now())
         AND {namespace}
         AND ($4::text IS NULL OR m.namespace = $4 OR right(m.namespace, length($4) + 1) = '/' || $4)
    ) d WHERE ($6::text IS NULL OR d.ns > $6 COLLATE "C")
    ORDER BY d.ns LIMIT $7) p
"""


@functools.cache
def _namespaces(prefix: bool) -> str:
    return keyed(_NAMESPACES.format(namespace=under("m.namespace", "$3") if prefix else "$3::text IS NULL"))


async def list_memory_namespaces(conn: Conn, cred: Credential, prefix: str | None, suffix: str | None,
                                 max_depth: int | None, after: str | None, limit: int) -> tuple[str, list[str]]:
    """The distinct namespaces of current live memories (cut to max_depth segments), in order after `after`."""
    tenant, row = await tenancy.fetch(conn, cred, _namespaces(prefix is not None), prefix, suffix, max_depth, after,
                                      limit)
    return tenant, [] if row is None else msgspec.json.decode(row["namespaces"], type=list[str])


_LOCK_PAIR = "SELECT recall_lock_memory_pair($1, $2, $3)"  # as deletes take it


async def lock_memory_pair(conn: Conn, tenant: str, namespace: str, key: str) -> None:
    """Serialise writers of one (namespace, key) for this transaction (no space occurs in a tenant or namespace)."""
    if conn.sharded:
        # The pair's lock on the coordinator, as every writer and delete takes it, by a transaction that has read
        # the pair on the tenant's worker first. That read makes it a distributed transaction: Citus's deadlock
        # detection counts every waiting process that is not in one as one and the same process, so writers
        # queued on the lock (each waiting for those ahead of it) made a cycle, and one was cancelled (a 503;
        # tests/test_memories.py, twenty concurrent writers). A delete reads the memory before it takes the lock
        # (recall_erase).
        await conn.fetchval("SELECT 1 FROM memories WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND current",
                            tenant, namespace, key)
    await conn.execute(_LOCK_PAIR, tenant, namespace, key)


_INSERT_MEMORY = """
        WITH old AS (
          UPDATE memories m SET current = false,
                 superseded_by = CASE WHEN recall_is_gone(m.deleted_at, m.expires_at) THEN NULL ELSE $2 END
           WHERE m.tenant_id = $1 AND m.namespace = $3 AND m.key = $4 AND m.current
          RETURNING m.id, m.chain, m.version, recall_is_gone(m.deleted_at, m.expires_at) AS gone),
        prev AS (SELECT * FROM old WHERE NOT gone)
        INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value, value_sha256,
                              tags, confirmed, app_id, agent_id, run_id, request_hash, chain, version, current,
                              supersedes, expires_at, embed)
        SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16,
               coalesce(prev.chain, $2), coalesce(prev.version, 0) + 1, true, prev.id,
               coalesce($17, clock_timestamp() + (SELECT CASE $6 WHEN 'scratchpad' THEN t.memory_scratchpad_ttl
                                                               WHEN 'state' THEN t.memory_state_ttl END
                                                   FROM tenants t WHERE t.id = $1)), $18
          FROM (SELECT 1) one LEFT JOIN prev ON true
        RETURNING version
        """


async def insert_memory(
    conn: Conn, tenant: str, memory_id: str, namespace: str, key: str, pair: bytes, kind: str, summary: str,
    content_type: str, value: bytes, sha: bytes, tags: str, confirmed: str, labels: Labels, req_hash: bytes,
    expires_at: datetime | None, embed: bool = True,
) -> int:
    """Insert the pair's new current version, superseding the current one in the same statement; its version.

    A current version that is gone (expired) is closed, not superseded: the new one starts a new chain.
    Without `expires_at`, scratchpad and state memories take their tenant's default lifetime.
    The caller holds the pair's lock, so the chain stays gap-free.
    """
    args = (tenant, memory_id, namespace, key, pair, kind, summary, content_type, value, sha, tags, confirmed,
            labels.app_id, labels.agent_id, labels.run_id, req_hash, expires_at, embed)
    if conn.sharded:
        return await _insert_memory_steps(conn, *args)
    return await conn.fetchval(_INSERT_MEMORY, *args)


async def _insert_memory_steps(conn: Conn, tenant: str, memory_id: str, namespace: str, key: str, pair: bytes,
                               kind: str, summary: str, content_type: str, value: bytes, sha: bytes, tags: str,
                               confirmed: str, app_id: Any, agent_id: Any, run_id: Any, req_hash: bytes,
                               expires_at: Any, embed: bool) -> int:
    """_INSERT_MEMORY on a Citus coordinator (no STABLE function of a column in an UPDATE, no data-modifying CTE in
    front of an INSERT): the pair's current version closed (superseded unless gone), then the new one."""
    old = await conn.fetchrow(
        "SELECT id, chain, version, recall_is_gone(deleted_at, expires_at) AS gone FROM memories"
        " WHERE tenant_id = $1 AND namespace = $2 AND key = $3 AND current", tenant, namespace, key)
    if old is not None:
        await conn.execute("UPDATE memories SET current = false, superseded_by = $3 WHERE tenant_id = $1 AND id = $2",
                           tenant, old["id"], None if old["gone"] else memory_id)
    prev = None if old is None or old["gone"] else old
    if expires_at is None:
        expires_at = await conn.fetchval(
            "SELECT clock_timestamp() + CASE $2 WHEN 'scratchpad' THEN memory_scratchpad_ttl"
            " WHEN 'state' THEN memory_state_ttl END FROM tenants WHERE id = $1", tenant, kind)
    return await conn.fetchval(
        "INSERT INTO memories (tenant_id, id, namespace, key, pair, kind, summary, content_type, value, value_sha256,"
        " tags, confirmed, app_id, agent_id, run_id, request_hash, chain, version, current, supersedes, expires_at,"
        " embed) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13, $14, $15, $16, $17, $18, true,"
        " $19, $20, $21) RETURNING version",
        tenant, memory_id, namespace, key, pair, kind, summary, content_type, value, sha, tags, confirmed,
        app_id, agent_id, run_id, req_hash, memory_id if prev is None else prev["chain"],
        1 if prev is None else prev["version"] + 1, None if prev is None else prev["id"], expires_at, embed)


insert_memory_sources = positions("memory_sources", "memory_id", "source_id")


async def keep_memory_ttl(conn: Conn, tenant: str, memory_id: str, ttl_seconds: int) -> None:
    """Keep the ttl a memory was written with, so that a read can refresh its expiry (refresh_memories)."""
    await conn.execute("UPDATE memories SET ttl = $3::integer * interval '1 second' WHERE tenant_id = $1 AND id = $2",
                       tenant, memory_id, ttl_seconds)


async def refresh_memories(conn: Conn, tenant: str, memory_ids: list[str], now: datetime) -> list[tuple[str, datetime]]:
    """Extend each live memory written with a ttl to expire `now` + its ttl; (id, expires_at) of those refreshed.
    `now` is a parameter, not the statement's clock: Citus plans no volatile function in an UPDATE."""
    rows = await conn.fetch(
        "UPDATE memories SET expires_at = $3 + ttl WHERE tenant_id = $1 AND id = ANY($2::text[]) AND ttl IS NOT NULL"
        " AND deleted_at IS NULL AND expires_at > $3 RETURNING id, expires_at", tenant, memory_ids, now)
    return [(r["id"], r["expires_at"]) for r in rows]
