"""Concurrent writes of one key coalesced into one statement: group commit, done by the application.

A trigger filed on its own is one statement, one plan and one commit, and on the benchmark the
commit and the per-statement work were most of its database time (`ingest_4k`: 1,700 statements/s
one row each, 3,580 rows/s eight to a statement, pgbench on the same store). `Coalescer.submit`
queues a write under its credential; when no statement of that credential is running, one is
started, and it takes the queue when it first runs (the next turn of the event loop, so the writes
whose requests were read in the same turn go with it); else the write waits for the running one and
goes with whatever else queued meanwhile (at most `max_rows`). So a lone write waits for nothing but
that one turn, and under load the writes queue behind a running statement and share the next one.
- One statement at a time per key and process filed the most (`bench/run.py --only
  ceiling_fetch,ingest_4k --rounds 2 --duration 5`, 32 connections, 2 workers: ingest_4k / fetch
  ceiling 0.425 with one, 0.394 with two, 0.338 with four).
- Taking the queue a turn later rather than at the submit that started the statement: 9-21% of the
  statements carry one row instead of 34-47%, and ingest_4k / fetch ceiling 0.450 against 0.434
  (means of six alternating one-round runs each, `--only ceiling_fetch,ceiling_write,ingest_4k`).
  Waiting more turns than one gained nothing measurable.

Each caller's answer comes after the statement that wrote its row committed.
Only writes presenting the same credential (key ID and secret hash) share a statement: the key is
checked once for all of them, so a request with a wrong secret can never ride on a valid one. If
the statement fails, every write in it gets that exception (a bad key or scope is the same for all);
`write_batch` reports a write it could not take (a taken ID: one duplicate undoes the statement) as
None, and the caller answers that one on its own path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

WriteBatch = Callable[[Any, list[Any]], Awaitable[list[Any]]]


class Coalescer:
    """Queues per credential (compared by value: key ID and secret hash), and the statements in flight for each."""

    def __init__(self, write_batch: WriteBatch, max_rows: int = 32) -> None:
        self.write_batch = write_batch
        self.max_rows = max_rows
        self.queues: dict[Hashable, list[tuple[Any, asyncio.Future[Any]]]] = {}  # by credential
        self.running: set[Hashable] = set()  # the credentials with a statement started
        self.tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks

    async def submit(self, cred: Hashable, item: Any) -> Any:
        """`item` written together with the other queued items of `cred`: its result from `write_batch`."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.queues.setdefault(cred, []).append((item, future))
        if cred not in self.running:
            self._start(cred)
        return await future

    def _start(self, cred: Hashable) -> None:
        self.running.add(cred)
        task = asyncio.get_running_loop().create_task(self._write(cred))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write(self, cred: Hashable) -> None:
        queue = self.queues[cred]  # not empty: only this task takes from it while cred is running
        batch, queue[:] = queue[:self.max_rows], queue[self.max_rows:]
        if not queue:
            del self.queues[cred]
        try:
            results = await self.write_batch(cred, [item for item, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - every caller gets it; cancellation included
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc if isinstance(exc, Exception) else asyncio.CancelledError())
            if not isinstance(exc, Exception):
                raise
        else:
            for (_, future), result in zip(batch, results, strict=True):
                if not future.done():  # the caller may have gone (a client that hung up)
                    future.set_result(result)
        finally:
            self.running.discard(cred)
            if cred in self.queues:  # what queued while this statement ran
                self._start(cred)
