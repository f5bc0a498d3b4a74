"""Injected time.

Logic never calls ``time.time()`` or ``asyncio.sleep()`` directly: it asks a :class:`Clock`. Production
code gets :class:`SystemClock`; tests get :class:`FakeClock`, whose time moves only when the test calls
:meth:`FakeClock.advance`, so timeout and expiry tests are instant and deterministic.

Two readings are offered because they answer different questions:

* :meth:`Clock.now` — wall-clock seconds since the epoch. Used for *absolute* instants a user can name
  (``--at 2026-11-22T03:00:00Z``, cron fire times) and for timestamps shown to users.
* :meth:`Clock.monotonic` — seconds on a clock that never jumps. Used for *durations* measured inside one
  process (timer deadlines, heartbeat gaps), so an NTP step cannot fire every timer at once.

Lease deadlines are neither: they come from Redis ``TIME`` inside the Lua scripts, so every master
agrees on them.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol


class Cancellable(Protocol):
    """What :meth:`Clock.call_later` returns: something that can be cancelled before it fires."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """The one source of time for Sparkyard's logic."""

    def now(self) -> float:
        """Wall-clock seconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (only differences are meaningful)."""
        ...

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        """Run ``callback`` once, ``delay`` seconds from now on the monotonic clock."""
        ...

    async def sleep(self, delay: float) -> None:
        """Suspend the calling coroutine for ``delay`` seconds."""
        ...


class SystemClock:
    """The real clock, bound to the running asyncio loop for :meth:`call_later`."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        # asyncio's loop clock is time.monotonic(), so deadlines computed from monotonic() agree with it.
        return asyncio.get_running_loop().call_later(max(0.0, delay), callback)

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(max(0.0, delay))


@dataclass(order=True)
class _Pending:
    deadline: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told to.

    ``advance(seconds)`` moves both readings forward together and runs every callback that falls due,
    in deadline order, each seeing :meth:`monotonic` equal to its own deadline — the same order a real
    loop would produce, without waiting. Sleepers are woken the same way.
    """

    def __init__(self, start: float = 1_700_000_000.0, monotonic_start: float = 1_000.0) -> None:
        self._wall_offset = start - monotonic_start
        self._mono = monotonic_start
        self._pending: list[_Pending] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._mono + self._wall_offset

    def monotonic(self) -> float:
        return self._mono

    def call_later(self, delay: float, callback: Callable[[], None]) -> Cancellable:
        entry = _Pending(self._mono + max(0.0, delay), next(self._seq), callback)
        heapq.heappush(self._pending, entry)
        return entry

    async def sleep(self, delay: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        handle = self.call_later(delay, wake)
        try:
            await future
        finally:
            handle.cancel()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing everything that falls due on the way."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go backwards (advance by {seconds})")
        target = self._mono + seconds
        while self._pending and self._pending[0].deadline <= target:
            entry = heapq.heappop(self._pending)
            if entry.cancelled:
                continue
            self._mono = max(self._mono, entry.deadline)
            entry.callback()
        self._mono = target

    def set_wall(self, wall: float) -> None:
        """Jump the wall clock (as NTP might) without moving the monotonic clock."""
        self._wall_offset = wall - self._mono

    @property
    def pending(self) -> int:
        """Callbacks still waiting to fire (cancelled ones excluded)."""
        return sum(1 for p in self._pending if not p.cancelled)
