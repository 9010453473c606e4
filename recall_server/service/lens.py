"""The lens: finding and navigating the graph. Search (full text), backlinks (what links here), grep (lines of
a payload or body).
Search runs in one of four modes; docs/search.md says what each does."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from decimal import Decimal

import anyio

from recall_server import grep, ids, rerank, spill
from recall_server.auth import Credential
from recall_server.cursor import CursorCodec
from recall_server.db import queries as q
from recall_server.db.pool import Database
from recall_server.errors import BadRequest, Unavailable, UnsupportedMediaType, require_live
from recall_server.models import Backlink, BacklinkPage, GrepResult, SearchExplain, SearchHit, SearchPage
from recall_server.rows import Labels, SearchRow
from recall_server.service.indexer import Indexer
from recall_server.service.inputs import bound
from recall_server.service.views import Views
from recall_server.text import one_line


SEARCHABLE = (*ids.PLURAL, "message")  # what search finds: every kind of object, and messages
NO_CLOSE_MATCH = "no close match"  # a reranked first page without a hit at or above the floor


class Lens:
    """Search, backlinks and grep, for one store; grep reads content through `views`, search embeds questions
    through `indexer`."""

    def __init__(self, db: Database, cursors: CursorCodec, views: Views, indexer: Indexer) -> None:
        self.db = db
        self.cursors = cursors
        self.views = views
        self.indexer = indexer

    async def search(self, cred: Credential, text: str, mode: str | None, explain: bool, kinds: list[str] | None,
                     status: str | None, labels: Labels, since: str | None, until: str | None, cursor: str | None,
                     limit: int, namespace: str | None = None, rerank_on: bool = True,
                     min_score: float | None = None, as_of: str | None = None) -> SearchPage:
        """Live objects matching `text`, best first: exact (all the words, every match, keyset by ts_rank) or
        ranked (lexical, semantic, or both fused, then reranked unless `rerank_on` is false: only hits scoring
        `min_score` or more), see db/queries/search.py."""
        if not text.strip():
            raise BadRequest("q must contain something to search for.", field="q")
        wanted = sorted(set(kinds or SEARCHABLE))
        if status is not None:  # only threads have a status
            wanted = [k for k in wanted if k == "thread"]
        if namespace is not None:  # only memories have one
            wanted = [k for k in wanted if k == "memory"]
        start, end = bound("since", since), bound("until", until)
        if as_of is not None:
            return await self._as_of(cred, text, kinds, status, labels, start, end, cursor, limit, namespace,
                                     bound("as_of", as_of))
        ran, note = self._mode(mode)
        if min_score is not None and (ran == "exact" or not rerank_on):
            raise BadRequest("min_score is a floor on the rerank stage's relevance: it needs a ranked mode "
                             "(hybrid, lexical or semantic) with rerank=true.", field="min_score")
        if ran == "exact":
            return await self._exact(cred, text, wanted, status, labels, start, end, cursor, limit, namespace)
        floor = Decimal(repr(rerank.FLOOR if min_score is None else min_score)) if rerank_on else None
        pager = self.cursors.pager(cursor, tuple[Decimal, datetime, str, datetime], "search", ran, text,
                                   ",".join(wanted), status, labels.key(), start, end, namespace,
                                   *([f"rerank {floor}"] if floor is not None else []))
        after = _scored(pager.after)
        as_of = after[3] if after else datetime.now(UTC)
        vector = await self.indexer.question(text) if ran != "lexical" else None
        if ran != "lexical" and vector is None:  # the embedder failed on this question
            if ran == "semantic":
                raise Unavailable("The embedder could not embed this question now; try again, or use mode=lexical.")
            ran, note = "lexical", "the embedder could not embed this question: this page is lexical only"
        embedder = self.indexer.embedder
        async with self.db.connection() as conn:
            tenant, rows = await q.search_ranked(
                conn, cred, ran, text, vector, embedder.model if embedder else None, embedder.dims if embedder else None,
                wanted, status, labels, start, end, as_of, after[:3] if after else None, limit + 1, namespace, floor)
        hits = [h for h in rows if not h.near]
        nearest = [_hit(h, explain) for h in rows if h.near] if floor is not None and not hits and not after else None
        shown, next_cursor, has_more = pager.page(tenant, hits, limit,
                                                  lambda h: [Decimal(h.position), h.created_at, h.id, as_of])
        if nearest is not None:
            note = NO_CLOSE_MATCH if note is None else f"{NO_CLOSE_MATCH}; {note}"
        return SearchPage(data=await self._flagged(cred, [_hit(h, explain) for h in shown]), next_cursor=next_cursor, has_more=has_more,
                          mode=ran, note=note, min_score=float(floor) if floor is not None else None,  # type: ignore[arg-type]
                          nearest=nearest)

    def _mode(self, asked: str | None) -> tuple[str, str | None]:
        """The mode that runs, and a note when it is not the one asked for (or the default)."""
        if asked in ("exact", "lexical"):
            return asked, None
        if self.indexer.semantic:
            return asked or "hybrid", None
        if asked == "semantic":
            raise BadRequest(f"Search by meaning is unavailable: {self.indexer.note or 'no embedder'}. "
                             "Use mode=lexical or mode=hybrid.", field="mode")
        return "lexical", self.indexer.note or "search by meaning is unavailable: lexical only"

    async def _exact(self, cred: Credential, text: str, wanted: list[str], status: str | None, labels: Labels,
                     start: datetime | None, end: datetime | None, cursor: str | None, limit: int,
                     namespace: str | None) -> SearchPage:
        pager = self.cursors.pager(cursor, tuple[Decimal, datetime, str], "search", text, ",".join(wanted), status,
                                   labels.key(), start, end, *([namespace] if namespace else []))
        after = _scored(pager.after)
        async with self.db.connection() as conn:
            tenant, hits = await q.search(conn, cred, text, wanted, status, labels, start, end, after, limit + 1,
                                          namespace)
        shown, next_cursor, has_more = pager.page(tenant, hits, limit,
                                                  lambda h: [Decimal(h.position), h.created_at, h.id])
        return SearchPage(data=await self._flagged(cred, [_hit(h, False) for h in shown]), next_cursor=next_cursor,
                          has_more=has_more, mode="exact")

    async def _as_of(self, cred: Credential, text: str, kinds: list[str] | None, status: str | None, labels: Labels,
                     start: datetime | None, end: datetime | None, cursor: str | None, limit: int,
                     namespace: str | None, at: datetime | None) -> SearchPage:
        """The memory versions current at `at` with all the words of `text`, newest first. Only current versions
        are indexed, so this reads the versions (in `namespace`, when given) and matches their text as it reads
        them: the words arm alone, whatever the mode (no vectors are kept of superseded versions)."""
        assert at is not None
        if set(kinds or ["memory"]) != {"memory"} or status is not None:
            raise BadRequest("as_of searches memories only (type=memory, no status).", field="as_of")
        pager = self.cursors.pager(cursor, tuple[datetime, str], "search_as_of", text, labels.key(), start, end,
                                   namespace, at)
        async with self.db.connection() as conn:
            tenant, rows = await q.search_memories_as_of(conn, cred, text, at, namespace, labels, start, end,
                                                         pager.after, limit + 1)
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, lambda h: [h.created_at, h.id])
        hits = [SearchHit(id=h.id, type="memory", summary=h.summary, href=ids.href(h.id), score=h.score,
                          snippet=one_line(h.summary, 300)) for h in shown]
        return SearchPage(data=await self._flagged(cred, hits), next_cursor=next_cursor, has_more=has_more,
                          mode="exact", note="as_of: every word, over the memory versions current then, newest first")

    async def _flagged(self, cred: Credential, hits: list[SearchHit]) -> list[SearchHit]:
        """The hits, each memory with the erased sources its tenant's lineage policy flagged it with: one more
        statement, for a page with memories."""
        memories = [h.id for h in hits if h.type == "memory"]
        if memories:
            async with self.db.connection() as conn:
                flagged = await q.sources_erased(conn, cred, memories)
            for h in hits:
                h.source_erased = flagged.get(h.id, [])
        return hits

    async def backlinks(self, cred: Credential, object_id: str, cursor: str | None, limit: int) -> BacklinkPage:
        """Every live object that links to this one, with the relation, in (relation, id) order."""
        kind = ids.kind_of(object_id)
        if kind is None:
            await self.views.authenticated_miss(cred, "recall", object_id)
        assert kind is not None
        pager = self.cursors.pager(cursor, tuple[str, str], "backlinks", object_id)
        async with self.db.connection() as conn:
            tenant, state, rows = await q.backlinks(conn, cred, kind, object_id, pager.after, limit + 1)
        shown, next_cursor, has_more = pager.page(tenant, rows, limit, lambda r: [r.relation, r.id])
        require_live(state, object_id, kind)
        data = [Backlink(id=r.id, type=r.type, relation=r.relation, summary=r.summary,  # type: ignore[arg-type]
                         href=ids.href(r.id)) for r in shown]
        return BacklinkPage(data=data, next_cursor=next_cursor, has_more=has_more)

    async def grep(self, cred: Credential, kind: str, object_id: str, pattern: str, regex: bool, context: int,
                   max_matches: int) -> GrepResult:
        """Matching lines of a payload or body, with line numbers, byte offsets and a Range for each."""
        found = grep.matcher(pattern, regex)  # a bad pattern is a 400 before anything is read
        content = await self.views.content(cred, kind, object_id)
        data = content.data or b""
        if not (content.content_type.startswith("text/") or spill.is_json(content.content_type)):
            raise UnsupportedMediaType(
                f"{object_id}'s content is {content.content_type}; grep reads text/* and JSON content only. "
                "Read it with a Range request instead.", id=object_id)
        if len(data) > 64 * 1024:  # bounded, but long enough to keep off the event loop
            result = await anyio.to_thread.run_sync(grep.grep, data, found, context, max_matches)
        else:
            result = grep.grep(data, found, context, max_matches)
        href = f"/triggers/{object_id}/payload" if kind == "trigger" else f"/reports/{object_id}/body"
        return GrepResult(id=object_id, content_type=content.content_type, bytes=len(data), scanned=result.scanned,
                          matches=result.matches, truncated=result.truncated, href=href)


def _hit(h: SearchRow, explain: bool) -> SearchHit:
    """A row as the API shows it; `explain`: with how each stage ranked it."""
    arms = [arm for arm, found in (("lexical", h.lexical_rank), ("semantic", h.semantic_rank), ("id", h.named or None))
            if found is not None]
    why = SearchExplain(arms=arms, lexical_rank=h.lexical_rank, lexical_score=h.lexical_score,  # type: ignore[arg-type]
                        semantic_rank=h.semantic_rank, semantic_score=h.semantic_score, fused_rank=h.fused_rank,
                        fused_score=h.fused_score, cosine=h.cosine) if explain else None
    if h.type == "message":  # `<thread ID>/<seq>` (schema.sql, recall_message_ref): the thread, and where in it
        thread, _, seq = h.id.rpartition("/")
        return SearchHit(id=thread, type="message", summary=h.summary, score=h.score, seq=int(seq),
                         href=f"/threads/{thread}/messages/{seq}/content", thread_id=thread,
                         snippet=one_line(h.snippet or h.summary, 300), explain=why)
    return SearchHit(id=h.id, type=h.type, summary=h.summary, href=ids.href(h.id), score=h.score,  # type: ignore[arg-type]
                     snippet=one_line(h.snippet or h.summary, 300), thread_id=h.thread_id, explain=why)


def _scored(after: Any) -> Any:
    """A search cursor's position, unless its score is one no page was ever signed at (then None: read from the
    start, and the pager's verify answers 400)."""
    if after is not None and not (after[0].is_finite() and 0 <= after[0] < 1_000_000):
        return None
    return after
