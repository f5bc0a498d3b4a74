"""The retention loop: history beyond ``--keep-runs`` and ``--history-max-age`` is deleted, a little at a time.

Only the leader runs it (started when leading starts, like the reaper and the bundle collector). Each step
is one ``retention.lua`` call that deletes at most about :data:`STEP_BUDGET` keys, so no call holds Redis
for long; between steps the event loop serves everything else. A pass walks the jobs index from the
newest job, :data:`JOBS_PER_STEP` jobs a step, paced (:data:`PACE_S`) so that its cost does not grow with
the number of jobs held; after a pass that found nothing left to delete the loop rests
``retention_interval_s``. A master that lost the leadership has its next step refused (FENCED) by
the script's epoch check, so two masters never purge at once under the same epoch; a failed step is logged
and tried again after the interval.
"""

from __future__ import annotations

import asyncio
import logging

from sparkyard.clock import Clock
from sparkyard.config import MasterConfig
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Store
from sparkyard.master.store_values import RetentionBounds

log = logging.getLogger(__name__)

# Keys one step may delete (a run costs 2 + 2 per task): a step holds Redis about 1 ms, a few ms at most
# (tests/bench/bench_retention.py times them), so a master's own calls and other clients wait no longer.
STEP_BUDGET = 500
# Jobs whose history one step looks at (each costs a few reads when nothing is due).
JOBS_PER_STEP = 100
# Between two steps of a pass that found nothing more to delete, a pause: a pass looks at 10,000 jobs a
# second at most. Back to back, a pass over a million jobs held Redis and the master busy for as long as it
# took, over and over (everything else, firings first, waited behind it); paced, it takes 100 s and a few per
# cent of Redis, and a job gets back to its --keep-runs a pass later.
PACE_S = JOBS_PER_STEP / 10_000


class Retention:
    def __init__(self, cfg: MasterConfig, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._interval_s = cfg.retention_interval_s
        self.bounds = RetentionBounds(keep_runs=cfg.keep_runs, max_age_ms=int(cfg.history_max_age_s * 1000),
                                      jobs_per_step=JOBS_PER_STEP, budget=STEP_BUDGET)
        self.runs_deleted = 0
        self.jobs_deleted = 0

    async def run(self) -> None:
        """Steps until cancelled: back to back while there is something to delete, then a rest."""
        cursor = 0
        while True:
            try:
                step = await self._store.purge_history(cursor, self.bounds)
            except Exception:
                log_failure(log, "retention step failed; retrying in %.1fs", self._interval_s)
                cursor = 0
                await self._clock.sleep(self._interval_s)
                continue
            cursor = step.cursor
            self.runs_deleted += step.runs_deleted
            self.jobs_deleted += step.jobs_deleted
            if step.jobs_deleted:
                log.info("retention: deleted %d ended jobs past the max age", step.jobs_deleted)
            if step.more:
                await asyncio.sleep(0)  # let the loop serve others between steps
            elif cursor:
                await self._clock.sleep(PACE_S)
            else:
                await self._clock.sleep(self._interval_s)
