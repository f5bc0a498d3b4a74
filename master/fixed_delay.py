"""Fixed-delay jobs (``--every 10m --fixed-delay``): the next fire time counts from the end of the run the job
waits for, so it is written when that run ends, not when it fires.

Told of every run end (:class:`sparkyard.master.events.RunEnded`). Most jobs are not fixed-delay, and most
ended runs' specs are in the store's cache, so the common case costs no round trip; runs of jobs whose spec
is not cached (a burst larger than the cache, a run another master fired) are checked against Redis in
batches. When a leadership starts, jobs whose awaited run ended while no master was watching get their next
fire time.
"""

from __future__ import annotations

import logging
from typing import Callable

from sparkyard.clock import Clock
from sparkyard.master import triggers
from sparkyard.master.background import Spawner
from sparkyard.master.events import RunEnded
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Store
from sparkyard.master.store_outcomes import RescheduleStatus
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Ended runs whose job's spec is not cached are checked against Redis this many at a time.
CHECK_BATCH = 1000
# After a failed check of ended runs (Redis unreachable), the next try comes this much later.
RETRY_S = 1.0


def is_fixed_delay(spec: pb.JobSpec) -> bool:
    return spec.trigger.WhichOneof("kind") == "every" and spec.trigger.every.fixed_delay


class FixedDelay:
    def __init__(self, store: Store, clock: Clock, background: Spawner, arm: Callable[[str, int], None]) -> None:
        self._store = store
        self._clock = clock
        self._background = background
        self._arm = arm  # arms the timer of a job's next fire time (Arming.consider)
        # Ended runs of jobs whose spec is not cached: job id → run id, checked against Redis in batches.
        self._unknown: dict[str, str] = {}
        self._checking = False

    async def start(self) -> None:
        """Jobs whose awaited run ended while no master was watching get their next fire time now."""
        for job_id in await self._store.awaiting_jobs():
            job = await self._store.get_job(job_id)
            awaited = job and (job.awaited_run_id or job.last_run_id)  # no `awaits`: joined before it existed
            if not awaited:
                continue
            run = await self._store.get_run(awaited, with_tasks=False)
            if run is not None and run.finished_ms:
                self._background.spawn(self.after_run(job_id, run.id), f"after-run-{run.id}")

    async def stop(self) -> None:
        self._unknown.clear()

    def run_ended(self, event: RunEnded) -> None:
        self.consider(event.job_id, event.run_id)

    def consider(self, job_id: str, run_id: str) -> None:
        """``run_id`` of ``job_id`` has ended: if the job waits for it, give the job its next fire time."""
        spec = self._store.cached_spec(job_id)
        if spec is None:
            self._unknown[job_id] = run_id
            if not self._checking:
                self._checking = True
                self._background.spawn(self._check_unknown(), "after-run-check")
        elif is_fixed_delay(spec):
            self._background.spawn(self.after_run(job_id, run_id), f"after-run-{run_id}")

    async def _check_unknown(self) -> None:
        try:
            while self._unknown:
                batch = dict(self._unknown.popitem() for _ in range(min(CHECK_BATCH, len(self._unknown))))
                try:
                    waiting = await self._store.awaiting_among(list(batch))
                except Exception:
                    log_failure(log, "checking %d ended runs for fixed-delay jobs failed; retrying in %.0fs",
                                len(batch), RETRY_S)
                    self._unknown.update(batch)
                    await self._clock.sleep(RETRY_S)
                    continue
                for job_id in waiting:
                    self._background.spawn(self.after_run(job_id, batch[job_id]), f"after-run-{batch[job_id]}")
        finally:
            self._checking = False

    async def after_run(self, job_id: str, run_id: str) -> None:
        job = await self._store.get_job(job_id)
        if job is None or not is_fixed_delay(job.spec):
            return  # gone, or updated to another trigger (the update gave it its next fire time)
        if job.awaited_run_id and job.awaited_run_id != run_id:
            return  # the job waits for another run's end (or for none: rescheduled already)
        next_ms = triggers.after_run_ms(job.spec.trigger, await self._store.time_ms(), job.runs)
        status, next_fire = await self._store.reschedule_after_run(job_id, run_id, next_ms)
        if status is RescheduleStatus.OK and next_fire >= 0:
            self._arm(job_id, next_fire)
