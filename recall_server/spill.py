"""Inline-vs-spill rendering of objects under a byte budget (pure).

Every view is built the same way: the fixed core first (its size is bounded by the field
limits in recall_server/models), then linked objects, most useful first, each with its summary while
it fits and as a bare ID after that, then recent events or reports, then content inline or
as a spill pointer with a preview. Sizes are counted in encoded JSON bytes, so the response
body never exceeds the budget.
"""

from __future__ import annotations

from typing import Any

import msgspec

from recall_server.models import (
    Link,
    MemoryView,
    ReportView,
    Spill,
    Spilled,
    ThreadView,
    TriggerView,
    WorkerView,
)
from recall_server.rows import MemoryRow, ReportRow, ThreadRow, TriggerRow, WorkerRow

MIN_BUDGET = 4096
DEFAULT_BUDGET = 4096
MAX_BUDGET = 1_048_576
PREVIEW_BYTES = 512  # the longest preview a spill pointer carries
RECENT = 10  # newest events (or a worker's reports and threads) a view shows at the default budget

_encode = msgspec.json.encode


def is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


class _Room:
    """Bytes still free in a view whose current encoding is `used` bytes long."""

    def __init__(self, budget: int, view: msgspec.Struct) -> None:
        self.left = budget - len(_encode(view))

    def take(self, cost: int) -> bool:
        if cost > self.left:
            return False
        self.left -= cost
        return True


def _all_fit(items: list[Any], room: _Room) -> bool:
    """Take the room for all of the items if they fit: their list's encoding but its brackets, which the
    view's empty list already counts. What taking them one by one costs, in one encoding."""
    return room.take(len(_encode(items)) - 2)


def _links(items: list[Link], room: _Room) -> list[Link]:
    """Every linked ID, always; then summaries, in order, while they fit. No neighbour is ever lost.

    The field limits in recall_server/models make the bare IDs fit even the smallest budget.
    """
    if _all_fit(items, room):
        return list(items)
    bare = [Link(id=item.id) for item in items]
    room.left -= sum(len(_encode(b)) + 1 for b in bare) - 1  # a comma between each two
    return [item if room.take(len(_encode(item)) - len(_encode(b))) else b for item, b in zip(items, bare)]


