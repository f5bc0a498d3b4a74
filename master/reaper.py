"""The reaper: ends leases that can no longer produce a result, and forgets silent workers.

Driven by the timing wheel every ``reaper_interval_s`` (one timer entry, re-armed after each sweep):

* ``reap.lua`` requeues tasks whose lease deadline (Redis TIME) has passed — worker dead, hung or cut
  off — with the previous worker remembered; a task lost more than ``max_lost`` times is DEAD (poison).
  The next claim gives it a new, higher fencing token, so the old worker's late result is refused.
* the same script fails attempts that ran past their task timeout plus a grace (the worker enforces the
  timeout itself; this is the backstop for a hung worker that still heartbeats);
* a worker not heard from for ``dead_after_heartbeats`` heartbeats has its stream closed (its connection
  then records it dead, the one place that does); its leases are left to expire (it may be alive behind a
  partition and finish in time).

Retry backoffs are not the reaper's: :mod:`sparkyard.master.retries` releases them, one path.

Everything it does is idempotent, so two masters reaping at once is safe.
"""

from __future__ import annotations

import logging
import time

from sparkyard.config import MasterConfig
from sparkyard.master.background import Spawner
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Store
from sparkyard.master.timer import SystemTimer, TimerTask

log = logging.getLogger(__name__)

# Due entries (expired leases and timeouts together) one reap.lua call looks at; a sweep calls reap.lua again until a call returns fewer tasks (a stale entry, of a task no
# longer leased, counts without being returned: what it leaves is the next sweep's).
REAP_BATCH = 500


class Reaper:
    def __init__(self, store: Store, registry: WorkerRegistry, outcomes: Outcomes, timer: SystemTimer,
                 background: Spawner, cfg: MasterConfig) -> None:
        self._store = store
        self._registry = registry
        self._outcomes = outcomes
        self._timer = timer
        self._background = background
        self._cfg = cfg
        self._timer_task: TimerTask | None = None
        self.sweeps = 0
        self.last_sweep_ms = 0.0

    async def start(self) -> None:
        self._arm()

    async def stop(self) -> None:
        if self._timer_task is not None:
            self._timer_task.cancel()
            self._timer_task = None

    def _arm(self) -> None:
        self._timer_task = self._timer.schedule(self._cfg.reaper_interval_s, self._due)

    def _due(self) -> None:
        self._background.spawn(self._sweep_and_rearm(), "reaper")

    async def _sweep_and_rearm(self) -> None:
        try:
            await self.sweep()
        except Exception:
            log_failure(log, "reaper sweep failed; next sweep in %.1fs", self._cfg.reaper_interval_s)
        finally:
            if self._timer_task is not None:
                self._arm()

    async def sweep(self) -> None:
        """One pass: expired leases, timeouts, silent workers."""
        started = time.perf_counter()
        while True:
            reaped = await self._store.reap_expired(self._cfg.max_lost, REAP_BATCH)
            self._outcomes.apply_reaped(reaped)
            if len(reaped) < REAP_BATCH:
                break
        dead_after = self._cfg.heartbeat_s * self._cfg.dead_after_heartbeats
        for session in self._registry.stale(dead_after):
            log.warning("worker=%s missed %d heartbeats; closing its stream", session.worker_id,
                        self._cfg.dead_after_heartbeats)
            session.close("missed heartbeats")
            self._registry.remove(session)
        self.sweeps += 1
        self.last_sweep_ms = (time.perf_counter() - started) * 1000

