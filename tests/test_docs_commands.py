"""Every shell command in README.md and docs/ runs as written, against a real server (extracted, so they
cannot drift); the docs link only to files that exist; and the product speaks of itself."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from helpers import ServerProcess, create_key, run_script, scratch_dir, with_database

from recall_server import process

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent

# Commands a test cannot run from inside the suite, each with where it does run.
NOT_RUN_HERE = {
    ".venv/bin/pip install -e '.[test]' && .venv/bin/python -m pytest": "the test command itself: .ci/run runs it",
    '.venv/bin/python -m pytest -m "not slow and not fault" -q': "the suite itself, a subset of the test command",
    ".venv/bin/python -m pytest contract_tests": "the contract suites against a deployment; the test command runs them locally",
    ".venv/bin/python bench/": "the benchmark: minutes of load; its flags are checked against its --help below",
    "recall-server migrate --citus": "needs a Citus coordinator: the Citus tier runs it (helpers.citus_database)",
    "RECALL_TEST_CITUS_URL=": "the Citus tier itself: needs a Citus cluster (tests/test_citus.py)",
    "RECALL_TEST_CITUS=1": "the Citus tier itself, on a throwaway cluster: the whole suite again (tests/test_citus.py)",
    "grep -v -e 'EXTENSION - citus'": "a Citus store's dump: tests/test_citus_dump_restore.py runs it on the tier",
}


def blocks() -> list[tuple[str, str]]:
    """(page, block) for every ```sh block of the README and the docs."""
    return [(page.relative_to(ROOT).as_posix(), block) for page in PAGES
            for block in re.findall(r"```sh\n(.*?)```", page.read_text(), re.S)]


def reason_not_run(block: str) -> str | None:
    return next((why for command, why in NOT_RUN_HERE.items() if command in block), None)


@pytest.fixture(scope="module")
def docs_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server on a database of its own (the docs create tenant acme, thr_pr_500, ...)."""
    name = f"recall_docs_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    url = with_database(database_url, name)
    proc = ServerProcess(url, tmp_path_factory.mktemp("docs") / "server.log", RECALL_SWEEP_INTERVAL="0").start()
    yield proc, url
    proc.stop()


@pytest.fixture(scope="module")
def shell(docs_server: tuple[ServerProcess, str], tmp_path_factory: pytest.TempPathFactory):
    """Run a block in bash as a user on a fresh machine would: in a checkout with .venv, the key `serve`
    saved under ~/.local/share/recall-server, the server on the port the docs name (rewritten to the test's)."""
    proc, url = docs_server
    home = tmp_path_factory.mktemp("home")
    (home / ".local" / "share" / "recall-server").mkdir(parents=True)
    (home / ".local" / "share" / "recall-server" / "api-key").write_text(create_key(url, "default", "write") + "\n")
    checkout = tmp_path_factory.mktemp("checkout")
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECALL_", "XDG_"))}
    env.update(HOME=str(home), PATH=f"{VENV_BIN}:{os.environ['PATH']}", DATABASE_URL=url,
               RECALL_HOST="127.0.0.1", RECALL_PORT=str(proc.port))

    def run(block: str) -> str:
        script = block.replace("localhost:8000", f"localhost:{proc.port}").replace("127.0.0.1:8000", f"127.0.0.1:{proc.port}")
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=checkout, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{block}\nexit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        return done.stdout

    return run


RUNNABLE = [(page, block) for page, block in blocks() if reason_not_run(block) is None and " serve\n" not in block]


@pytest.mark.slow
@pytest.mark.parametrize("page,block", RUNNABLE, ids=[f"{p}:{i}" for i, (p, _) in enumerate(RUNNABLE)])
def test_every_docs_command_runs(shell, page: str, block: str) -> None:
    out = shell(block)
    assert '"status":5' not in out.replace(" ", ""), out  # no server error among the answers


def test_the_readme_recall_reaches_the_payment_timeout_line(shell) -> None:
    [block] = [b for p, b in blocks() if p == "README.md" and "payload/grep" in b]
    out = shell(block)
    assert "payment timeout" in out and '"trg_8f21"' in out and "is a trigger ID" in out
    key_line, search = block.splitlines()[1], next(line for line in block.splitlines() if "/search?" in line)
    hits = msgspec.json.decode(shell(f"{key_line}\n{search}"))["data"]  # the quoted phrase, as the README sends it
    assert "trg_8f21" in [hit["id"] for hit in hits]


@pytest.mark.slow
def test_the_readme_serve_command_serves(tmp_path: Path) -> None:
    [block] = [b for _, b in blocks() if b.rstrip().endswith(" serve")]
    command = block.rstrip().rsplit("&& ", 1)[1].split()  # after the venv is made and the package installed
    assert command == [".venv/bin/recall-server", "serve"]
    proc = process.ServerProcess(tmp_path / "serve.log", command=[str(VENV_BIN / "recall-server")],
                                 RECALL_DATA_DIR=str(scratch_dir("docs-serve")), DATABASE_URL="")
    try:
        proc.start()
    finally:
        proc.stop()


def test_ci_runs_the_readme_test_command() -> None:
    [block] = [b for p, b in blocks() if p == "README.md" and "'.[test]'" in b]
    assert block.strip() in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
def test_the_benchmark_commands_use_only_flags_the_benchmarks_take() -> None:
    for _, block in blocks():
        for script, args in re.findall(r"bench/(\w+\.py)([^\n]*(?:\\\n[^\n]*)*)", block):
            usage = subprocess.run([sys.executable, str(ROOT / "bench" / script), "--help"],
                                   capture_output=True, text=True, timeout=60).stdout
            for flag in re.findall(r"(--[a-z-]+)", args):
                assert flag in usage, f"bench/{script} has no {flag}"


def test_docs_link_only_to_files_that_exist() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).exists(), f"{page.name} links to {target}"


def test_architecture_names_only_modules_that_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)*[a-z_]+\.py)`", text))
    assert named
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    missing = sorted(m for m in named if not any(f == m or f.endswith("/" + m) for f in files))
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


