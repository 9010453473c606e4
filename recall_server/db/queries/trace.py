"""The recall trace: recording read batches, purging retained rows, a run's and an object's reads."""

from __future__ import annotations

from datetime import datetime

import msgspec

from recall_server import ids
from recall_server.auth import Credential
from recall_server.db import tenancy
from recall_server.db.queries._common import OLDEST_READ, Conn
from recall_server.db.tenancy import keyed
from recall_server.ids import State
from recall_server.models import Read

# Reads settle: a page shows only rows whose pos is older than the settle horizon ($4 seconds), so a
# row written later can never land behind a cursor (see trace_reads in schema.sql). A key with grants sees
# only its own reads ($8, the key's ID, verified by the same statement's key check), and of those only the
# ones of objects it sees (trace_reads' policy): another key's ID, and what another key read and when, are
# not its to see (tests/test_grant_leaks.py).


async def record_reads(conn: Conn, batch: str, accept_seconds: float) -> int:
    """Write one trace batch (a JSON array of rows: key_id, key_sha256 in base64, tick, run, at_us, object,
    route, status, bytes, request_id), each row into its key's tenant; returns how many rows' keys verified."""
    return await conn.fetchval("SELECT recall_record_reads($1, make_interval(secs => $2))", batch, accept_seconds)


async def purge_retained(conn: Conn, reads_keep: float, deliveries_keep: float, batch: int) -> int:
    """Delete up to `batch` trace reads older than `reads_keep` seconds and up to `batch` webhook deliveries
    older than `deliveries_keep`, in every tenant; returns the larger of the two counts."""
    return await conn.fetchval(
        "SELECT recall_purge_retained(make_interval(secs => $1), make_interval(secs => $2), $3)",
        reads_keep, deliveries_keep, batch)


_READ_PAGE = """
    SELECT coalesce(json_agg(x ORDER BY x.pos, x.tick), '[]') FROM (
      SELECT r.run_id AS run, r.at, r.object_id, r.route, r.status, r.bytes, r.key_id, r.request_id, r.pos, r.tick
        FROM trace_reads r
       WHERE r.tenant_id = auth.tenant AND {match}
         AND ((SELECT recall_reads()) IS NULL OR r.key_id = $8)
         AND r.pos < now() - make_interval(secs => $4)
         AND (r.pos, r.tick) > ($5, $6)
       ORDER BY r.pos, r.tick LIMIT $7) x
"""
_RUN_READS = keyed(f"SELECT ({_READ_PAGE.format(match='r.run_id = $3')}) AS reads")
_OBJECT_READS = {  # kind -> the object's state and its reads (of any run), from its table
    kind: keyed(f"""
        SELECT recall_is_gone(o.deleted_at, o.expires_at) AS gone,
               ({_READ_PAGE.format(match='r.object_id = o.id')}) AS reads
        FROM {table} o WHERE o.tenant_id = auth.tenant AND o.id = $3
    """)
    for kind, table in ids.PLURAL.items()
}


class _ReadKey(Read):
    pos: datetime | None = None
    tick: int = 0


_read_keys = msgspec.json.Decoder(list[_ReadKey])
ReadPosition = tuple[datetime, int]


def _reads(text: str) -> list[tuple[Read, ReadPosition]]:
    return [(Read(run=r.run, at=r.at, object_id=r.object_id, route=r.route, status=r.status, bytes=r.bytes,
                  key_id=r.key_id, request_id=r.request_id), (r.pos, r.tick))  # type: ignore[misc]
            for r in _read_keys.decode(text)]


async def run_reads(conn: Conn, cred: Credential, run: str, settle: float, after: ReadPosition | None,
                    limit: int) -> tuple[str, list[tuple[Read, ReadPosition]]]:
    """The key's tenant, and a run's settled reads in order after a position, each with its position (a key with
    grants: its own)."""
    tenant, row = await tenancy.fetch(conn, cred, _RUN_READS, run, settle, *(after or OLDEST_READ), limit,
                                      cred.key_id)
    assert row is not None  # an aggregate: always one row
    return tenant, _reads(row["reads"])


async def object_reads(conn: Conn, cred: Credential, kind: str, object_id: str, settle: float,
                       after: ReadPosition | None, limit: int) -> tuple[str, State, list[tuple[Read, ReadPosition]]]:
    """The key's tenant, the object's state, and its settled reads in order after a position."""
    tenant, row = await tenancy.fetch(conn, cred, _OBJECT_READS[kind], object_id, settle, *(after or OLDEST_READ),
                                      limit, cred.key_id)
    if row is None:
        return tenant, State.MISSING, []
    return tenant, State.of(row["gone"]), _reads(row["reads"])
