"""An ID of any kind: its content, what it resolves to, its state, the hash of the request that made it."""

from __future__ import annotations

from recall_server import ids
from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import Conn
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.models import Resolved
from recall_server.rows import Content

_CONTENT = {  # kind -> the read of its content: the payload of a trigger, the body of a report
    "trigger": keyed("""
        SELECT content_type, CASE WHEN payload_sha256 = $4 THEN NULL ELSE payload END AS data, payload_sha256,
               recall_is_gone(deleted_at, expires_at) AS gone
        FROM triggers WHERE tenant_id = auth.tenant AND id = $3
    """),
    "report": keyed("""
        SELECT content_type, CASE WHEN body_sha256 = $4 THEN NULL ELSE body END AS data, body_sha256,
               recall_is_gone(deleted_at, expires_at) AS gone
        FROM reports WHERE tenant_id = auth.tenant AND id = $3
    """),
    "memory": keyed("""
        SELECT content_type, CASE WHEN value_sha256 = $4 THEN NULL ELSE value END AS data, value_sha256,
               recall_is_gone(deleted_at, expires_at) AS gone
        FROM memories WHERE tenant_id = auth.tenant AND id = $3
    """),
}


async def fetch_content(conn: Conn, cred: Credential, kind: str, object_id: str,
                        known_sha256: bytes | None) -> tuple[str, Content | None]:
    """A trigger's payload or a report's body; `data` is None when its SHA-256 is `known_sha256`."""
    tenant, row = await tenancy.fetch(conn, cred, _CONTENT[kind], object_id, known_sha256)
    return tenant, None if row is None else Content(*row[2:])


_RESOLVE = {  # kind -> the read of its summary, from its table (the plural), e.g. "trigger" -> triggers
    kind: keyed(f"""
        SELECT summary, recall_is_gone(deleted_at, expires_at) AS gone FROM {table}
        WHERE tenant_id = auth.tenant AND id = $3
    """)
    for kind, table in ids.PLURAL.items()
}


async def resolve(conn: Conn, cred: Credential, kind: str, object_id: str) -> tuple[State, Resolved | None]:
    """The ID's state in the key's tenant, and what it resolves to."""
    _, row = await tenancy.fetch(conn, cred, _RESOLVE[kind], object_id)
    if row is None:
        return State.MISSING, None
    return State.of(row["gone"]), Resolved(id=object_id, type=kind, href=ids.href(object_id), summary=row["summary"])


async def states(conn: Conn, tenant: str, object_ids: list[str]) -> dict[str, State]:
    """The state of each of these IDs (of any kind) in the tenant; an ID that never existed is MISSING."""
    rows = await conn.fetch(
        """
        SELECT id, recall_is_gone(deleted_at, expires_at) FROM (
            SELECT id, deleted_at, expires_at FROM triggers WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM threads WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM workers WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM reports WHERE tenant_id = $1 AND id = ANY($2::text[])
            UNION ALL SELECT id, deleted_at, expires_at FROM memories WHERE tenant_id = $1 AND id = ANY($2::text[])) x
        UNION ALL  -- messages (`<thread ID>/<seq>`), by recall_message_ref's index: gone with the thread, or retracted
        SELECT recall_message_ref(m.thread_id, m.seq),
               recall_is_gone(t.deleted_at, t.expires_at) OR recall_message_retracted(m.tenant_id, m.thread_id, m.seq)
          FROM thread_messages m JOIN threads t ON t.tenant_id = m.tenant_id AND t.id = m.thread_id
         WHERE m.tenant_id = $1 AND recall_message_ref(m.thread_id, m.seq) = ANY($2::text[])
        """,
        tenant, object_ids,
    )
    found = {r[0]: State.of(r[1]) for r in rows}
    return {i: found.get(i, State.MISSING) for i in object_ids}


async def state(conn: Conn, tenant: str, object_id: str) -> State:
    return (await states(conn, tenant, [object_id]))[object_id]


_REQUEST_HASH = {
    kind: f"SELECT request_hash, recall_is_gone(deleted_at, expires_at) FROM {table} WHERE tenant_id = $1 AND id = $2"
    for kind, table in ids.PLURAL.items()
}


async def request_hash(conn: Conn, tenant: str, kind: str, object_id: str) -> tuple[State, bytes | None]:
    """The ID's state, and the hash of the create request that made it: tells a retry from a clash."""
    row = await conn.fetchrow(_REQUEST_HASH[kind], tenant, object_id)
    return (State.MISSING, None) if row is None else (State.of(row[1]), row[0])
