"""Retry backoffs: a FAILED task goes back to its ready queue when its backoff ends — the one path.

Each backoff is a timer in the wheel, armed when the task failed (or, when a leadership starts, from the
durable ``delayed`` set). When timers fall due together their tasks are released in one ``release.lua``
call. Redis TIME decides whether a backoff is over, so a task the call did not release (this host's clock
ahead of Redis's) or a call that failed (Redis unreachable) is not lost: a sweep of every due retry follows
:data:`SWEEP_AFTER_S` later, and again while one fails.
"""

from __future__ import annotations

import asyncio
import logging

from sparkyard.clock import Clock
from sparkyard.master.events import WORK_READY, Events
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Store
from sparkyard.master.timer import SystemTimer, TimerTask

log = logging.getLogger(__name__)

# Retry releases that fall due together are sent to Redis in one call.
RELEASE_BATCH = 1000
# A release that left tasks behind (Redis unreachable, or their backoff not over by Redis TIME) is followed
# by a sweep of every due retry this much later.
SWEEP_AFTER_S = 1.0


class Retries:
    def __init__(self, store: Store, timer: SystemTimer, clock: Clock, events: Events) -> None:
        self._store = store
        self._clock = clock
        self._timer = timer
        self._events = events
        self._pending: set[str] = set()
        self._flushing: asyncio.Task[None] | None = None
        self._sweep: TimerTask | None = None
        self._sweeping: asyncio.Task[None] | None = None
        # Bumped by stop: a backoff armed while leading, whose timer expires after this master stopped leading,
        # is left to the next leader's start (which arms every backoff recorded in Redis).
        self._leadership = 0

    async def start(self) -> None:
        """A leadership starts: every backoff recorded in Redis gets its timer."""
        for task_id, not_before_ms in await self._store.delayed_entries():
            self.arm(task_id, not_before_ms)

    async def stop(self) -> None:
        self._leadership += 1
        self._pending.clear()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        running = [t for t in (self._flushing, self._sweeping) if t is not None]
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    def arm(self, task_id: str, not_before_ms: int) -> None:
        """Release a FAILED task to its ready queue when its backoff ends."""
        leadership = self._leadership

        def due() -> None:
            if leadership != self._leadership:
                return
            self._pending.add(task_id)
            self._flush_soon()

        self._timer.schedule_at_wall(not_before_ms / 1000.0, due)

    def _flush_soon(self) -> None:
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        while self._pending:
            batch = [self._pending.pop() for _ in range(min(RELEASE_BATCH, len(self._pending)))]
            try:
                released = await self._store.release_due(len(batch), batch)
            except Exception:
                log_failure(log, "releasing %d retries failed; sweeping again in %.0fs", len(batch), SWEEP_AFTER_S)
                self._sweep_later()
                return
            if released:
                self._events.publish(WORK_READY)
            if len(released) < len(batch):
                self._sweep_later()  # not due yet by Redis TIME, or no longer FAILED (cancelled): the sweep tells

    def _sweep_later(self) -> None:
        if self._sweep is None:
            self._sweep = self._timer.schedule(SWEEP_AFTER_S, self._sweep_due)

    def _sweep_due(self) -> None:
        self._sweep = None
        self._sweeping = asyncio.ensure_future(self.sweep())

    async def sweep(self) -> None:
        """Release every retry whose backoff is over by Redis TIME; another sweep follows while due ones remain
        or Redis cannot be reached."""
        try:
            while True:
                released = await self._store.release_due(RELEASE_BATCH)
                if released:
                    self._events.publish(WORK_READY)
                if len(released) < RELEASE_BATCH:
                    break
            # Backoffs not over yet by this host's clock have their own timers; one over by it but not by
            # Redis's needs another look.
            now_ms = self._clock.now() * 1000
            if any(not_before_ms <= now_ms for _, not_before_ms in await self._store.delayed_entries()):
                self._sweep_later()
        except Exception:
            log_failure(log, "sweeping due retries failed; again in %.0fs", SWEEP_AFTER_S)
            self._sweep_later()
