"""Conversations on threads: messages appended as events of the thread's log, replayed in order, retracted by
appending (never by rewriting the log), and their content served and grepped like a payload."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from recall_server import grep, spill
from recall_server.auth import Credential
from recall_server.cursor import CursorCodec, json_size
from recall_server.db import queries as q
from recall_server.db.pool import Database
from recall_server.errors import NotFound, Unprocessable, require_live
from recall_server.models import (
    MESSAGE_INLINE,
    AppendedMessages,
    AppendMessages,
    Extraction,
    GrepResult,
    Message,
    MessagePage,
    MessageSeq,
    NewMessage,
    Retraction,
    RetractMessages,
    Spill,
)
from recall_server.observability import CONTENT_CACHE
from recall_server.rows import Content, Outcome
from recall_server.service import idempotency
from recall_server.service.inputs import bound, json, stored_time
from recall_server.service.views import Views
from recall_server.service.writes import Writes
from recall_server.text import message_text, one_line

if TYPE_CHECKING:
    from recall_server.service.extraction import Extractions

_TEXT, _JSON = "text/plain", "application/json"


def preview(message: NewMessage) -> str:
    """The one line a message's event shows in the log and the thread's view: its role (and name) and the
    start of its text; for JSON content, the text of its parts, or the JSON itself."""
    who = message.role if message.name is None else f"{message.role} {message.name}"
    return one_line(f"{who}: {message_text(message.content)[:1000]}", 200)  # a 1 MB tool result: its start only


class Messages:
    """Appending, replaying and retracting a thread's messages, and their content, for one store."""

    def __init__(self, db: Database, cursors: CursorCodec, views: Views, writes: Writes,
                 extractions: Extractions) -> None:
        self.db = db
        self.cursors = cursors
        self.views = views
        self.writes = writes
        self.extractions = extractions

    async def append(self, cred: Credential, thread_id: str, req: AppendMessages,
                     idempotency_key: str | None, extract: str = "async") -> Outcome:
        """Append a batch in one transaction: consecutive seqs, in the order sent (other appends to the thread
        wait on its row lock); and, when the thread extracts, its extraction job in the same transaction.
        `extract=sync`: the job is run once the batch is committed, and the answer shows its outcome."""
        await self.views.authenticated_miss(cred, "thread", thread_id)
        rows = [_row(i, m) for i, m in enumerate(req.messages)]
        hold = self.extractions.hold(extract)
        outcome = None
        if idempotency_key is None:  # the plain case: one statement; a thread missing or gone is answered below
            async with self.db.connection() as conn:
                written, queued = await q.append_messages_keyed(conn, cred, thread_id, rows, hold)
            if written:
                outcome = _appended(thread_id, written, queued)

        if outcome is None:
            async def operation(conn: q.Conn, tenant: str) -> Outcome:
                await self.writes.locked_thread(conn, tenant, thread_id)
                written = await q.append_messages(conn, tenant, thread_id, rows)
                queued = await q.queue_extraction(conn, tenant, thread_id, cred.key_id, written[0][0], written[-1][0],
                                                  hold)
                return _appended(thread_id, written, queued)

            path = f"/threads/{thread_id}/messages"
            outcome = await self.writes.write(cred, idempotency_key, idempotency.fingerprint("POST", path, req),
                                              operation)
        if extract == "sync" and outcome.status == 201 and not outcome.replayed and outcome.body is not None:
            appended = _decode_appended(outcome.body)
            if appended.extraction is not None:
                done = await self.extractions.run_claimed(cred, thread_id, appended.extraction.from_seq)
                if done is not None:
                    appended.extraction = done
                    outcome = Outcome(status=201, body=json(appended), object_id=thread_id)
        return outcome

    async def replay(self, cred: Credential, thread_id: str, cursor: str | None, limit: int, role: str | None,
                   since: str | None, until: str | None, include_retracted: bool, order: str) -> MessagePage:
        """A page of the replay, oldest first (or newest first), each message once."""
        await self.views.authenticated_miss(cred, "thread", thread_id)
        start, end = bound("since", since), bound("until", until)
        newest_first = order == "desc"
        pager = self.cursors.pager(cursor, tuple[int], "messages", thread_id, role, start, end,
                                   include_retracted, order)
        position = pager.after[0] if pager.after else (2**62 if newest_first else 0)
        async with self.db.connection() as conn:
            tenant, state, rows = await q.list_messages(
                conn, cred, thread_id, position, newest_first, role, start, end, include_retracted, limit + 1,
                MESSAGE_INLINE, spill.PREVIEW_BYTES)
        # Oldest first, the last page's cursor follows the conversation as it grows (as the event log's does).
        shown, next_cursor, has_more = pager.page(tenant, [_message(thread_id, m) for m in rows], limit,
                                                  lambda m: [m.seq], tail=None if newest_first else [position],
                                                  size=json_size)
        require_live(state, thread_id, "thread")
        return MessagePage(data=shown, next_cursor=next_cursor, has_more=has_more)

    async def retract(self, cred: Credential, thread_id: str, req: RetractMessages,
                      idempotency_key: str | None) -> Outcome:
        """Take messages out of the conversation by appending a retraction; the log keeps them."""
        await self.views.authenticated_miss(cred, "thread", thread_id)
        given = [x for x in (req.seqs, req.newest, req.through) if x is not None]
        if len(given) != 1:
            raise Unprocessable("Give exactly one of seqs, newest or through.")

        async def operation(conn: q.Conn, tenant: str) -> Outcome:
            await self.writes.locked_thread(conn, tenant, thread_id)
            shown: list[q.MessageRow] = []
            if req.through is not None:
                # up to the newest message it takes out, never beyond: a later message is not retracted
                count, last = await q.count_live_messages_through(conn, tenant, thread_id, req.through)
                ranges, summary = [(1, last or 1)], f"messages retracted: every message through seq {last}"
            else:
                if req.seqs is not None:
                    wanted = sorted(set(req.seqs))
                    others = sorted(set(wanted) - set(await q.message_seqs(conn, tenant, thread_id, wanted)))
                    if others:
                        raise Unprocessable(f"Not messages of {thread_id}: seq {', '.join(map(str, others[:20]))}.",
                                            id=thread_id, seqs=others[:20])
                seqs = await q.live_message_seqs(conn, tenant, thread_id, req.seqs, req.newest)
                shown = await q.messages_at(conn, tenant, thread_id, seqs, MESSAGE_INLINE, spill.PREVIEW_BYTES)
                count, ranges = len(seqs), [(s, s) for s in seqs]
                summary = one_line(f"messages retracted: seq {', '.join(map(str, seqs))}", 200)
            if count == 0:  # nothing to take out: no event
                body = Retraction(seq=None, at=None, count=0, messages=[])
                return Outcome(status=200, body=json(body), object_id=thread_id)
            seq, at = await q.retract_messages(conn, tenant, thread_id, summary, ranges)
            await q.rebuild_head(conn, tenant, thread_id)  # the head shows no retracted message
            await q.follow_retraction(conn, tenant, thread_id)  # memories learned from them: lineage
            body = Retraction(seq=seq, at=at, count=count, messages=[_message(thread_id, m) for m in shown])
            return Outcome(status=201, body=json(body), object_id=thread_id)

        path = f"/threads/{thread_id}/messages/retractions"
        return await self.writes.write(cred, idempotency_key, idempotency.fingerprint("POST", path, req), operation)

    async def content(self, cred: Credential, thread_id: str, seq: int) -> Content:
        """A message's content as stored, with the bytes from this process's cache when the database says they
        are the same (views.content, for a message)."""
        await self.views.authenticated_miss(cred, "thread", thread_id)
        cache_id = f"{thread_id}/messages/{seq}"
        cached = self.views.contents.get(cred.key_id, cache_id)
        async with self.db.connection() as conn:
            tenant, state, found = await q.fetch_message_content(conn, cred, thread_id, seq,
                                                                 cached[0] if cached else None)
        require_live(state, thread_id, "thread")
        if found is None:
            raise NotFound(f"{thread_id} has no message with seq {seq}.", id=thread_id, seq=seq)
        if found.data is None and cached is not None:
            found.data = cached[1]
            CONTENT_CACHE.labels("hit").inc()
        else:
            self.views.contents.put(tenant, cred.key_id, cache_id, found.sha256, found.data or b"")
            CONTENT_CACHE.labels("miss").inc()
        return found

    async def grep(self, cred: Credential, thread_id: str, seq: int, pattern: str, regex: bool, context: int,
                   max_matches: int) -> GrepResult:
        """Matching lines of a message's content (Lens.grep, for a message)."""
        found = grep.matcher(pattern, regex)  # a bad pattern is a 400 before anything is read
        content = await self.content(cred, thread_id, seq)
        data = content.data or b""
        if len(data) > 64 * 1024:  # bounded, but long enough to keep off the event loop
            result = await anyio.to_thread.run_sync(grep.grep, data, found, context, max_matches)
        else:
            result = grep.grep(data, found, context, max_matches)
        return GrepResult(id=thread_id, content_type=content.content_type, bytes=len(data), scanned=result.scanned,
                          matches=result.matches, truncated=result.truncated,
                          href=f"/threads/{thread_id}/messages/{seq}/content")


