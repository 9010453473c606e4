"""The lens: full-text search and backlinks."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import msgspec

from recall_server import ids, rerank
from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn, under
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
# hit; a single arm keeps its own score). With the rerank stage ($22, recall_server/rerank.py) the fused
# best rerank.DEPTH, the semantic arm's best rerank.SEMANTIC_DEPTH and the objects the question names by ID
# ($21) are scored again from their cosine
# (the semantic arm's, or their stored vector's: recall_cosines) and their share of the question's words
# (the lexical arm's score), with the embedder's curves ($23), and only those at or above the floor ($24)
# are hits; a first page with none returns the rerank.NEAREST best, marked `near`. Cut at the keyset
# (score, created_at, id). The depths are fixed, so a hit's score does not depend on the page. An arm not
# asked for is not run.
RANKED_DEPTH = 200
RRF_K = 60
LEXICAL_BOOST = 2

_SIGMOID = "1 / (1 + exp(-({x} - ($23::float8[])[{c}]) / ($23::float8[])[{w}]))"
_RERANKED = (f"round(greatest(coalesce({_SIGMOID.format(x='c.cosine::float8', c=1, w=2)}, 0), "
             f"{_SIGMOID.format(x='coalesce(c.lexical_score, 0)::float8', c=3, w=4)})::numeric, 6)")
_ORDER = "hit_score DESC, hit_created_at DESC, hit_id DESC"

_RANKED = keyed(f"""
    SELECT coalesce(json_agg(json_build_object(
             'id', h.hit_id, 'type', h.hit_kind, 'summary', s.summary, 'score', h.hit_score,
             'position', h.hit_score::text, 'created_at', h.hit_created_at, 'snippet', s.snippet,
             'thread_id', s.thread_id, 'lexical_rank', h.lexical_rank, 'semantic_rank', h.semantic_rank,
             'lexical_score', h.lexical_score, 'semantic_score', h.semantic_score, 'fused_rank', h.fused_rank,
             'fused_score', h.fused_score, 'cosine', h.cosine, 'named', h.named, 'near', h.near)
           ORDER BY h.near, h.{_ORDER.replace(", hit_", ", h.hit_")}), '[]') AS hits
      FROM (
        WITH lexical AS (
            SELECT l.*, row_number() OVER (ORDER BY l.{_ORDER.replace(", hit_", ", l.hit_")}) AS r
              FROM recall_lexical_hits($3, $4::text[], $5, $6, $7, $8, $9, $10, $15, {RANKED_DEPTH}, $20) l
             WHERE $16::text IN ('lexical', 'hybrid')),
        semantic AS (
            SELECT v.*, row_number() OVER (ORDER BY v.{_ORDER.replace(", hit_", ", v.hit_")}) AS r
              FROM recall_semantic_hits($3, $17, $18, $19, $4::text[], $5, $6, $7, $8, $9, $10, $15, {RANKED_DEPTH}, $20) v
             WHERE $16::text IN ('semantic', 'hybrid') AND $17::text IS NOT NULL),
        named AS (
            SELECT n.* FROM recall_named_hits($21::text[], $4::text[], $5, $6, $7, $8, $9, $10, $15, $20) n WHERE $22),
        fused AS (
            SELECT coalesce(l.hit_kind, v.hit_kind) AS hit_kind, coalesce(l.hit_id, v.hit_id) AS hit_id,
                   coalesce(l.hit_created_at, v.hit_created_at) AS hit_created_at,
                   l.r AS lexical_rank, v.r AS semantic_rank, l.hit_score AS lexical_score,
                   v.hit_score AS semantic_score,
                   CASE $16::text WHEN 'lexical' THEN l.hit_score WHEN 'semantic' THEN v.hit_score
                        ELSE round(coalesce((1 + {LEXICAL_BOOST} * least(l.hit_score, 1)) / ({RRF_K} + l.r), 0)
                                   + coalesce(1.0 / ({RRF_K} + v.r), 0), 9)
                   END AS fused_score
              FROM lexical l FULL JOIN semantic v ON v.hit_id = l.hit_id),
        ranked AS (
            SELECT f.*, row_number() OVER (ORDER BY f.fused_score DESC, f.hit_created_at DESC, f.hit_id DESC) AS fused_rank
              FROM fused f),
        candidates AS (
            SELECT r.*, n.hit_id IS NOT NULL AS named FROM ranked r LEFT JOIN named n ON n.hit_id = r.hit_id
             WHERE NOT $22 OR r.fused_rank <= {rerank.DEPTH} OR r.semantic_rank <= {rerank.SEMANTIC_DEPTH}
                OR n.hit_id IS NOT NULL
            UNION ALL
            SELECT n.hit_kind, n.hit_id, n.hit_created_at, NULL, NULL, NULL, NULL, NULL, NULL, true FROM named n
             WHERE NOT EXISTS (SELECT 1 FROM fused f WHERE f.hit_id = n.hit_id)),
        cosines AS (
            SELECT * FROM recall_cosines(CASE WHEN $22 THEN $17::text END, $18,
                                         ARRAY(SELECT c.hit_id FROM candidates c WHERE c.semantic_score IS NULL))),
        scored AS MATERIALIZED (
            SELECT c.*, CASE WHEN NOT $22 THEN c.fused_score WHEN c.named THEN 1 ELSE {_RERANKED} END AS hit_score
              FROM (SELECT c.*, coalesce(c.semantic_score, x.cosine) AS cosine
                      FROM candidates c LEFT JOIN cosines x ON x.hit_id = c.hit_id) c)
        (SELECT s.*, false AS near FROM scored s
          WHERE (NOT $22 OR s.hit_score >= $24::numeric)
            AND ($11::numeric IS NULL OR (s.hit_score, s.hit_created_at, s.hit_id) < ($11, $12, $13))
          ORDER BY s.{_ORDER.replace(", hit_", ", s.hit_")} LIMIT $14)
        UNION ALL
        (SELECT s.*, true FROM scored s
          WHERE $22 AND $11::numeric IS NULL AND NOT EXISTS (SELECT 1 FROM scored x WHERE x.hit_score >= $24::numeric)
          ORDER BY s.{_ORDER.replace(", hit_", ", s.hit_")} LIMIT {rerank.NEAREST})
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
                        namespace: str | None = None, floor: Decimal | None = None) -> tuple[str, list[SearchRow]]:
    """The key's tenant, and the page of a lexical, semantic or hybrid search after `after` (see _RANKED).
    `vector`: the question's vector in pgvector's text form, made by `model` (None: no semantic arm).
    `floor`: rerank, and keep the hits scoring at least this (None: the fused ranking as it is)."""
    curves = rerank.calibration(model if vector else None)
    tenant, row = await tenancy.fetch(
        conn, cred, _RANKED, text, kinds, status, labels.app_id, labels.agent_id, labels.run_id, since, until,
        after[0] if after else None, after[1] if after else None, after[2] if after else None, limit,
        as_of, mode, vector, model, dims, namespace, ids.mentioned(text) if floor is not None else [],
        floor is not None, list(curves), floor,
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


_SOURCES_ERASED = keyed("""
    SELECT json_object_agg(x.memory_id, x.erased)::text AS flagged FROM (
      SELECT l.memory_id, json_agg(l.source_id ORDER BY l.source_id) AS erased FROM memory_lineage l
       WHERE l.tenant_id = auth.tenant AND l.memory_id = ANY ($3::text[]) AND l.policy = 'flag'
       GROUP BY l.memory_id) x
""")
_flagged = msgspec.json.Decoder(dict[str, list[str]])


async def sources_erased(conn: Conn, cred: Credential, memory_ids: list[str]) -> dict[str, list[str]]:
    """The erased sources each of these memory versions is flagged with (the tenant's lineage policy `flag`)."""
    _, row = await tenancy.fetch(conn, cred, _SOURCES_ERASED, memory_ids)
    return {} if row is None else _flagged.decode(row["flagged"])


class AsOfHit(msgspec.Struct, frozen=True):
    id: str
    summary: str
    created_at: datetime
    score: float


_as_of_hits = msgspec.json.Decoder(list[AsOfHit])

# The memory versions current at $4 (as db/queries/memories.py lists them as of a time) whose text, as the
# generated search column indexes it, has every word of $3, newest first from the cursor ($11, $12) on. Only
# current versions are indexed (a superseded one's column is empty), so the text is read from each version.
_AS_OF = keyed(f"""
    SELECT coalesce(json_agg(x ORDER BY x.created_at DESC, x.id DESC), '[]') AS hits FROM (
      SELECT m.id, m.summary, m.created_at, ts_rank(v.doc, v.words)::float8 AS score
        FROM memories m, LATERAL (SELECT
               setweight(to_tsvector('simple'::regconfig, m.summary || ' ' || m.key), 'A')
               || setweight(to_tsvector('simple'::regconfig, replace(m.namespace, '/', ' ') || ' '
                                        || coalesce(m.app_id, '') || ' ' || coalesce(m.agent_id, '') || ' '
                                        || coalesce(m.run_id, '')), 'B')
               || setweight(to_tsvector('simple'::regconfig, recall_search_text(m.content_type, m.value, 65536)), 'C')
               AS doc, plainto_tsquery('simple'::regconfig, $3) AS words) v
       WHERE m.tenant_id = auth.tenant AND m.created_at <= $4 AND m.deleted_at IS NULL
         AND (m.expires_at IS NULL OR m.expires_at > $4)
         AND NOT EXISTS (SELECT 1 FROM memories n WHERE n.tenant_id = auth.tenant AND n.pair = m.pair
                            AND n.created_at <= $4 AND (n.created_at, n.version) > (m.created_at, m.version))
         AND ($5::text IS NULL OR ({under("m.namespace", "$5")}))
         AND ($6::text IS NULL OR m.app_id = $6) AND ($7::text IS NULL OR m.agent_id = $7)
         AND ($8::text IS NULL OR m.run_id = $8)
         AND ($9::timestamptz IS NULL OR m.created_at >= $9) AND ($10::timestamptz IS NULL OR m.created_at < $10)
         AND ($11::timestamptz IS NULL OR (m.created_at, m.id) < ($11, $12))
         AND v.doc @@ v.words
       ORDER BY m.created_at DESC, m.id DESC LIMIT $13) x
""")


async def search_memories_as_of(conn: Conn, cred: Credential, text: str, as_of: datetime, namespace: str | None,
                                labels: Labels, since: datetime | None, until: datetime | None,
                                after: tuple[datetime, str] | None, limit: int) -> tuple[str, list[AsOfHit]]:
    """The key's tenant, and the memory versions current at `as_of` with every word of `text`, newest first."""
    tenant, row = await tenancy.fetch(conn, cred, _AS_OF, text, as_of, namespace, labels.app_id, labels.agent_id,
                                      labels.run_id, since, until, *(after or (None, None)), limit)
    return tenant, [] if row is None else _as_of_hits.decode(row["hits"])