def recent_limit(budget: int) -> int:
    """How many newest events, reports or threads a view shows: RECENT per default budget, at most 500.

    A fixed count, not "as many as fit": a view's size then does not depend on how long the log
    behind it is, and the rest is one page away (links.events).
    """
    return min(500, max(RECENT, budget * RECENT // DEFAULT_BUDGET))


def _recent(items: list[Any], room: _Room) -> list[Any]:
    """Of the newest items (given newest first, fetched up to recent_limit), those that fit, in given order."""
    if _all_fit(items, room):
        return list(items)
    out = []
    for item in items:
        if not room.take(len(_encode(item)) + bool(out)):  # and a comma after the one before
            break
        out.append(item)
    return out


def _preview(head: bytes, limit: int) -> str:
    return head[:limit].decode("utf-8", errors="ignore")


SKIPPED = "\n…[{:,} bytes skipped]…\n"


def _head_and_tail(head: bytes, tail: bytes, size: int, limit: int) -> str:
    """A text preview of at most `limit` bytes: the first and the last bytes (logs put failures last),
    marked where it skips; just the head when all of it fits or there is no room for both ends."""
    mark = len(SKIPPED.format(size).encode())  # the longest the mark can be
    room = limit - mark
    if not tail or size <= limit or room < 64:
        return _preview(head, limit)
    first = head[:room - room // 2].decode("utf-8", errors="ignore")
    last = tail[len(tail) - room // 2:].decode("utf-8", errors="ignore")
    return first + SKIPPED.format(size - len(first.encode()) - len(last.encode())) + last


def _spill(href: str, content_type: str, size: int, head: bytes, limit: int, tail: bytes = b"") -> Spill:
    hint = f"GET {href} ({max(1, round(size / 1024))} KB, truncated)"  # independent of the preview: see _spill_floor
    preview = _head_and_tail(head, tail, size, limit) if content_type.startswith("text/") else _preview(head, limit)
    return Spill(href=href, bytes=size, content_type=content_type, preview=preview, hint=hint)


def _spill_floor(field: str, href: str, content_type: str, size: int) -> int:
    """The bytes a spill pointer with an empty preview needs: reserved before links are filled."""
    return len(',"spilled":{"":}') + len(field) + len(_encode(_spill(href, content_type, size, b"", 0)))


def _content(field: str, href: str, content_type: str, size: int, head: bytes, room: _Room,
             tail: bytes = b"") -> tuple[Any, Any]:
    """Inline the content if all of it fits, else a spill pointer with the longest preview that fits."""
    key_cost = len(field) + 4  # ,"field":
    if len(head) == size and key_cost + size <= room.left:  # as JSON it is at least `size` bytes (escapes only add)
        inline: Any = msgspec.Raw(head) if is_json(content_type) else head.decode("utf-8")
        if room.take(key_cost + len(_encode(inline))):
            return inline, msgspec.UNSET
    wrapper_cost = len(',"spilled":{"":}') + len(field)
    limit = min(PREVIEW_BYTES, len(head))
    if not tail and len(head) == size:  # all of it was read: its end is the tail
        tail = head[-PREVIEW_BYTES:]
    while True:
        spill = _spill(href, content_type, size, head, limit, tail)
        cost = wrapper_cost + len(_encode(spill))
        if cost <= room.left or limit == 0:
            room.take(min(cost, room.left))
            return msgspec.UNSET, Spilled(**{field: spill})
        limit = max(0, limit - max(16, cost - room.left))


def _links_and_content(field: str, href: str, row: TriggerRow | ReportRow | MemoryRow, links: list[Link],
                       room: _Room) -> tuple[list[Link], Any, Any]:
    """Linked IDs first, keeping room for at least an empty spill pointer, then the content."""
    reserved = _spill_floor(field, href, row.content_type, row.size)
    room.left -= reserved
    kept = _links(links, room)
    room.left += reserved
    return (kept, *_content(field, href, row.content_type, row.size, row.head, room, row.tail))


def _labels(row: TriggerRow | ThreadRow | WorkerRow | ReportRow | MemoryRow) -> dict[str, str | None]:
    return {"app_id": row.app_id, "agent_id": row.agent_id, "run_id": row.run_id, "expires_at": row.expires_at}


def _placed(row: TriggerRow | ThreadRow | WorkerRow | ReportRow) -> dict[str, object]:
    """Its labels, and its namespace unless it is the tenant's root."""
    return {**_labels(row), "namespace": row.namespace.split("/") if row.namespace else None}


def trigger_view(row: TriggerRow, budget: int) -> TriggerView:
    href = f"/triggers/{row.id}/payload"
    links = {"self": f"/triggers/{row.id}", "payload": href, "backlinks": f"/ids/{row.id}/backlinks"}
    if row.thread_id:
        links["thread"] = f"/threads/{row.thread_id}"
    view = TriggerView(
        id=row.id, source=row.source, thread_id=row.thread_id, summary=row.summary,
        content_type=row.content_type, neighbours=[], occurred_at=row.occurred_at,
        created_at=row.created_at, links=links, **_placed(row),
    )
    view.neighbours, view.payload, view.spilled = _links_and_content(
        "payload", href, row, row.neighbours, _Room(budget, view))
    return view


def thread_view(row: ThreadRow, budget: int) -> ThreadView:
    view = ThreadView(
        id=row.id, title=row.title, summary=row.summary, status=row.status, owner_workers=[],
        events=[], events_total=row.last_seq, created_at=row.created_at, updated_at=row.updated_at,
        links={"self": f"/threads/{row.id}", "events": f"/threads/{row.id}/events",
               "backlinks": f"/ids/{row.id}/backlinks"}, **_placed(row),
    )
    if row.checkpoints:  # a LangGraph run kept under this ID: the hop into its state
        view.checkpoints, view.latest_checkpoint = row.checkpoints, row.latest_checkpoint
        view.links["checkpoint"] = f"/checkpoints/tuple?thread_id={row.id}"
        view.links["checkpoints"] = f"/checkpoints?thread_id={row.id}"
    room = _Room(budget, view)
    view.owner_workers = _links(row.owners, room)
    view.events = list(reversed(_recent(row.events, room)))
    return view


def worker_view(row: WorkerRow, budget: int) -> WorkerView:
    view = WorkerView(
        id=row.id, name=row.name, summary=row.summary, threads=[], threads_total=row.threads_total,
        reports=[], reports_total=row.reports_total, created_at=row.created_at,
        links={
            "self": f"/workers/{row.id}",
            "reports": f"/workers/{row.id}/reports",
            "threads": f"/threads?owner={row.id}",
            "backlinks": f"/ids/{row.id}/backlinks",
        },
        **_placed(row),
    )
    room = _Room(budget, view)
    view.reports = _recent(row.reports, room)
    view.threads = _recent(row.threads, room)
    return view


def report_view(row: ReportRow, budget: int) -> ReportView:
    href = f"/reports/{row.id}/body"
    view = ReportView(
        id=row.id, worker_id=row.worker_id, thread_id=row.thread_id, summary=row.summary,
        content_type=row.content_type, refs=[], created_at=row.created_at,
        links={
            "self": f"/reports/{row.id}", "body": href,
            "worker": f"/workers/{row.worker_id}", "thread": f"/threads/{row.thread_id}",
            "backlinks": f"/ids/{row.id}/backlinks",
        },
        **_placed(row),
    )
    view.refs, view.body, view.spilled = _links_and_content("body", href, row, row.refs, _Room(budget, view))
    return view


def memory_view(row: MemoryRow, budget: int) -> MemoryView:
    """A version of a memory: its fields; its sources, then the versions before and after it, as IDs always
    and with summaries while they fit; then its value inline or spilled to links.value with a preview."""
    href = f"/memories/{row.id}/value"
    chain = [link for link in (row.supersedes, row.superseded_by) if link]
    view = MemoryView(
        id=row.id, namespace=row.namespace.split("/"), key=row.key, kind=row.kind,
        status="current" if row.current else "superseded", version=row.version, summary=row.summary,
        content_type=row.content_type, tags=row.tags, confirmed=row.confirmed, sources=[],
        created_at=row.created_at, chain_created_at=row.chain_created_at, source_erased=row.source_erased,
        links={"self": f"/memories/{row.id}", "value": href, "versions": f"/memories/{row.id}/versions",
               "backlinks": f"/ids/{row.id}/backlinks"},
        supersedes=None if row.supersedes is None else Link(id=row.supersedes.id),
        superseded_by=None if row.superseded_by is None else Link(id=row.superseded_by.id),
        **_labels(row),
    )
    room = _Room(budget, view)
    room.left += sum(len(_encode(Link(id=link.id))) for link in chain)  # counted again by _links
    linked, view.value, view.spilled = _links_and_content("value", href, row, [*row.sources, *chain], room)
    view.sources = linked[:len(row.sources)]
    names = [name for name, link in (("supersedes", row.supersedes), ("superseded_by", row.superseded_by)) if link]
    for name, link in zip(names, linked[len(row.sources):]):
        setattr(view, name, link)
    return view
