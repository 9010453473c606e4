"""Messages of a thread's conversation: appending a batch, a page of the replay, retracting, one message's
content, and the verify-erasure findings."""

from __future__ import annotations

import functools
from datetime import datetime

import asyncpg
import msgspec

from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.rows import Content


class NewMessageRow(msgspec.Struct, array_like=True):
    """A message to append, as the arrays append_messages takes, in order."""

    summary: str  # its event's one-line preview
    role: str
    name: str | None
    tool_call_id: str | None
    at: datetime | None
    content_type: str
    content: bytes
    metadata: str  # JSON object text


class MessageRow(msgspec.Struct):
    """A message as a replay reads it: the whole content when it is at most the inline size, else a preview."""

    seq: int
    role: str
    at: datetime
    content_type: str
    bytes: int
    metadata: dict[str, str]
    name: str | None = None
    tool_call_id: str | None = None
    text: str | None = None
    raw: str | None = None  # base64 of inline content holding a NUL
    preview: str | None = None
    retracted: bool = False


_messages = msgspec.json.Decoder(list[MessageRow])

# Each message's event goes through recall_append_events (the seqs, the head, the thread's updated_at, as for
# every event); its row here takes the seq that returns. One statement, in the caller's transaction, which
# holds the thread's row lock.
_APPEND = """
    WITH ev AS (
      SELECT e.event_n, e.event_seq, e.event_at
        FROM recall_append_events($1, 'message', $3::text[], $4::text[], $5::text[], $6::timestamptz[], false) e),
    m AS (
      INSERT INTO thread_messages (tenant_id, thread_id, seq, role, name, tool_call_id, at, content_type, content,
                                   content_sha256, metadata)
      SELECT $1, $2, ev.event_seq, u.role, u.name, u.call, coalesce(u.at, ev.event_at), u.ct, u.content,
             sha256(u.content), u.meta::jsonb
        FROM ev JOIN unnest($7::text[], $8::text[], $9::text[], $10::timestamptz[], $11::text[], $12::bytea[],
                            $13::text[]) WITH ORDINALITY u(role, name, call, at, ct, content, meta, n)
          ON u.n = ev.event_n
      RETURNING seq, at)
    SELECT seq, at FROM m ORDER BY seq
"""


async def append_messages(conn: Conn, tenant: str, thread_id: str, rows: list[NewMessageRow]
                          ) -> list[tuple[int, datetime]]:
    """Append the messages to the thread's log, in order: each one's (seq, at). The caller holds the row lock."""
    if conn.sharded:
        return await _append_messages_steps(conn, tenant, thread_id, rows)
    n = len(rows)
    found = await conn.fetch(
        _APPEND, tenant, thread_id, [thread_id] * n, [r.summary for r in rows], [None] * n, [None] * n,
        [r.role for r in rows], [r.name for r in rows], [r.tool_call_id for r in rows], [r.at for r in rows],
        [r.content_type for r in rows], [r.content for r in rows], [r.metadata for r in rows],
    )
    return [(r[0], r[1]) for r in found]


# The same append as one statement behind the key check (tenancy.keyed_write): the plain append, without an
# Idempotency-Key, in one round trip instead of a transaction's five. recall_append_events skips a thread that
# is missing or gone, so then nothing is written and the caller answers on the transaction path.
_APPEND_KEYED = tenancy.keyed_write("""
    ev AS (
      SELECT e.event_n, e.event_seq, e.event_at
        FROM gate, recall_append_events(gate.tenant, 'message', $4::text[], $5::text[], $6::text[],
                                        $7::timestamptz[], false) e),
    m AS (
      INSERT INTO thread_messages (tenant_id, thread_id, seq, role, name, tool_call_id, at, content_type, content,
                                   content_sha256, metadata)
      SELECT gate.tenant, $3, ev.event_seq, u.role, u.name, u.call, coalesce(u.at, ev.event_at), u.ct, u.content,
             sha256(u.content), u.meta::jsonb
        FROM gate, ev JOIN unnest($8::text[], $9::text[], $10::text[], $11::timestamptz[], $12::text[], $13::bytea[],
                                  $14::text[]) WITH ORDINALITY u(role, name, call, at, ct, content, meta, n)
          ON u.n = ev.event_n
      RETURNING seq, at),
    job AS (
      INSERT INTO extraction_jobs (tenant_id, thread_id, from_seq, to_seq, key_id, not_before)
      SELECT gate.tenant, $3, min(m.seq), max(m.seq), $15, now() + $16 * interval '1 second' FROM gate, m
       GROUP BY gate.tenant HAVING recall_extracts(gate.tenant, $3)
      ON CONFLICT DO NOTHING RETURNING true AS queued),
    done AS (SELECT seq, at, EXISTS (SELECT 1 FROM job) AS queued FROM m)
""", "write", sharded=False)  # Citus plans no call of a distributed function in a CTE


