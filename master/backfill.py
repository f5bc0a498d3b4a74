"""Backfill: runs for a recurring job's past fire times, at most N of the job's runs active at once.

A backfill is a plan in Redis (``P:job:{job}:backfill``, the fire times still to run, and ``P:backfills``,
the jobs with a plan and their N), so it survives a master's restart or a change of leader: the leader's
:class:`Backfiller` reads the plans and fires what the room allows. A step fires times as manual firings
whose scheduled time is the past fire time (the run id is the job id + that time, as the schedule would
have made it, and the task's ``ctx.scheduled_at`` says it), then takes them out of the plan — so a time
whose run exists already, fired by the schedule or by a step that crashed before taking it out, gets no
second run.

Steps come every :data:`BACKFILL_INTERVAL_S` from the timing wheel, and at once when a run of a job with
a plan ends, so a backfill of short runs does not wait out the interval between them.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparkyard.errors import FailedPrecondition, InvalidArgument, NotFound
from sparkyard.master import triggers
from sparkyard.master.records import JobRecord
from sparkyard.master.scripts import log_failure
from sparkyard.master.store_outcomes import RUN_EXISTS, BackfillStatus, FireStatus
from sparkyard.states import JobState

if TYPE_CHECKING:
    from sparkyard.master.background import Spawner
    from sparkyard.master.events import RunEnded
    from sparkyard.master.preloader import Preloader
    from sparkyard.master.store import Store
    from sparkyard.master.timer import SystemTimer, TimerTask

log = logging.getLogger(__name__)

# How often the leader looks at the backfill plans when no run end wakes it (a plan written while no
# master led, or one whose runs end on another master's watch).
BACKFILL_INTERVAL_S = 1.0
# Fire times one step fires for one job at most (a large --max-concurrent fills up over several steps).
BACKFILL_STEP = 100
# Most fire times one backfill request may cover (a year of hourly runs is 8,760): a plan is kept in Redis
# and a range past this is almost always a mistake in --from/--to.
MAX_BACKFILL_RUNS = 10_000
# Most runs of one job a backfill lets be active at once.
MAX_BACKFILL_CONCURRENT = 1000


@dataclass(frozen=True)
class BackfillPlan:
    planned: int  # fire times in the range
    added: int  # of those, new to the plan
    pending: int  # the plan's fire times still to run
    first_ms: int
    last_ms: int


class Backfiller:
    def __init__(self, store: Store, preloader: Preloader, timer: SystemTimer, background: Spawner) -> None:
        self._store = store
        self._preloader = preloader
        self._timer = timer
        self._background = background
        self._timer_task: TimerTask | None = None
        self._jobs: set[str] = set()  # jobs with a plan, as of the last step
        self._stepping = False
        self._again = False

    async def plan(self, job: JobRecord, start_ms: int, end_ms: int, max_concurrent: int) -> BackfillPlan:
        """Add the job's fire times from ``start_ms`` to ``end_ms`` to its plan (times already pending or
        with a run already are not run twice); the leader fires them, ``max_concurrent`` at most at once."""
        if job.state is JobState.CANCELLED:
            raise FailedPrecondition(f"job {job.id} is CANCELLED: nothing of it runs any more")
        if not 1 <= max_concurrent <= MAX_BACKFILL_CONCURRENT:
            raise InvalidArgument(f"max_concurrent: {max_concurrent} is not within 1..{MAX_BACKFILL_CONCURRENT}")
        if end_ms < start_ms:
            raise InvalidArgument("end: the range ends before it starts")
        now_ms = await self._store.time_ms()
        if end_ms > now_ms:
            raise InvalidArgument("end: a backfill is for past fire times; the schedule fires the later ones")
        try:
            # In a thread: up to MAX_BACKFILL_RUNS cron steps take seconds on a loaded machine (2 s measured for
            # a 500-day hourly range), which on the event loop stalled the leader's lease renewal until it lost
            # the lease (CI, 2026-11-27).
            times = await asyncio.to_thread(triggers.backfill_times, job.spec.trigger, start_ms, end_ms,
                                            MAX_BACKFILL_RUNS)
        except triggers.NoCadence as exc:
            raise FailedPrecondition(f"job {job.id}: {exc}") from None
        except ValueError as exc:
            raise InvalidArgument(f"start, end: {exc}") from None
        if not times:
            raise InvalidArgument(f"job {job.id} has no fire time in that range")
        status, added, pending = await self._store.backfill_plan(job.id, max_concurrent, times)
        if status is BackfillStatus.MISSING:
            raise NotFound(f"job {job.id} not found")
        if status is BackfillStatus.CANCELLED:
            raise FailedPrecondition(f"job {job.id} is CANCELLED: nothing of it runs any more")
        log.info("job=%s backfill of %d fire times (%d new), at most %d runs at once", job.id, len(times), added,
                 max_concurrent)
        self.wake()
        return BackfillPlan(len(times), added, pending, times[0], times[-1])

    async def start(self) -> None:
        self._arm()

    async def stop(self) -> None:
        self._jobs = set()
        if self._timer_task is not None:
            self._timer_task.cancel()
            self._timer_task = None

    def wake(self) -> None:
        """Step soon (a plan was added, or a run of a job with a plan ended)."""
        if self._stepping:
            self._again = True
        else:
            self._background.spawn(self._step_all(), "backfill")

    def run_ended(self, event: RunEnded) -> None:
        if event.job_id in self._jobs:
            self.wake()

    def _arm(self) -> None:
        self._timer_task = self._timer.schedule(BACKFILL_INTERVAL_S, self._due)

    def _due(self) -> None:
        self._background.spawn(self._tick(), "backfill-tick")

    async def _tick(self) -> None:
        try:
            await self._step_all()
        finally:
            if self._timer_task is not None:
                self._arm()

    async def _step_all(self) -> None:
        if self._stepping:
            self._again = True
            return
        self._stepping = True
        try:
            self._again = True
            while self._again:
                self._again = False
                plans = await self._store.backfill_jobs()
                self._jobs = set(plans)
                for job_id, most in plans.items():
                    await self._step(job_id, most)
        except Exception:
            log_failure(log, "backfill step failed; next try in %.0fs", BACKFILL_INTERVAL_S)
        finally:
            self._stepping = False

    async def _step(self, job_id: str, most: int) -> None:
        store = self._store
        job = await store.get_job(job_id)
        if job is None or job.state is JobState.CANCELLED:
            log.info("job=%s is %s: its backfill plan is dropped", job_id, "gone" if job is None else "cancelled")
            await store.backfill_drop(job_id)
            return
        room = min(BACKFILL_STEP, most - len(await store.active_runs(job_id)))
        if room <= 0:
            return
        times = await store.backfill_pending(job_id, room)
        fired = await self._preloader.fire_past(job_id, job.spec, job.spec_version, times) if times else []
        if any(status is FireStatus.INACTIVE for _, status in fired):  # cancelled between the read and the firing
            await store.backfill_drop(job_id)
            return
        # A time refused as 'changed' (the job was updated since it was read) stays for the next step.
        done = [t for t, (_, status) in zip(times, fired) if status in RUN_EXISTS]
        pending = await store.backfill_done(job_id, done)
        log.info("job=%s backfill fired %d runs (%d existed already); %d fire times still to run", job_id,
                 sum(status is FireStatus.CREATED for _, status in fired),
                 sum(status is FireStatus.EXISTS for _, status in fired),
                 pending)