def _appended(thread_id: str, written: list[tuple[Any, Any]], queued: bool) -> Outcome:
    body = AppendedMessages(thread_id=thread_id, messages=[MessageSeq(seq=s, at=a) for s, a in written])
    if queued:
        body.extraction = Extraction(from_seq=written[0][0], to_seq=written[-1][0], status="queued", attempts=0,
                                     queued_at=written[0][1], memory_ids=[])
    return Outcome(status=201, body=json(body), object_id=thread_id)


_decode_appended = msgspec.json.Decoder(AppendedMessages).decode


def _row(i: int, m: NewMessage) -> q.NewMessageRow:
    """What a message is stored as: text as its UTF-8, anything else as its JSON."""
    is_text = isinstance(m.content, str)
    content = m.content.encode() if is_text else json(m.content)
    return q.NewMessageRow(
        summary=preview(m), role=m.role, name=m.name, tool_call_id=m.tool_call_id,
        at=stored_time(f"messages[{i}].at", m.at), content_type=_TEXT if is_text else _JSON, content=content,
        metadata=json(m.metadata).decode(),
    )


def _message(thread_id: str, m: q.MessageRow) -> Message:
    """A message on the wire: its content inline (text, or its JSON as stored), or a pointer to it."""
    if m.text is not None or m.raw is not None:
        text = m.text if m.text is not None else base64.b64decode(m.raw or "").decode()
        content: Any = text if m.content_type == _TEXT else msgspec.Raw(text.encode())
        spilled = None
    else:
        content = None
        spilled = Spill(href=f"/threads/{thread_id}/messages/{m.seq}/content", bytes=m.bytes,
                        content_type=m.content_type, preview=m.preview or "",
                        hint="GET href for the content (Range supported); href/grep?pattern= finds lines in it.")
    return Message(seq=m.seq, role=m.role, at=m.at, content=content, content_type=m.content_type, bytes=m.bytes,
                   metadata=m.metadata, name=m.name, tool_call_id=m.tool_call_id, spilled=spilled,
                   retracted=m.retracted)