async def append_messages_keyed(conn: Conn, cred: Credential, thread_id: str, rows: list[NewMessageRow],
                                hold: float = 0.0) -> tuple[list[tuple[int, datetime]], bool]:
    """append_messages in one statement with the key check, queueing the range's extraction job when the thread
    extracts (queue_extraction): each message's (seq, at), in order, and whether a job was queued; none when
    the thread is missing or gone, or the statement lost a deadlock (it is undone) (401 and 403 are raised).
    `hold`: seconds before the job is due (extract=sync runs it itself; past them, any worker may)."""
    n = len(rows)
    try:
        _, found = await tenancy.write_many(
            conn, cred, "write", _APPEND_KEYED, thread_id, [thread_id] * n, [r.summary for r in rows], [None] * n,
            [None] * n, [r.role for r in rows], [r.name for r in rows], [r.tool_call_id for r in rows],
            [r.at for r in rows], [r.content_type for r in rows], [r.content for r in rows],
            [r.metadata for r in rows], cred.key_id, hold)
    except asyncpg.DeadlockDetectedError:
        return [], False
    return sorted((r["seq"], r["at"]) for r in found), any(r["queued"] for r in found)


# How a message renders: content inline up to $inline bytes (stored as UTF-8 the server encoded itself, so
# convert_from cannot fail; text holding a NUL, which PostgreSQL text cannot, comes as base64), else a preview
# cut at a character boundary (recall_search_text).
_RENDER = """json_build_object(
    'seq', m.seq, 'role', m.role, 'name', m.name, 'tool_call_id', m.tool_call_id, 'at', m.at,
    'content_type', m.content_type, 'bytes', octet_length(m.content), 'metadata', m.metadata,
    'text', CASE WHEN octet_length(m.content) <= {inline} AND position('\\x00'::bytea IN m.content) = 0
                 THEN convert_from(m.content, 'UTF8') END,
    'raw', CASE WHEN octet_length(m.content) <= {inline} AND position('\\x00'::bytea IN m.content) > 0
                THEN encode(m.content, 'base64') END,
    'preview', CASE WHEN octet_length(m.content) > {inline} THEN recall_search_text(m.content_type, m.content, {preview}) END,
    'retracted', recall_message_retracted(m.tenant_id, m.thread_id, m.seq))"""

# A page of the replay: a seq range of the thread's messages, ascending after $4 or descending before $4,
# bounded by the thread's last_seq (what this statement's snapshot holds), with the filters given. One
# index range on the primary key; a retracted message costs a probe of the thread's retraction ranges.
_PAGE = """
    SELECT recall_is_gone(t.deleted_at, t.expires_at) AS gone,
           (SELECT coalesce(json_agg({render} ORDER BY m.seq {order}), '[]') FROM (
              SELECT * FROM thread_messages m
               WHERE m.tenant_id = auth.tenant AND m.thread_id = t.id AND m.seq <= t.last_seq AND {after}
                 AND ($5::text IS NULL OR m.role = $5) AND ($6::timestamptz IS NULL OR m.at >= $6)
                 AND ($7::timestamptz IS NULL OR m.at < $7)
                 AND ($8 OR NOT recall_message_retracted(m.tenant_id, m.thread_id, m.seq))
               ORDER BY m.seq {order} LIMIT $9) m) AS messages
      FROM threads t WHERE t.tenant_id = auth.tenant AND t.id = $3
"""


@functools.cache
def _page(newest_first: bool) -> str:
    return keyed(_PAGE.format(
        render=_RENDER.format(inline="$10", preview="$11"), order="DESC" if newest_first else "ASC",
        after="m.seq < $4" if newest_first else "m.seq > $4"))


async def list_messages(conn: Conn, cred: Credential, thread_id: str, position: int, newest_first: bool,
                        role: str | None, since: datetime | None, until: datetime | None, retracted: bool,
                        limit: int, inline: int, preview: int) -> tuple[str, State, list[MessageRow]]:
    """The key's tenant, the thread's state, and `limit` of its messages after `position` (before it,
    newest first)."""
    tenant, row = await tenancy.fetch(conn, cred, _page(newest_first), thread_id, position, role, since, until,
                                      retracted, limit, inline, preview)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _messages.decode(row["messages"])


