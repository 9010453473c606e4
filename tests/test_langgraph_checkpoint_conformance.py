"""LangGraph's checkpointer conformance suite (langgraph-checkpoint-conformance) against RecallSaver on a live
server: every base capability and every optional one RecallSaver declares (it overrides all eight)."""

from __future__ import annotations

import importlib
import uuid
from collections.abc import AsyncIterator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, DetectedCapabilities

from recall_server.langgraph import RecallSaver
from tests.helpers import create_key

pytestmark = pytest.mark.anyio


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


def test_recall_saver_declares_every_capability() -> None:
    assert DetectedCapabilities.from_instance(RecallSaver("http://unused", "rk_unused")).missing == frozenset()


async def test_conformance_suite_passes_every_capability(base_url: str, database_url: str) -> None:
    # a tenant of its own: the suite reuses thread IDs ("thread-0") across its capability runs
    key = create_key(database_url, f"lgcp-{uuid.uuid4().hex[:12]}", "write")

    @checkpointer_test(name="RecallSaver")
    async def recall_saver() -> AsyncIterator[RecallSaver]:
        saver = RecallSaver(base_url, key)
        try:
            yield saver
        finally:
            await saver.aclose()

    report = await validate(recall_saver)
    failures = {cap: result.failures for cap, result in report.results.items() if result.failures}
    assert not failures, failures
    assert {cap for cap, result in report.results.items() if result.passed} == {c.value for c in ALL_CAPABILITIES}
    passed = sum(result.tests_passed for result in report.results.values())
    print(f"conformance: {passed} tests passed, 0 failed, across {len(report.results)} capabilities")
    assert passed == _suite_size() == 81  # 81 in langgraph-checkpoint-conformance 0.0.2


def _suite_size() -> int:
    """How many tests the installed suite holds, counted from its spec modules (ALL_<CAPABILITY>_TESTS)."""
    total = 0
    for cap in ALL_CAPABILITIES:
        spec = importlib.import_module(f"langgraph.checkpoint.conformance.spec.test_{cap.value}")
        total += sum(len(tests) for name, tests in vars(spec).items() if name.startswith("ALL_") and name.endswith("_TESTS"))
    return total
