"""The reaper: ends leases that can no longer produce a result, and forgets silent workers.

Driven by the timing wheel every ``reaper_interval_s`` (one timer entry, re-armed after each sweep):

* ``reap.lua`` requeues tasks whose lease deadline (Redis TIME) has passed — worker dead, hung or cut
  off — with the previous worker remembered; a task lost more than ``max_lost`` times is DEAD (poison).
  The next claim gives it a new, higher fencing token, so the old worker's late result is refused.
* the same script fails attempts that ran past their task timeout plus a grace (the worker enforces the
  timeout itself; this is the backstop for a hung worker that still heartbeats);
* FAILED tasks whose backoff ended but whose timer was missed (master restart, clock skew) are released;
* a worker not heard from for ``dead_after_heartbeats`` heartbeats has its stream closed and is marked
  dead; its leases are left to expire (it may be alive behind a partition and finish in time).

Everything it does is idempotent, so two masters reaping at once is safe.
"""

from __future__ import annotations

import logging
import time
from typing import Awaitable, Callable, Iterable, Protocol

from sparkyard.config import MasterConfig
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Reaped, Store
from sparkyard.master.timer import SystemTimer, TimerTask

log = logging.getLogger(__name__)

# Due entries (expired leases and timeouts together) one reap.lua call looks at, and retries one release.lua
# call releases; a sweep calls reap.lua again until a call returns fewer tasks (a stale entry, of a task no
# longer leased, counts without being returned: what it leaves is the next sweep's).
REAP_BATCH = 500


class ReaperHost(Protocol):
    """What the reaper uses of the master's core (MasterCore is one); a narrow seam for unit tests."""

    cfg: MasterConfig
    store: Store
    registry: WorkerRegistry
    timer: SystemTimer

    def spawn(self, coro: Awaitable[None], name: str) -> None: ...

    def apply_reaped(self, reaped: Iterable[Reaped]) -> None: ...

    def wake(self) -> None: ...


class Reaper:
    def __init__(self, core: ReaperHost, on_worker_dead: Callable[[str], Awaitable[None]]) -> None:
        self._core = core
        self._cfg = core.cfg
        self._timer_task: TimerTask | None = None
        self._running = False
        self._on_worker_dead = on_worker_dead
        self.sweeps = 0
        self.last_sweep_ms = 0.0

    def start(self) -> None:
        self._arm()

    def stop(self) -> None:
        if self._timer_task is not None:
            self._timer_task.cancel()
            self._timer_task = None

    def _arm(self) -> None:
        self._timer_task = self._core.timer.schedule(self._cfg.reaper_interval_s, self._due)

    def _due(self) -> None:
        self._core.spawn(self._sweep_and_rearm(), "reaper")

    async def _sweep_and_rearm(self) -> None:
        try:
            await self.sweep()
        except Exception:
            log_failure(log, "reaper sweep failed; next sweep in %.1fs", self._cfg.reaper_interval_s)
        finally:
            if self._timer_task is not None:
                self._arm()

    async def sweep(self) -> None:
        """One pass: expired leases, timeouts, missed retry releases, silent workers."""
        started = time.perf_counter()
        store = self._core.store
        while True:
            reaped = await store.reap_expired(self._cfg.max_lost, REAP_BATCH)
            self._core.apply_reaped(reaped)
            if len(reaped) < REAP_BATCH:
                break
        released = await store.release_due(REAP_BATCH)
        if released:
            self._core.wake()
        dead_after = self._cfg.heartbeat_s * self._cfg.dead_after_heartbeats
        for session in self._core.registry.stale(dead_after):
            log.warning("worker=%s missed %d heartbeats; closing its stream", session.worker_id,
                        self._cfg.dead_after_heartbeats)
            session.close("missed heartbeats")
            self._core.registry.remove(session)
            await self._on_worker_dead(session.worker_id)
        self.sweeps += 1
        self.last_sweep_ms = (time.perf_counter() - started) * 1000