async def messages_at(conn: Conn, tenant: str, thread_id: str, seqs: list[int], inline: int, preview: int
                      ) -> list[MessageRow]:
    """These messages of the thread, in seq order (a retraction shows what it took out)."""
    found = await conn.fetchval(
        f"""SELECT coalesce(json_agg({_RENDER.format(inline="$4", preview="$5")} ORDER BY m.seq), '[]')
              FROM thread_messages m WHERE m.tenant_id = $1 AND m.thread_id = $2 AND m.seq = ANY($3::bigint[])""",
        tenant, thread_id, seqs, inline, preview,
    )
    return _messages.decode(found)


async def live_message_seqs(conn: Conn, tenant: str, thread_id: str, seqs: list[int] | None, newest: int | None
                            ) -> list[int]:
    """Seqs of the thread's messages not retracted: of `seqs` (those that are messages), or the `newest` n."""
    rows = await conn.fetch(
        """
        SELECT m.seq FROM thread_messages m
         WHERE m.tenant_id = $1 AND m.thread_id = $2 AND ($3::bigint[] IS NULL OR m.seq = ANY($3::bigint[]))
           AND NOT recall_message_retracted(m.tenant_id, m.thread_id, m.seq)
         ORDER BY m.seq DESC LIMIT $4
        """,
        tenant, thread_id, seqs, newest if newest is not None else len(seqs or []),
    )
    return sorted(r[0] for r in rows)


async def message_seqs(conn: Conn, tenant: str, thread_id: str, seqs: list[int]) -> list[int]:
    """Which of these seqs are messages of the thread (retracted or not)."""
    rows = await conn.fetch(
        "SELECT seq FROM thread_messages WHERE tenant_id = $1 AND thread_id = $2 AND seq = ANY($3::bigint[])",
        tenant, thread_id, seqs,
    )
    return [r[0] for r in rows]


async def count_live_messages_through(conn: Conn, tenant: str, thread_id: str, through: int
                                      ) -> tuple[int, int | None]:
    """How many of the thread's messages up to seq `through` are not retracted (what a clear takes out), and
    the newest one's seq."""
    row = await conn.fetchrow(
        """
        SELECT count(*), max(m.seq) FROM thread_messages m
         WHERE m.tenant_id = $1 AND m.thread_id = $2 AND m.seq <= $3
           AND NOT recall_message_retracted(m.tenant_id, m.thread_id, m.seq)
        """,
        tenant, thread_id, through,
    )
    return row[0], row[1]


_RETRACT = """
    WITH ev AS (
      SELECT e.event_seq, e.event_at FROM recall_append_events(
        $1, 'messages_retracted', ARRAY[$2::text], ARRAY[$3::text], ARRAY[NULL::text], ARRAY[NULL::timestamptz],
        false) e),
    r AS (
      INSERT INTO message_retractions (tenant_id, thread_id, by_seq, from_seq, to_seq)
      SELECT $1, $2, ev.event_seq, x.f, x.t FROM ev, unnest($4::bigint[], $5::bigint[]) x(f, t))
    SELECT event_seq, event_at FROM ev
"""


async def retract_messages(conn: Conn, tenant: str, thread_id: str, summary: str, ranges: list[tuple[int, int]]
                           ) -> tuple[int, datetime]:
    """Append the retraction's event and its ranges (first, last seq) in one statement: its (seq, at). The
    caller holds the thread's row lock."""
    if conn.sharded:
        return await _retract_messages_steps(conn, tenant, thread_id, summary, ranges)
    row = await conn.fetchrow(_RETRACT, tenant, thread_id, summary, [f for f, _ in ranges], [t for _, t in ranges])
    return row[0], row[1]


_CONTENT = keyed("""
    SELECT recall_is_gone(t.deleted_at, t.expires_at) AS gone, m.seq IS NOT NULL AS found, m.content_type,
           CASE WHEN m.content_sha256 = $5 THEN NULL ELSE m.content END AS data, m.content_sha256
      FROM threads t LEFT JOIN thread_messages m ON m.tenant_id = auth.tenant AND m.thread_id = t.id AND m.seq = $4
     WHERE t.tenant_id = auth.tenant AND t.id = $3
""")


async def fetch_message_content(conn: Conn, cred: Credential, thread_id: str, seq: int, known_sha256: bytes | None
                                ) -> tuple[str, State, Content | None]:
    """The key's tenant, the thread's state, and the message's content (None when no message has this seq;
    `data` None when its SHA-256 is `known_sha256`)."""
    tenant, row = await tenancy.fetch(conn, cred, _CONTENT, thread_id, seq, known_sha256)
    if row is None:
        return tenant, State.MISSING, None
    state = State.of(row["gone"])
    if not row["found"]:
        return tenant, state, None
    return tenant, state, Content(row["content_type"], row["data"], row["content_sha256"], row["gone"])


