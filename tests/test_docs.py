"""docs/configuration.md documents every setting, and no setting that does not exist (as datasette's test_docs)."""

from __future__ import annotations

import re
from pathlib import Path

from recall_server import config

CONFIGURATION = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def configuration_table() -> dict[str, str]:
    """Environment variable -> its row, from the page's table."""
    rows = [line for line in CONFIGURATION.read_text().splitlines() if line.startswith("| `")]
    return {name: row for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_setting_is_in_the_configuration_table() -> None:
    documented = configuration_table()
    missing = sorted(env for env in config.ENV_NAMES.values() if env not in documented)
    assert not missing, f"settings missing from docs/configuration.md: {missing}"


def test_the_configuration_table_names_only_real_settings() -> None:
    unknown = sorted(set(configuration_table()) - set(config.ENV_NAMES.values()))
    assert not unknown, f"docs/configuration.md documents variables config.py does not read: {unknown}"
