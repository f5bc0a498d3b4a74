"""Background coroutines of a master: spawned by any component, logged when they fail, cancelled at stop.

One owner for fire-and-forget work, so a failure is never lost silently and a stop leaves nothing running.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Protocol

log = logging.getLogger(__name__)


class Spawner(Protocol):
    def spawn(self, coro: Awaitable[None], name: str) -> None: ...


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        """Run a coroutine in the background, logging (not losing) its failure."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
