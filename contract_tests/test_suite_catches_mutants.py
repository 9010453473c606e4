"""The recall-contract suite is itself tested: it must fail against deliberately broken builds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from local import admin_key, fresh_server, scratch_dir

HERE = Path(__file__).parent


@pytest.mark.parametrize(("mutant", "caught_by"), [
    ("empty-miss", "test_unknown_ids_of_every_kind_are_404_problems_naming_the_id"),
    ("skipping-cursor", "test_paging_events_while_another_client_appends_sees_each_once_in_order"),
])
def test_the_contract_suite_fails_on_a_broken_build(tmp_path: Path, mutant: str, caught_by: str) -> None:
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
