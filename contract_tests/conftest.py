"""The contract suites' target: RECALL_BASE_URL + RECALL_API_KEY (any deployment), else a fresh local server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from local import admin_key, fresh_server, scratch_dir


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, admin API key): RECALL_BASE_URL and RECALL_API_KEY, or a fresh local server and a new key."""
    deployed = os.environ.get("RECALL_BASE_URL")
    if deployed:
        key = os.environ.get("RECALL_API_KEY")
        if not key:
            pytest.exit("RECALL_BASE_URL needs RECALL_API_KEY (an admin-scope key) as well", returncode=2)
        yield deployed.rstrip("/"), key
        return
    home = scratch_dir()
    server = fresh_server(home)
    yield server.url, admin_key(server, home)
    server.stop()


@pytest.fixture(scope="session")
def base_url(target: tuple[str, str]) -> str:
    return target[0]


@pytest.fixture(scope="session")
def api_key(target: tuple[str, str]) -> str:
    return target[1]


@pytest.fixture()
def client(base_url: str, api_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30) as c:
        yield c
