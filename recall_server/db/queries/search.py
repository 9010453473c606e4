"""The lens: full-text search and backlinks."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import msgspec

from recall_server import ids
from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.rows import BacklinkRow, Labels, SearchRow

# Search: one statement behind the key check. recall_search_hits (schema.sql: why it runs as the owner)
# finds the page's IDs in the bound tenant with the GIN indexes, filtered like the lists (live only,
# labels, created_at window), ranked by ts_rank (normalization 0: it depends on the row and the query
# only, never on the rest of the corpus) rounded to a numeric, so the keyset (score, created_at, id)
# compares exactly and pages are stable while objects are added. Each hit's summary and snippet are
# then read here, as recall_app under the tenant policy (a hit it cannot see drops out); ts_headline
# reads the row's text again, for the page's rows only.

SEARCH_PREFIX = 65536  # bytes of a payload or body that are indexed (recall_search_text in schema.sql)

_HEADLINE = ("ts_headline('simple', {text}, websearch_to_tsquery('simple', $3), "
             "'MaxWords=16, MinWords=6, MaxFragments=1, StartSel=**, StopSel=**')")


def _snippet(short: str, content: str) -> str:
    """The snippet from an object's short fields when the query's words are there, else from them and its
    content: parsing up to 64 KiB of content for each hit is most of a page's time when a common word is
    in every summary, and a summary that holds the words is the snippet an agent wants."""
    whole = short + " || ' — ' || " + content
    return (f"CASE WHEN to_tsvector('simple', {short}) @@ websearch_to_tsquery('simple', $3) "
            f"THEN {_HEADLINE.format(text=short)} ELSE {_HEADLINE.format(text=whole)} END")

# Each hit's summary, snippet and thread, read as recall_app under the tenant policy (for the page's rows
# only: ts_headline reads the row's text again); `h` names the hits (hit_kind, hit_id).
_HYDRATE = f"""
    JOIN LATERAL (
      SELECT x.summary, {_HEADLINE.format(text="x.title || ' — ' || x.summary")} AS snippet, NULL AS thread_id
        FROM threads x WHERE h.hit_kind = 'thread' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_HEADLINE.format(text="x.name || ' — ' || x.summary")}, NULL FROM workers x
       WHERE h.hit_kind = 'worker' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_snippet("(x.summary || ' — ' || x.source)",
                                  f"recall_search_text(x.content_type, x.payload, {SEARCH_PREFIX})")}, x.thread_id
        FROM triggers x WHERE h.hit_kind = 'trigger' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_snippet("x.summary", f"recall_search_text(x.content_type, x.body, {SEARCH_PREFIX})")},
             x.thread_id
        FROM reports x WHERE h.hit_kind = 'report' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT x.summary, {_snippet("(x.summary || ' — ' || x.key || ' — ' || replace(x.namespace, '/', ' '))",
                                  f"recall_search_text(x.content_type, x.value, {SEARCH_PREFIX})")}, NULL
        FROM memories x WHERE h.hit_kind = 'memory' AND x.tenant_id = auth.tenant AND x.id = h.hit_id
      UNION ALL
      SELECT e.summary, {_HEADLINE.format(text=f"recall_search_text(x.content_type, x.content, {SEARCH_PREFIX})")},
             x.thread_id
        FROM thread_messages x JOIN thread_events e ON e.tenant_id = auth.tenant AND e.thread_id = x.thread_id
                                                   AND e.seq = x.seq
       WHERE h.hit_kind = 'message' AND x.tenant_id = auth.tenant AND recall_message_ref(x.thread_id, x.seq) = h.hit_id
    ) s ON true
"""

_SEARCH = keyed(f"""
    SELECT coalesce(json_agg(json_build_object(
             'id', h.hit_id, 'type', h.hit_kind, 'summary', s.summary, 'score', h.hit_score,
             'position', h.hit_score::text, 'created_at', h.hit_created_at, 'snippet', s.snippet,
             'thread_id', s.thread_id)
           ORDER BY h.hit_score DESC, h.hit_created_at DESC, h.hit_id DESC), '[]') AS hits
    FROM recall_search_hits($3, $4::text[], $13, $5, $6, $7, $8, $9, $10, $11, $12, $14, $15) h
    {_HYDRATE}
