"""The OpenAI Agents SDK's Session on recall: a session's items are the messages of one thread.

    from agents import Agent, Runner
    from recall_server.agents import RecallSession

    session = RecallSession("user-42")           # the thread thr_user-42, on the local server
    await Runner.run(agent, "What failed?", session=session)

A session ID names its thread (thread_id_for): an ID that already is a thread ID names that thread; one of
1-64 characters from [A-Za-z0-9_-] (not starting with `h-`) names `thr_<session ID>`; any other names
`thr_h-` and 40 hex digits of its SHA-256. The thread is made on the first add_items.

Each item is one message: a plain `{"role", "content": text}` as that text, anything else (the model's
output messages, function calls and their outputs, reasoning) as the item's JSON under the role it speaks
in (speaker), so get_items hands back exactly what add_items was given. The stored role wins: a message
whose JSON is an item speaking in another role (a user's message holding `{"role": "system", ...}`, or a
function call's output) comes back as a message of the stored role holding that JSON as text, so no one who
may write a user message can hand the model a system, developer or tool item. pop_item and clear_session
append a retraction (docs/conversations.md): the thread's log keeps every item, the session no longer shows
them.

Install with `pip install 'recall-server[agents]'` (the openai-agents package).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec
from agents.items import TResponseInputItem
from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import resolve_session_limit

from recall_server import ids
from recall_server.client import AsyncRecallClient, Conflict, NotFound
from recall_server.models import MAX_MESSAGES, MAX_SEQ, Message, NewMessage
from recall_server.text import one_line

_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ROLES = ("user", "assistant", "system", "tool")
# An item's role as the message role it is stored under: the Responses API's developer speaks as system.
_AS_ROLE = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system", "tool": "tool"}
_SPOKEN = ("message", "additional_tools")  # the item types that carry a role of their own
FORMAT = "openai_agents.item"  # the metadata key saying how a message holds its item: text or json
_LAST = MAX_SEQ  # a seq beyond every thread's log: "through the end"
_PAGE = 500
_json = msgspec.json.Decoder()
_encode = msgspec.json.Encoder()


def thread_id_for(session_id: str) -> str:
    """The thread a session ID names (the rule in this module's docstring)."""
    if ids.kind_of(session_id) == "thread":
        return session_id
    if _PLAIN.fullmatch(session_id) and not session_id.startswith("h-"):
        return f"thr_{session_id}"
    return f"thr_h-{hashlib.sha256(session_id.encode()).hexdigest()[:40]}"


def speaker(item: dict[str, Any]) -> str | None:
    """The message role an item speaks in; None when it has no known one (its role and its type disagree).

    A message (and additional_tools) by its role; any other type by the type: an output (function_call_output,
    computer_call_output, ...) is the tool's, the rest (calls, reasoning) the assistant's.
    """
    kind = item.get("type", "message")
    if kind in _SPOKEN:
        role = item.get("role")
        return _AS_ROLE.get(role) if isinstance(role, str) else None
    if not isinstance(kind, str) or "role" in item:
        return None
    return "tool" if kind.endswith("_output") else "assistant"


def to_message(item: TResponseInputItem) -> NewMessage:
    """An item as the message that holds it."""
    data: dict[str, Any] = dict(item)  # type: ignore[arg-type]
    role = data.get("role")
    if set(data) == {"role", "content"} and role in _ROLES and isinstance(data["content"], str):
        return NewMessage(role=role, content=data["content"], metadata={FORMAT: "text"})
    kind = str(data.get("type", ""))
    role = speaker(data) or ("tool" if kind.endswith("_output") else "assistant")
    call_id, name = data.get("call_id"), data.get("name")
    return NewMessage(
        role=role, content=data, metadata={FORMAT: "json"},
        tool_call_id=call_id if isinstance(call_id, str) and 0 < len(call_id) <= 256 else None,
        name=one_line(name, 64) or None if isinstance(name, str) else None,
    )


class RecallSession(SessionABC):
    """A Session (openai-agents) whose history is the messages of one recall thread."""

    def __init__(self, session_id: str, client: AsyncRecallClient | None = None, *, url: str | None = None,
                 key: str | None = None, session_settings: SessionSettings | None = None) -> None:
        """`client`: an AsyncRecallClient to share; else one for `url` and `key` (or the local server's)."""
        self.session_id = session_id
        self.thread_id = thread_id_for(session_id)
        self.client = client if client is not None else AsyncRecallClient(url, key)
        self._own_client = client is None
        self.session_settings = session_settings or SessionSettings()

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The history in order; with a limit (or session_settings.limit), its newest `limit` items."""
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and wanted <= 0:
            return []
        try:
            if wanted is None:
                found = [m async for m in self.client.iter_messages(self.thread_id, limit=_PAGE)]
            else:
                found, cursor = [], None
                while len(found) < wanted:
                    page = await self.client.list_messages(self.thread_id, cursor, min(_PAGE, wanted - len(found)),
                                                           order="desc")
                    found += page.data
                    if not page.has_more:
                        break
                    cursor = page.next_cursor
                found.reverse()
        except NotFound:  # no item was ever added
            return []
        return [await self._item(m) for m in found]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items in order, up to 100 a transaction; the first add makes the thread."""
        messages = [to_message(item) for item in items]
        for start in range(0, len(messages), MAX_MESSAGES):
            batch = messages[start:start + MAX_MESSAGES]
            try:
                await self.client.append_messages(self.thread_id, batch)
            except NotFound:
                await self._make_thread()
                await self.client.append_messages(self.thread_id, batch)

    async def pop_item(self) -> TResponseInputItem | None:
        """Take the newest item out (a retraction: the log keeps it) and return it; None when there is none."""
        try:
            taken = await self.client.retract_messages(self.thread_id, newest=1)
        except NotFound:
            return None
        return await self._item(taken.messages[0]) if taken.messages else None

    async def clear_session(self) -> None:
        """Take every item out (one retraction); later items start a fresh history."""
        try:
            await self.client.retract_messages(self.thread_id, through=_LAST)
        except NotFound:
            return

    async def close(self) -> None:
        """Close the client, if it was made here (not passed in)."""
        if self._own_client:
            await self.client.aclose()

    async def _make_thread(self) -> None:
        try:
            await self.client.create_thread(id=self.thread_id, title=one_line(f"session {self.session_id}", 120),
                                            summary="OpenAI Agents session")
        except Conflict:  # made already, with another title: it is the session's thread all the same
            pass

    async def _item(self, m: Message) -> TResponseInputItem:
        content: Any = m.content
        if m.spilled is not None:  # too large to ride inline: read it
            data = await self.client.message_content(self.thread_id, m.seq)
            content = data.decode() if m.content_type == "text/plain" else _json.decode(data)
        if m.metadata.get(FORMAT) == "json" and isinstance(content, dict) and speaker(content) == m.role:
            return content  # type: ignore[return-value]
        if not isinstance(content, str):  # an item speaking in another role, or JSON that is no item: its text
            content = _encode.encode(content).decode()
        return {"role": m.role, "content": content}  # type: ignore[return-value,misc]