# Words that narrate how the product was built rather than what it is. Spelled in pieces so that this
# file does not match itself.
NARRATIVE = [
    r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
    r"fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|this|that|previous|next|last) "
    + "sess" + r"ion\b",
    r"\bsess" + r"ion of 20\d\d",
    r"\bwork peri" + r"od",
    r"\biss" + r"ue \d+",
    r"\bperformance rou" + r"nd\b",
    r"\bbranch poi" + r"nt\b",
    r"\bfc-v" + r"\d+",
    r"HIST" + r"ORY\.md",
]


def test_no_file_narrates_how_it_was_built() -> None:
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    found = []
    for name in files:
        path = ROOT / name
        if not path.is_file() or path.suffix in {".png", ".gz", ".whl"}:
            continue
        text = path.read_text(errors="replace")
        for pattern in NARRATIVE:
            found += [f"{name}: {m.group(0)!r}" for m in re.finditer(pattern, text, re.I)]
    assert not found, "\n".join(found)


def test_the_grants_example_keeps_each_user_to_their_own(shell) -> None:
    [block] = [b for p, b in blocks() if p == "docs/tenancy.md" and "--subject user:ana" in b]
    answers = [line for line in shell(block).splitlines() if line.startswith("{")]  # the curl answers
    procedure, profile, bens_list, bens_search, bens_write = (msgspec.json.decode(a) for a in answers)
    assert (procedure["kind"], profile["kind"]) == ("procedure", "profile")
    assert bens_list["data"] == []
    assert [hit["id"] for hit in bens_search["data"]] == [procedure["id"]]
    assert bens_write["status"] == 403 and "teams/support" in bens_write["detail"]
