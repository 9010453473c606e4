"""The Python snippets of the README's "Use it from an agent" and docs/agents.md run as written (extracted, so they
cannot drift)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recall_server import demo

ROOT = Path(__file__).resolve().parent.parent


def snippet(containing: str) -> str:
    """The one ```python block of the README's agent section or of docs/agents.md that contains this text."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Use it from an agent"):]
    section = section[:section.index("\n## ", 3)] + (ROOT / "docs" / "agents.md").read_text()
    [code] = [b for b in re.findall(r"```python\n(.*?)```", section, re.S) if containing in b]
    return code


def run_snippet(code: str, base_url: str, api_key: str) -> str:
    """Run it in a fresh interpreter against the test server, as a user would paste it (RECALL_URL
    and RECALL_API_KEY set; the README's local URL pointed at the test server)."""
    code = code.replace("http://127.0.0.1:8000", base_url)
    env = {**os.environ, "RECALL_URL": base_url, "RECALL_API_KEY": api_key}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture()
def story(base_url: str, api_key: str) -> None:
    demo.load(base_url, api_key)


def test_the_python_client_snippet_reaches_the_payment_timeout(base_url: str, api_key: str, story: None) -> None:
    code = snippet("RecallClient")
    assert len([line for line in code.splitlines() if line.strip()]) <= 5
    assert "payment timeout after 30s" in run_snippet(code, base_url, api_key)


@pytest.mark.slow
def test_the_langgraph_snippet_loads_the_tools_and_invokes_one(base_url: str, api_key: str, story: None) -> None:
    out = run_snippet(snippet("MultiServerMCPClient"), base_url, api_key)
    assert '"id":"thr_pr_412"' in out and "wkr_77a0" in out


def test_the_langgraph_store_snippet_puts_and_gets_a_memory(base_url: str, api_key: str) -> None:
    code = snippet("RecallStore")
    assert len([line for line in code.splitlines() if line.strip()]) <= 5
    out = run_snippet(code, base_url, api_key)
    assert out.startswith("{'tone': 'casual'} [") and "'tone'" in out.split("]")[0].split("[", 1)[1]


def test_the_langgraph_saver_snippet_pauses_before_send_and_resumes(base_url: str, api_key: str) -> None:
    out = run_snippet(snippet("RecallSaver"), base_url, api_key)
    assert out.strip() == "('send',) draft for refund #77, sent"
