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
                                  PACKAGE / "models.py", PACKAGE / "ids.py", PACKAGE / "auth.py"],
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_service_and_what_it_stands_on_import_nothing_from_webhooks(path: Path) -> None:
    """webhooks/deliver.py calls the service's public steps; never the reverse."""
    assert not {m for m in imported(path) if m.startswith("recall_server.webhooks")}

