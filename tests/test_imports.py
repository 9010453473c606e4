"""The layering docs/architecture.md promises, held by what the modules import."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "recall_server"


def imported(path: Path) -> set[str]:
    """Every module a file imports, at any depth (lazy imports inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return found


@pytest.mark.parametrize("path", [*sorted((PACKAGE / "service").glob("*.py")), *sorted((PACKAGE / "db").rglob("*.py")),
                                  *sorted((PACKAGE / "models").glob("*.py")), PACKAGE / "ids.py", PACKAGE / "auth.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_service_and_what_it_stands_on_import_nothing_from_webhooks(path: Path) -> None:
    """webhooks/deliver.py calls the service's public steps; never the reverse."""
    assert not {m for m in imported(path) if m.startswith("recall_server.webhooks")}



def _module(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in PACKAGE.rglob("*.py")}


def _imports_of(path: Path) -> tuple[set[str], list[str]]:
    """The package's modules a file imports (lazy imports too), and the private names of other modules it uses."""
    tree = ast.parse(path.read_text())
    deps, aliases, private = set(), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    deps.add(alias.name)
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in MODULES:
            for alias in node.names:
                if (full := f"{node.module}.{alias.name}") in MODULES:
                    deps.add(full)
                    aliases[alias.asname or alias.name] = full
                else:
                    deps.add(node.module)
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append(f"{node.module}.{alias.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            private.append(f"{aliases[node.value.id]}.{node.attr}")
    return deps - {_module(path)}, private


def test_no_modules_import_each_other_in_a_circle() -> None:
    """Function-local imports hide a circle from Python, not from the design: none, at any depth."""
    edges = {m: _imports_of(p)[0] for m, p in MODULES.items()}
    circles, done = [], set()

    def walk(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for dep in sorted(edges.get(module, ())):
            walk(dep, [*path, module])
        done.add(module)

    for module in sorted(edges):
        walk(module, [])
    assert circles == []


def test_the_pool_imports_no_statement_and_citus_no_query() -> None:
    """The pool's connections know which form to run, not the statements; `migrate --citus` needs no query."""
    assert {m for m in _imports_of(PACKAGE / "db" / "pool.py")[0] if m.startswith("recall_server.db")} == set()
    assert not {m for m in _imports_of(PACKAGE / "db" / "citus.py")[0] if m.startswith("recall_server.db.queries")}


def test_no_module_uses_another_modules_private_names() -> None:
    used = {m: private for m, p in MODULES.items() if (private := _imports_of(p)[1])}
    assert used == {}


# The modules allowed past 600 lines, each with why.
LARGE = {
    "client.py": "one method per route, sync and async over one sans-I/O call each; split, a reader would hunt",
}


def test_no_module_is_over_600_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600 and str(p.relative_to(PACKAGE)) not in LARGE}
    assert long == {}
