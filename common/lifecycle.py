"""How a process's services start and stop (the master's and the worker's lifecycle lists).

A task cancelled once does not always end: Python 3.11's ``asyncio.wait_for`` can lose a cancel that lands
as its inner call completes, and a cancel that lands inside a library call (Redis, gRPC) can come back as
that call's error, which a loop retries on as on any failure. A master whose start failed just after it
began leading stayed alive so, and a worker SIGTERM'd on a loaded machine did not exit within a minute.
So a loop is cancelled again until it ends.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Protocol

# How long a cancelled task gets to end before it is cancelled again.
RECANCEL_S = 0.5


class Service(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


async def cancel_until_done(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` until it ends, and retrieve its end (whatever it was: a stop reports no task's error)."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    await asyncio.gather(task, return_exceptions=True)


class Loop:
    """A coroutine that runs from its service's start to its stop."""

    def __init__(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self._body = body
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._body(), name=self.name)  # type: ignore[arg-type]

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_until_done(self._task)
            self._task = None