""")

# Ranked modes (lexical, semantic, hybrid): each arm's best RANKED_DEPTH hits created at or before the
# first page's time ($15, `as_of`: later pages rank the same set, so paging is exactly-once while objects
# are added), fused by reciprocal rank (hybrid: the sum of 1/(RRF_K + rank) over the arms that found a
# hit; a single arm keeps its own score), cut at the keyset (score, created_at, id). The depth is fixed,
# so a hit's ranks, and its fused score, do not depend on the page. An arm not asked for is not run.
RANKED_DEPTH = 200
RRF_K = 60
LEXICAL_BOOST = 2

_RANKED = keyed(f"""
    SELECT coalesce(json_agg(json_build_object(
             'id', h.hit_id, 'type', h.hit_kind, 'summary', s.summary, 'score', h.hit_score,
             'position', h.hit_score::text, 'created_at', h.hit_created_at, 'snippet', s.snippet,
             'thread_id', s.thread_id, 'lexical_rank', h.lexical_rank, 'semantic_rank', h.semantic_rank,
             'lexical_score', h.lexical_score, 'semantic_score', h.semantic_score)
           ORDER BY h.hit_score DESC, h.hit_created_at DESC, h.hit_id DESC), '[]') AS hits
      FROM (
        WITH lexical AS (
            SELECT l.*, row_number() OVER (ORDER BY l.hit_score DESC, l.hit_created_at DESC, l.hit_id DESC) AS r
              FROM recall_lexical_hits($3, $4::text[], $5, $6, $7, $8, $9, $10, $15, {RANKED_DEPTH}, $20) l
             WHERE $16::text IN ('lexical', 'hybrid')),
        semantic AS (
            SELECT v.*, row_number() OVER (ORDER BY v.hit_score DESC, v.hit_created_at DESC, v.hit_id DESC) AS r
              FROM recall_semantic_hits($3, $17, $18, $19, $4::text[], $5, $6, $7, $8, $9, $10, $15, {RANKED_DEPTH}, $20) v
             WHERE $16::text IN ('semantic', 'hybrid') AND $17::text IS NOT NULL),
        fused AS (
            SELECT coalesce(l.hit_kind, v.hit_kind) AS hit_kind, coalesce(l.hit_id, v.hit_id) AS hit_id,
                   coalesce(l.hit_created_at, v.hit_created_at) AS hit_created_at,
                   l.r AS lexical_rank, v.r AS semantic_rank, l.hit_score AS lexical_score,
                   v.hit_score AS semantic_score,
                   CASE $16::text WHEN 'lexical' THEN l.hit_score WHEN 'semantic' THEN v.hit_score
                        ELSE round(coalesce((1 + {LEXICAL_BOOST} * least(l.hit_score, 1)) / ({RRF_K} + l.r), 0)
                                   + coalesce(1.0 / ({RRF_K} + v.r), 0), 9)
                   END AS hit_score
              FROM lexical l FULL JOIN semantic v ON v.hit_id = l.hit_id)
        SELECT * FROM fused
         WHERE $11::numeric IS NULL OR (hit_score, hit_created_at, hit_id) < ($11, $12, $13)
         ORDER BY hit_score DESC, hit_created_at DESC, hit_id DESC LIMIT $14
      ) h
      {_HYDRATE}
