"""A worker exempts what start-up built from later garbage collections (process.freeze_heap).

Under load a full collection walking the ~100k start-up objects took 60-100 ms every ~1 s and stalled
every request in flight (docs/benchmarks.md); how long one takes is the benchmark's
to measure, that the app freezes its heap once started is this test's.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from recall_server import config
from recall_server.app import create_app


@pytest.mark.slow
def test_the_started_app_has_frozen_what_its_start_up_built(database_url: str, server: Any) -> None:
    gc.unfreeze()  # what another test's app froze in this process
    app = create_app(config.Settings(database_url=database_url, pool_min=1, pool_max=1, sweep_interval=0))

    async def started() -> tuple[int, bool]:
        async with app.lifespan():  # both lifespans, then the start-up hooks, as a worker runs them
            service = app.state.service  # tracked by the collector, and in none of its generations once frozen
            return gc.get_freeze_count(), gc.is_tracked(service) and all(o is not service for o in gc.get_objects())

    try:
        count, service_frozen = asyncio.run(started())
    finally:
        gc.unfreeze()
    assert count > 10_000, f"{count} objects frozen once the app started"
    assert service_frozen, "the service the lifespan built is not among the frozen objects"
