"""The recall-contract suite is itself tested: it must fail against deliberately broken builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from local import admin_key, fresh_server, scratch_dir

HERE = Path(__file__).parent


# mutant -> (the test that must catch it, the failure it must report). The reason pins the mutant
# down: a skipping cursor that the server rejected would fail the same test with "an event page
# was refused", which proves nothing about skipping.
MUTANTS = {
    "empty-miss": ("test_unknown_ids_of_every_kind_are_404_problems_naming_the_id",
                   "AssertionError: a miss must be a 404 problem, got 200"),
    "skipping-cursor": ("test_paging_events_while_another_client_appends_sees_each_once_in_order",
                        "AssertionError: events skipped or repeated: missing seqs ["),
}


@pytest.mark.slow  # a contract run per mutant build: the full run only
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_the_contract_suite_fails_on_a_broken_build_for_the_reason_the_mutant_breaks(
    tmp_path: Path, mutant: str
) -> None:
    caught_by, reason = MUTANTS[mutant]
    if os.environ.get("RECALL_BASE_URL"):
        pytest.skip("mutants run locally only")
    home = scratch_dir()
    server = fresh_server(home, command=[sys.executable, str(HERE / "mutants.py"), mutant])
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'inner'}",
             str(HERE / "test_recall_contracts.py")],
            env={**server.env, "RECALL_BASE_URL": server.url, "RECALL_API_KEY": admin_key(server, home)},
            capture_output=True, text=True, timeout=600,
        )
    finally:
        server.stop()
    assert run.returncode == 1, run.stdout[-3000:]
    assert f"FAILED contract_tests/test_recall_contracts.py::{caught_by}" in run.stdout, run.stdout[-3000:]
    assert reason in run.stdout, run.stdout[-3000:]
    assert "AssertionError: an event page was refused" not in run.stdout, run.stdout[-3000:]