async def message_findings(conn: Conn, tenant: str, thread_id: str) -> list[str]:
    """Where messages of an erased thread could still be read (verify-erasure): its message rows and
    retraction rows, which erasing its log deletes, and the messages' vectors."""
    rows = await conn.fetch(
        """
        SELECT 'thread_messages: message seq ' || seq || ' of the thread' FROM thread_messages
         WHERE tenant_id = $1 AND thread_id = $2
        UNION ALL SELECT 'message_retractions: retraction seq ' || by_seq || ' of the thread' FROM message_retractions
         WHERE tenant_id = $1 AND thread_id = $2
        UNION ALL SELECT 'embeddings: a vector of message ' || object_id FROM embeddings
         WHERE tenant_id = $1 AND kind = 'message' AND left(object_id, length($2) + 1) = $2 || '/'
        ORDER BY 1
        """,
        tenant, thread_id,
    )
    return [r[0] for r in rows]


# ---- on a Citus coordinator: no call of a distributed function in a CTE, so the same writes as steps ----------

async def _append_events_steps(conn: Conn, tenant: str, thread_id: str, type_: str, summaries: list[str]
                               ) -> tuple[list[int], datetime] | None:
    """recall_append_events for events of one thread without refs: under the thread's row lock, its next seqs,
    one time for all, the events prepended to its head, the events; (seqs, at), or None when the thread is
    missing or gone."""
    row = await conn.fetchrow(
        "SELECT last_seq, clock_timestamp() AS at, head_events::text AS head FROM threads"
        " WHERE tenant_id = $1 AND id = $2 AND NOT recall_is_gone(deleted_at, expires_at) FOR NO KEY UPDATE",
        tenant, thread_id)
    if row is None:
        return None
    seqs = [row["last_seq"] + n for n in range(1, len(summaries) + 1)]
    head = await conn.fetchval(
        "SELECT recall_head_with((SELECT jsonb_agg(recall_head_event($1 + u.i, $2, $3, u.s, NULL::text,"
        " NULL::timestamptz) ORDER BY u.i DESC) FROM unnest($4::text[]) WITH ORDINALITY u(s, i)), $5::jsonb)::text",
        row["last_seq"], type_, row["at"], summaries, row["head"])
    await conn.execute("UPDATE threads SET last_seq = $3, updated_at = $4, head_events = $5::jsonb"
                       " WHERE tenant_id = $1 AND id = $2", tenant, thread_id, seqs[-1], row["at"], head)
    await conn.executemany(
        "INSERT INTO thread_events (tenant_id, thread_id, seq, type, at, summary) VALUES ($1, $2, $3, $4, $5, $6)",
        [(tenant, thread_id, seq, type_, row["at"], summary) for seq, summary in zip(seqs, summaries, strict=True)])
    return seqs, row["at"]


async def _append_messages_steps(conn: Conn, tenant: str, thread_id: str, rows: list[NewMessageRow]
                                 ) -> list[tuple[int, datetime]]:
    """_APPEND as steps: each message's event, then its row under the event's seq; each one's (seq, at)."""
    appended = await _append_events_steps(conn, tenant, thread_id, "message", [r.summary for r in rows])
    if appended is None:
        return []
    seqs, event_at = appended
    values = [(tenant, thread_id, seq, r.role, r.name, r.tool_call_id, event_at if r.at is None else r.at,
               r.content_type, r.content, r.metadata) for seq, r in zip(seqs, rows, strict=True)]
    await conn.executemany(
        "INSERT INTO thread_messages (tenant_id, thread_id, seq, role, name, tool_call_id, at, content_type, content,"
        " content_sha256, metadata) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, sha256($9), $10::jsonb)", values)
    return [(v[2], v[6]) for v in values]


async def _retract_messages_steps(conn: Conn, tenant: str, thread_id: str, summary: str,
                                  ranges: list[tuple[int, int]]) -> tuple[int, datetime]:
    """_RETRACT as steps: the retraction's event, then its ranges; (seq, at)."""
    appended = await _append_events_steps(conn, tenant, thread_id, "messages_retracted", [summary])
    assert appended is not None, "the caller holds the live thread's row lock"
    (seq,), at = appended
    await conn.executemany(
        "INSERT INTO message_retractions (tenant_id, thread_id, by_seq, from_seq, to_seq) VALUES ($1, $2, $3, $4, $5)",
        [(tenant, thread_id, seq, first, last) for first, last in ranges])
    return seq, at
