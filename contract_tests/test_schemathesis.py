"""schemathesis, every check and every phase, against a live server and the committed openapi.yaml."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
JUNIT = ROOT / "reports" / "schemathesis-junit.xml"


@pytest.mark.slow  # a minute of generated requests: the full run only
def test_schemathesis_finds_no_failures(base_url: str, api_key: str) -> None:
    if os.environ.get("RECALL_BASE_URL") and os.environ.get("RECALL_SCHEMATHESIS") != "1":
        pytest.skip("schemathesis PATCHes and DELETEs IDs it makes up (e.g. the documented example thr_pr_412): "
                    "against a shared deployment it runs only with RECALL_SCHEMATHESIS=1")
    st = Path(sys.executable).with_name("st")
    command = [str(st), "--config-file", str(ROOT / "contract_tests" / "schemathesis.toml"), "--no-color", "run",
               str(ROOT / "openapi.yaml"), "--url", base_url, "--header", f"Authorization: Bearer {api_key}"]
    run = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1200)
    summary = run.stdout[-6000:]
    assert run.returncode == 0, summary
    assert "passed" in summary and JUNIT.exists()
    print(summary[-1500:])
