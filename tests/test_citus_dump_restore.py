"""A distributed store (RECALL_TEST_CITUS_URL, `migrate --citus`) survives a backup and restore both ways
docs/scaling.md describes, and the restored store answers every object's GET and every old cursor as before:

- off Citus: pg_dump of the coordinator's database (custom format), its `citus` extension left out with
  pg_restore's list, restored with psql into a database without the extension, then `migrate`;
- onto Citus: a new store made with `migrate --citus`, then the data alone (`pg_dump --data-only`, without
  `schema_migrations` and `schema_applied`, which that migration filled) loaded with psql in one transaction,
  after the rows the migration made that the dump brings back (the `default` tenant, the cursor secret) are
  deleted, with `session_replication_role = replica` passed to the workers so that no trigger runs on the
  shards (none queues an object for embedding again).

The story and the comparisons are tests/test_dump_restore.py's (one PostgreSQL server). Skipped without a
Citus coordinator.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import test_dump_restore
from helpers import (
    CITUS_URL,
    ServerProcess,
    citus_database,
    cli,
    create_key,
    drop_citus_database,
    run_sql,
    with_database,
)
from test_dump_restore import Story, pg_bindir, story  # noqa: F401 (story: the fixture)

pytestmark = pytest.mark.skipif(not CITUS_URL, reason="needs a Citus coordinator: set RECALL_TEST_CITUS_URL")

# Filled by `migrate` in the new store, with the same rows the old one has: left out of the data.
MIGRATED = ("schema_migrations", "schema_applied")
# Rows `migrate --citus` made in the new store that the data brings back as they were: deleted first.
# The old cursor secret replaces the new one, so cursors handed out before the dump still verify.
PRELUDE = """SET LOCAL citus.propagate_set_commands = 'local';
SET LOCAL session_replication_role = replica;
DELETE FROM server_secrets;
DELETE FROM tenants;
"""


def psql(bindir: Path, url: str, *files: Path) -> None:
    restore = subprocess.run([str(bindir / "psql"), f"--dbname={url}", "-v", "ON_ERROR_STOP=1", "--quiet",
                              "--no-psqlrc", "--single-transaction", *(f"--file={f}" for f in files)],
                             check=False, capture_output=True, text=True, timeout=300)
    assert restore.returncode == 0, restore.stderr


def dump_off_citus(bindir: Path, source: str, work: Path) -> Path:
    """The whole store as a plain SQL script without the citus extension (pg_dump 15 has no
    --exclude-extension: pg_restore's table of contents, its citus entries left out)."""
    archive, listing, script = work / "store.dump", work / "store.list", work / "store.sql"
    subprocess.run([str(bindir / "pg_dump"), f"--dbname={source}", "--format=custom", f"--file={archive}"],
                   check=True, capture_output=True, timeout=300)
    toc = subprocess.run([str(bindir / "pg_restore"), "--list", str(archive)], check=True, capture_output=True,
                         text=True, timeout=60).stdout.splitlines()
    kept = [line for line in toc if not line.rstrip().endswith(("EXTENSION - citus", "EXTENSION citus"))]
    assert len(toc) - len(kept) == 2, "the extension and its comment"
    listing.write_text("\n".join(kept) + "\n")
    subprocess.run([str(bindir / "pg_restore"), f"--use-list={listing}", f"--file={script}", str(archive)],
                   check=True, capture_output=True, timeout=300)
    return script


def dump_data(bindir: Path, source: str, work: Path) -> Path:
    data = work / "data.sql"
    subprocess.run([str(bindir / "pg_dump"), f"--dbname={source}", "--data-only", f"--file={data}",
                    *(f"--exclude-table-data={t}" for t in MIGRATED)], check=True, capture_output=True, timeout=300)
    (work / "prelude.sql").write_text(PRELUDE)
    return data


@dataclass
class Restored:
    how: str
    url: str  # the restored database
    server: str  # a server process started on it
    tenant_keys: dict[str, str]  # a read key per tenant, made before the dump


# A tenant other modules of the tier filled in bulk (up to 20,000 objects) is compared row by row by
# test_the_restored_store_renumbers_nothing, not GET by GET: through a coordinator that took over 20 minutes.
BULK = 1000


@pytest.fixture(scope="module")
def tenant_keys(database_url: str, story: Story) -> dict[str, str]:
    """A read key per tenant of at most BULK objects, made before the dump."""
    bulk = {r[0] for r in run_sql(database_url, """
        SELECT tenant_id FROM (SELECT tenant_id FROM threads UNION ALL SELECT tenant_id FROM triggers) x
         GROUP BY tenant_id HAVING count(*) > $1""", BULK)}
    return {r[0]: create_key(database_url, r[0], "read")
            for r in run_sql(database_url, "SELECT id FROM tenants") if r[0] not in bulk}


@pytest.fixture(scope="module", params=["off Citus", "onto Citus"])
def restored(request: pytest.FixtureRequest, database_url: str, tenant_keys: dict[str, str],
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restored]:
    bindir = pg_bindir(database_url)
    work = tmp_path_factory.mktemp("citus-dump")
    name = f"recall_restored_{uuid.uuid4().hex[:12]}"
    url = with_database(CITUS_URL, name)
    proc = None
    try:
        if request.param == "off Citus":
            script = dump_off_citus(bindir, database_url, work)
            run_sql(CITUS_URL, f'CREATE DATABASE "{name}"')  # the coordinator's server; no citus extension in it
            psql(bindir, url, script)
            assert run_sql(url, "SELECT count(*) FROM pg_extension WHERE extname = 'citus'")[0][0] == 0
            # The script brings the coordinator's forms of the functions; migrate puts schema.sql's back.
            assert cli(url, "migrate").startswith("schema version")
        else:
            data = dump_data(bindir, database_url, work)
            citus_database(CITUS_URL, name)
            [[started]] = run_sql(url, "SELECT now()")
            psql(bindir, url, work / "prelude.sql", data)
            # No trigger ran on a shard: nothing was queued for embedding by the load.
            assert run_sql(url, "SELECT count(*) FROM embedding_queue WHERE queued_at >= $1", started)[0][0] == 0
        proc = ServerProcess(url, work / "restored-server.log").start()
        yield Restored(request.param, url, proc.url, tenant_keys)
    finally:
        if proc is not None:
            proc.stop()
        if request.param == "off Citus":
            run_sql(CITUS_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            drop_citus_database(CITUS_URL, name)


def test_the_restored_store_is_distributed_as_the_original_or_not_at_all(database_url: str, restored: Restored) -> None:
    placement = ("SELECT table_name::text, citus_table_type, distribution_column FROM citus_tables"
                 " ORDER BY 1")
    if restored.how == "off Citus":
        assert run_sql(restored.url, "SELECT to_regclass('pg_dist_partition')")[0][0] is None
        return
    assert [tuple(r) for r in run_sql(restored.url, placement)] == [tuple(r) for r in run_sql(database_url, placement)]
    # every row reached a shard
    assert run_sql(restored.url, "SELECT count(*) FROM threads")[0][0] == run_sql(database_url,
                                                                                 "SELECT count(*) FROM threads")[0][0]


# tests/test_dump_restore.py's tests of a restored store, here on the stores this module restores (the key
# and the cursors made before the dump work: the keys and the cursor secret came along); last, as there:
# the clash writes to the restored store.
test_the_restored_store_answers_every_id_and_old_cursor_exactly_as_before = (
    test_dump_restore.test_the_restored_store_answers_every_id_and_old_cursor_exactly_as_before)
test_the_restored_store_renumbers_nothing = test_dump_restore.test_the_restored_store_renumbers_nothing
test_every_object_of_every_tenant_answers_the_same_from_both_stores = (
    test_dump_restore.test_every_object_of_every_tenant_answers_the_same_from_both_stores)
test_the_restored_store_refuses_a_clash_and_continues_every_sequence = (
    test_dump_restore.test_the_restored_store_refuses_a_clash_and_continues_every_sequence)
