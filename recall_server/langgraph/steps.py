"""An operation written once as a generator of client calls (Steps), and OnClient, which drives it on either client.

OnClient holds the sync client and the async client of the running event loop; the store and the saver are both
OnClients.

An op yields each call it needs (a function of the client) and gets back its result, or its exception thrown
at the yield (a 404 it expects, say); what it returns is the op's answer. A stream (the saver's list) also
yields Emit(item) for each item it answers, so the sync driver is an iterator and the async one an async
iterator, each asking the server for no more than the items read so far need.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from recall_server.client import AsyncRecallClient, RecallClient

PAGE = 500  # memories, namespaces and checkpoints read per request while searching or listing (the largest page)

# A step of an op: a function of the client that returns a value (sync) or an awaitable (async).
Call = Callable[[Any], Any]
Steps = Generator[Call, Any, Any]


@dataclass(frozen=True, slots=True)
class Emit:
    """An item a stream answers, yielded between its calls."""

    value: Any


Stream = Generator[Call | Emit, Any, None]


class OnClient:
    """What the store and the saver share: the sync client, the async client of the running event loop, and
    the drivers that run an op's steps on either."""

    def __init__(self, url: str | None, key: str | None, run: str | None, client: RecallClient | None,
                 aclient: AsyncRecallClient | None) -> None:
        self.url, self.key, self.run = url, key, run
        self._client, self._aclient = client, aclient
        self._given_aclient = aclient is not None
        self._aclient_loop: asyncio.AbstractEventLoop | None = None

    @property
    def client(self) -> RecallClient:
        if self._client is None:
            self._client = RecallClient(self.url, self.key, run=self.run)
        return self._client

    @property
    def aclient(self) -> AsyncRecallClient:
        """The async client for the running event loop: its pooled connections belong to one loop, and a store
        or saver may outlive a loop (each asyncio.run of a graph has its own)."""
        loop = asyncio.get_running_loop()
        if not self._given_aclient and (self._aclient is None or self._aclient_loop is not loop):
            self._aclient = AsyncRecallClient(self.url, self.key, run=self.run)
            self._aclient_loop = loop
        assert self._aclient is not None
        return self._aclient

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.aclose()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the drivers: each step's result (or exception) goes back into the op ---------------------

    def drive(self, steps: Steps) -> Any:
        """One op's answer, its steps run on the sync client."""
        try:
            call = next(steps)
            while True:
                try:
                    result = call(self.client)
                except Exception as exc:  # handed to the op, which may expect it (a miss)
                    call = steps.throw(exc)
                else:
                    call = steps.send(result)
        except StopIteration as done:
            return done.value

    async def adrive(self, steps: Steps) -> Any:
        """`drive`, awaited: the steps run on the async client."""
        try:
            call = next(steps)
            while True:
                try:
                    result = await call(self.aclient)
                except Exception as exc:  # handed to the op, which may expect it (a miss)
                    call = steps.throw(exc)
                else:
                    call = steps.send(result)
        except StopIteration as done:
            return done.value

    def stream(self, steps: Stream) -> Iterator[Any]:
        """A stream's items as it emits them, its calls run on the sync client."""
        try:
            step = next(steps)
            while True:
                if isinstance(step, Emit):
                    yield step.value
                    step = next(steps)
                    continue
                try:
                    result = step(self.client)
                except Exception as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(result)
        except StopIteration:
            return

    async def astream(self, steps: Stream) -> AsyncIterator[Any]:
        """`stream`, asynchronously: the calls run on the async client."""
        try:
            step = next(steps)
            while True:
                if isinstance(step, Emit):
                    yield step.value
                    step = next(steps)
                    continue
                try:
                    result = await step(self.aclient)
                except Exception as exc:
                    step = steps.throw(exc)
                else:
                    step = steps.send(result)
        except StopIteration:
            return
