"""The contract suites' target: RECALL_BASE_URL (any deployment), else a fresh local server."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest
from local import fresh_server


@pytest.fixture(scope="session")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    deployed = os.environ.get("RECALL_BASE_URL")
    if deployed:
        yield deployed.rstrip("/")
        return
    server = fresh_server(tmp_path_factory.mktemp("contract"))
    yield server.url
    server.stop()


@pytest.fixture()
def client(base_url: str) -> Iterator[httpx.Client]:
    headers = {}
    if os.environ.get("RECALL_API_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['RECALL_API_KEY']}"
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as c:
        yield c