""")


_search_rows = msgspec.json.Decoder(list[SearchRow])


async def search(conn: Conn, cred: Credential, text: str, kinds: list[str], status: str | None, labels: Labels,
                 since: datetime | None, until: datetime | None, after: tuple[Decimal, datetime, str] | None,
                 limit: int, namespace: str | None = None) -> tuple[str, list[SearchRow]]:
    """The key's tenant, and its live objects matching `text`, best first then newest (keyset on
    (score, created_at, id), the score exact as a decimal string); `namespace`: memories in it or under it."""
    tenant, row = await tenancy.fetch(
        conn, cred, _SEARCH, text, kinds, labels.app_id, labels.agent_id, labels.run_id, since, until,
        after[0] if after else None, after[1] if after else None, after[2] if after else None,
        status, limit, namespace,
    )
    assert row is not None  # an aggregate: always one row
    return tenant, _search_rows.decode(row["hits"])


async def search_ranked(conn: Conn, cred: Credential, mode: str, text: str, vector: str | None, model: str | None,
                        dims: int | None, kinds: list[str], status: str | None, labels: Labels,
                        since: datetime | None, until: datetime | None, as_of: datetime,
                        after: tuple[Decimal, datetime, str] | None, limit: int,
                        namespace: str | None = None) -> tuple[str, list[SearchRow]]:
    """The key's tenant, and the page of a lexical, semantic or hybrid search after `after` (see _RANKED).
    `vector`: the question's vector in pgvector's text form, made by `model` (None: no semantic arm)."""
    tenant, row = await tenancy.fetch(
        conn, cred, _RANKED, text, kinds, status, labels.app_id, labels.agent_id, labels.run_id, since, until,
        after[0] if after else None, after[1] if after else None, after[2] if after else None, limit,
        as_of, mode, vector, model, dims, namespace,
    )
    assert row is not None  # an aggregate: always one row
    return tenant, _search_rows.decode(row["hits"])


# Backlinks: per kind of the linked-to object, the relations that can point at it. Each branch walks an
# index on (tenant_id, <link column>, <linking id>) in ID order from the cursor's position and stops
# after a page (no sort of every link: a trigger cited 10,000 times costs what one cited 50 times does);
# the page is keyset on (relation, id), both immutable, so paging is exactly-once while links are
# added. Linking objects that are gone are left out.


def _after(relation: str, column: str) -> str:
    """Only rows past the cursor ($4 relation, $5 id): none if it is past this relation, else IDs above $5."""
    return (f"coalesce($4::text <= '{relation}', true) "
            f"AND {column} > (CASE WHEN $4::text = '{relation}' THEN $5::text ELSE '' END)")


def _branch(relation: str, kind: str, linking: str, select_from: str, where: str) -> str:
    """One relation's links: the linking objects `x` (joined on x.id = linking, or read directly), past the
    cursor. The bound on x.id as well lets a merge join start both sides at the cursor."""
    bounds = _after(relation, linking)
    if linking != "x.id":
        bounds += f" AND {_after(relation, 'x.id')}"
    return (f"(SELECT DISTINCT '{relation}'::text AS relation, {linking} AS id, '{kind}'::text AS kind, "
            f"x.summary FROM {select_from} WHERE {where} AND {bounds} "
            f"AND NOT recall_is_gone(x.deleted_at, x.expires_at) ORDER BY 2 LIMIT $6)")


_BACKLINK_BRANCHES = {
    "cites": [_branch("cites", "report", "rr.report_id",
                      "report_refs rr JOIN reports x ON x.tenant_id = auth.tenant AND x.id = rr.report_id",
                      "rr.tenant_id = auth.tenant AND rr.trigger_id = o.id")],
    "neighbour": [_branch("neighbour", "trigger", "nb.trigger_id",
                          "trigger_neighbours nb JOIN triggers x ON x.tenant_id = auth.tenant AND x.id = nb.trigger_id",
                          "nb.tenant_id = auth.tenant AND nb.neighbour_id = o.id")],
    "event": [_branch("event", "thread", "e.thread_id",
                      "thread_events e JOIN threads x ON x.tenant_id = auth.tenant AND x.id = e.thread_id",
                      "e.tenant_id = auth.tenant AND e.ref = o.id")],
    "owner": [_branch("owner", "thread", "ow.thread_id",
                      "thread_owners ow JOIN threads x ON x.tenant_id = auth.tenant AND x.id = ow.thread_id",
                      "ow.tenant_id = auth.tenant AND ow.worker_id = o.id")],
    "thread": [_branch("thread", "trigger", "x.id", "triggers x", "x.tenant_id = auth.tenant AND x.thread_id = o.id"),
               _branch("thread", "report", "x.id", "reports x", "x.tenant_id = auth.tenant AND x.thread_id = o.id")],
    "worker": [_branch("worker", "report", "x.id", "reports x", "x.tenant_id = auth.tenant AND x.worker_id = o.id")],
    # a memory's sources: only current versions (a superseded one is history, not a link to follow)
    "source": [_branch("source", "memory", "ms.memory_id",
                       "memory_sources ms JOIN memories x ON x.tenant_id = auth.tenant AND x.id = ms.memory_id",
                       "ms.tenant_id = auth.tenant AND ms.source_id = o.id AND x.current")],
}
BACKLINK_RELATIONS = {  # kind of the linked-to object -> the relations that can point at it
    "trigger": ["cites", "neighbour", "event", "source"],
    "thread": ["event", "thread", "source"],
    "worker": ["event", "owner", "worker", "source"],
    "report": ["event", "source"],
    "memory": ["event", "source"],
}
_BACKLINKS = {
    kind: keyed(f"""
        SELECT recall_is_gone(o.deleted_at, o.expires_at) AS gone,
          (SELECT coalesce(json_agg(json_build_object('relation', b.relation, 'id', b.id, 'type', b.kind,
                                                      'summary', b.summary) ORDER BY b.relation, b.id), '[]')
             FROM (SELECT * FROM ({' UNION ALL '.join(b for r in relations for b in _BACKLINK_BRANCHES[r])}) u
                    ORDER BY u.relation, u.id LIMIT $6) b) AS links
        FROM {ids.PLURAL[kind]} o WHERE o.tenant_id = auth.tenant AND o.id = $3
    """)
    for kind, relations in BACKLINK_RELATIONS.items()
}


_backlink_rows = msgspec.json.Decoder(list[BacklinkRow])


async def backlinks(conn: Conn, cred: Credential, kind: str, object_id: str, after: tuple[str, str] | None,
                    limit: int) -> tuple[str, State, list[BacklinkRow]]:
    """The key's tenant, the object's state, and the live objects linking to it in (relation, id) order."""
    tenant, row = await tenancy.fetch(conn, cred, _BACKLINKS[kind], object_id,
                                      after[0] if after else None, after[1] if after else None, limit)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _backlink_rows.decode(row["links"])
