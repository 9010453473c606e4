"""Search, backlinks and grep: IDs to hop from."""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

from recall_server.models.common import AnyId, SourceId, ThreadId


class SearchHit(Struct, omit_defaults=True):
    """An object whose text matches the query: an ID to hop from."""

    id: AnyId  # a message's: its thread's ID (with `seq`)
    type: Literal["trigger", "thread", "worker", "report", "memory", "message"]
    summary: str
    href: str  # a message's: its content
    # ranked modes (rerank on, the default): relevance in [0, 1] (1: the question names this ID; the floor,
    # min_score, is 0.5 by default); rerank=false: the arm's own score (lexical: rare-term-weighted match,
    # semantic: cosine similarity, hybrid: reciprocal rank fusion); exact: ts_rank. Ties: newest, then ID.
    score: float
    snippet: str  # one line around the match, `**` marking the matched words (at most 300 characters)
    thread_id: ThreadId | None = None  # a trigger's, report's or message's thread: the next hop (omitted for the others)
    seq: int | None = None  # a message's seq in its thread's log
    source_erased: list[SourceId] = []  # a memory's erased sources, flagged by its tenant's lineage policy
    explain: SearchExplain | None = None  # with explain=true (ranked modes): which arm found it, and where


class SearchExplain(Struct, omit_defaults=True):
    """How a ranked search found a hit: each arm's 1-based rank and score (absent: not found by it), where the
    arms' fusion put it, and what the rerank stage scored it from."""

    arms: list[Literal["lexical", "semantic", "id"]]  # id: the question names this object's ID
    lexical_rank: int | None = None
    lexical_score: float | None = None  # the share of the question's words it has, weighted by rarity
    semantic_rank: int | None = None
    semantic_score: float | None = None  # cosine similarity of the question's vector and the object's
    fused_rank: int | None = None  # rank after the arms' fusion, before the rerank stage
    fused_score: float | None = None
    cosine: float | None = None  # rerank: the cosine it scored (the semantic arm's, or from the object's vector)


class SearchPage(Struct):
    data: list[SearchHit]
    next_cursor: str | None
    has_more: bool
    mode: Literal["hybrid", "lexical", "semantic", "exact"] = "exact"  # the mode that ran
    # why a mode asked for (or the default) ran with fewer arms (e.g. no embedder), or "no close match": no
    # hit scored min_score or more (then `nearest` holds the best candidates below it)
    note: str | None = None
    min_score: float | None = None  # ranked modes with rerank: the floor this page's hits are at or above
    nearest: list[SearchHit] | None = None  # with note "no close match": the best candidates, below min_score


class Backlink(Struct):
    """An object that links to the requested ID, and how (see README: relations)."""

    id: AnyId
    type: Literal["trigger", "thread", "worker", "report", "memory"]
    relation: Literal["cites", "neighbour", "event", "owner", "thread", "worker", "source"]
    summary: str
    href: str


class BacklinkPage(Struct):
    data: list[Backlink]
    next_cursor: str | None
    has_more: bool


class GrepLine(Struct, omit_defaults=True):
    number: int  # 1-based line number
    text: str  # at most grep.LINE_CHARS characters; `truncated` when cut
    truncated: bool = False


class GrepMatch(Struct):
    line: int  # 1-based line number of the match
    offset: int  # byte offset of the match in the content
    length: int  # bytes of the match
    range: str  # a Range header reading the matching line and its context lines (bytes=first-last)
    lines: list[GrepLine]  # the context lines before, the matching line, the context lines after


class GrepResult(Struct):
    id: AnyId
    content_type: str
    bytes: int  # the content's whole size
    scanned: int  # bytes scanned (the first grep.SCAN_BYTES at most)
    matches: list[GrepMatch]
    truncated: bool  # more matches exist than shown (max, or the response bound), or the scan stopped early
    href: str  # the content itself
