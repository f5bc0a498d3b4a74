"""From durable schedule to timing wheel to fired runs (LTS's PreLoader, without its 1-second pull).

The schedule lives in Redis (``schedule``: job id → next fire ms). The preloader loads every entry due
within the horizon (60 s by default) into the timing wheel, tops the wheel up every half horizon, and
has new entries armed as they are written (submit, resume, next fire time: :mod:`sparkyard.master.arming`).
When an entry's timer expires, the job is fired:

1. read the job (state, spec, runs so far) and plan its steps with its misfire policy
   (:func:`sparkyard.master.triggers.plan`): a skipped run for missed firings, then the run(s) to fire;
2. split the run into tasks (:mod:`sparkyard.master.splitter`);
3. for overlap REPLACE, cancel the job's active runs;
4. ``fire.lua``: create the run and READY tasks and advance the schedule in one step — only if the entry
   still says what we planned from, so a second master firing the same entry finds it ``stale``/``exists``;
5. arm the next fire time and wake the scheduler.

Timers expire ``--fire-ahead`` before an entry's time (:mod:`sparkyard.master.arming`), so the run exists
and its task is leased when the time comes; the worker starts it then. A job whose overlap policy looks at
its active runs (forbid, replace) is fired at its exact time instead: a run that ends in between must count
as ended.

A manual trigger goes through the same path (steps 2–5) with no schedule entry to consume. Only a job
submitted to run now gets its first run elsewhere: ``submit.lua`` creates it with the job, in one step.

Firings are processed by a small pool of coroutines fed by a queue, so 10,000 jobs due in the same second
make a few ``fire.lua`` calls in flight at a time (each firing up to :data:`FIRE_BATCH` jobs) rather than
10,000 concurrent tasks.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Sequence

from sparkyard.master import triggers
from sparkyard.clock import Clock
from sparkyard.master.arming import Arming
from sparkyard.master.background import Spawner
from sparkyard.master.fixed_delay import FixedDelay
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.scripts import log_failure
from sparkyard.master.splitter import split_job
from sparkyard.master.records import RunRecord
from sparkyard.master.store import Store
from sparkyard.master.store_values import FireRequest, Fired
from sparkyard.master.store_outcomes import RUN_EXISTS, FireStatus
from sparkyard.master.timer import SystemTimer, TimerTask
from sparkyard.retry import REDIS_TRANSIENT
from sparkyard.states import RUN_TERMINAL, JobState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Coroutines firing due jobs concurrently; each takes up to FIRE_BATCH due entries at a time and fires
# them in one fire.lua call, so 10,000 jobs due in the same second cost ~20 script calls, not 10,000. Two:
# one plans its batch while Redis runs the other's. Four held the master's loop with planning long enough
# to delay the dispatch rounds that lease the fired tasks (10,000 due together: leased p50 ~1.8 s with four,
# ~1.0 s with two, ~1.1 s with one; docs/benchmarks.md, "Bursts").
FIRE_CONCURRENCY = 2
FIRE_BATCH = 500
# When a firing or a top-up fails because Redis cannot be reached (restarting, failing over), the next
# top-up comes after this pause, doubling up to the maximum while it keeps failing, instead of half a
# horizon (30 s) later: every job due during a one-second blip stayed unfired that long, and a failed
# top-up was never followed by another.
RETRY_BACKOFF_S = 0.1
RETRY_BACKOFF_MAX_S = 2.0
# A load arms this many entries, then lets the event loop run: arming 100,000 due within the horizon (a burst)
# held the loop for ~0.7 s in one go (~7 µs an entry on a 2-core machine), and a new leader's lease is renewed
# by that loop while its start runs; dispatch rounds and reports wait on it too.
ARM_CHUNK = 2000

_OVERLAP = {
    pb.OVERLAP_UNSPECIFIED: "allow",
    pb.OVERLAP_ALLOW: "allow",
    pb.OVERLAP_FORBID: "forbid",
    pb.OVERLAP_REPLACE: "replace",
}


class Preloader:
    def __init__(self, store: Store, arming: Arming, timer: SystemTimer, clock: Clock, background: Spawner,
                 outcomes: Outcomes, fixed_delay: FixedDelay, metrics: MasterMetrics, misfire_threshold_s: float) -> None:
        self._arming = arming
        self._store = store
        self._timer = timer
        self._clock = clock
        self._background = background
        self._outcomes = outcomes
        self._fixed_delay = fixed_delay
        self._metrics = metrics
        self._horizon_ms = arming.horizon_ms
        self._threshold_ms = int(misfire_threshold_s * 1000)
        self._queue = arming.due
        self._workers: list[asyncio.Task[None]] = []
        self._topup: TimerTask | None = None
        self._topup_at = 0.0  # monotonic time the next top-up is due at
        self._backoff = RETRY_BACKOFF_S  # the pause before the next top-up after a Redis failure

    async def start(self) -> None:
        self._workers = [asyncio.create_task(self._fire_loop(), name=f"fire-{i}") for i in range(FIRE_CONCURRENCY)]
        await self._load()

    async def stop(self) -> None:
        if self._topup is not None:
            self._topup.cancel()
        self._arming.clear()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)

    def _now_ms(self) -> int:
        return int(self._clock.now() * 1000)

    async def _load(self) -> None:
        """Arm every entry due within the horizon, then schedule the next top-up."""
        until = self._now_ms() + self._horizon_ms
        entries = await self._store.due_schedule(until)
        for first in range(0, len(entries), ARM_CHUNK):
            if first:
                # An entry fired meanwhile and read here before it moved is armed again at its old time: its
                # firing then finds the entry moved (stale) and arms it where it is now (_fire).
                await asyncio.sleep(0)
            for job_id, due_ms in entries[first:first + ARM_CHUNK]:
                self._arming.consider(job_id, due_ms)
        self._load_again_in(self._horizon_ms / 2000.0)

    def _load_again_in(self, delay_s: float) -> None:
        """Have the next top-up ``delay_s`` from now, unless one is due sooner."""
        at = self._clock.monotonic() + delay_s
        if self._topup is not None:
            if self._topup_at <= at:
                return
            self._topup.cancel()
        self._topup, self._topup_at = self._timer.schedule(delay_s, self._on_topup), at

    def _on_topup(self) -> None:
        self._topup = None
        self._background.spawn(self._topup_load(), "preload-topup")

    async def _topup_load(self) -> None:
        try:
            await self._load()
            self._backoff = RETRY_BACKOFF_S
        except REDIS_TRANSIENT as exc:
            log.warning("loading the schedule failed (%s); trying again in %.1fs", exc, self._load_soon())

    def _load_soon(self) -> float:
        """After a Redis failure: a top-up after the current backoff (which doubles for the next failure).
        It re-arms what failed from the durable schedule: an entry not fired is due at once; one that was
        fired though its reply was lost has its next fire time there, which a retry of the firing itself
        (refused as stale) would never arm."""
        delay = self._backoff
        self._backoff = min(self._backoff * 2, RETRY_BACKOFF_MAX_S)
        self._load_again_in(delay)
        return delay

    async def _fire_loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < FIRE_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self.fire_batch(batch)
            except asyncio.CancelledError:
                raise
            except REDIS_TRANSIENT as exc:
                log.warning("firing %d due jobs failed (%s); the schedule is loaded again in %.1fs", len(batch),
                            exc, self._load_soon())
            except Exception:
                log_failure(log, "firing %d due jobs failed; they are retried at the next top-up", len(batch))

    async def fire_batch(self, due: list[tuple[str, int]]) -> None:
        """Fire due schedule entries (job id, due ms): plan each job's steps, then fire them."""
        progress = await self._store.job_progress([job_id for job_id, _ in due])
        active = [(job_id, due_ms, job) for job_id, due_ms in due
                  if (job := progress.get(job_id)) is not None and job.state is JobState.ACTIVE]
        # One round trip for the specs not cached (a new leader has none cached: a second of 10,000 due jobs
        # would otherwise wait on 10,000 reads one after another).
        specs = await self._store.get_specs({(job_id, job.spec_version) for job_id, _, job in active})
        now = self._now_ms()
        plans: list[list[FireRequest]] = []
        for job_id, due_ms, job in active:
            spec = specs.get((job_id, job.spec_version))
            if spec is None:
                continue
            if due_ms > now and _OVERLAP.get(spec.overlap, "allow") != "allow":
                self._arming.at_time(job_id, due_ms)
                continue
            plans.append(self._steps(job_id, spec, job.spec_version, due_ms, now, job.runs))
        await self._fire(plans)

    def _steps(self, job_id: str, spec: pb.JobSpec, version: int, due_ms: int, now_ms: int,
               runs: int) -> list[FireRequest]:
        """The firings one due entry makes, in order, each consuming the schedule entry the previous one
        wrote: a skipped run for missed firings (misfire SKIP), then one run per planned firing (usually
        one; several for misfire CATCH-UP)."""
        plan = triggers.plan(spec, due_ms, now_ms, self._threshold_ms, runs)
        overlap = _OVERLAP.get(spec.overlap, "allow")
        steps: list[FireRequest] = []
        expected = due_ms
        if plan.skipped_at != triggers.NONE:
            after = plan.fires[0] if plan.fires else plan.next_ms
            steps.append(FireRequest(job_id, spec, plan.skipped_at, expected, after, overlap, [], plan.skip_reason,
                                     version))
            expected = after
        inputs = split_job(spec) if plan.fires else []
        for i, scheduled in enumerate(plan.fires):
            next_ms = plan.fires[i + 1] if i + 1 < len(plan.fires) else plan.next_ms
            steps.append(FireRequest(job_id, spec, scheduled, expected, next_ms, overlap, inputs,
                                     spec_version=version))
            expected = next_ms
        return steps

    async def _fire(self, plans: list[list[FireRequest]]) -> list[list[Fired]]:
        """The one firing path (schedule entries and manual triggers alike).

        Each plan is one job's steps. Round k fires the k-th step of every job still going, in one
        pipeline; a step that does not create (or skip) its run ends its job's plan, since every later
        step consumes the entry it would have written. Overlap REPLACE cancels the job's active runs
        right before each of its firings. After its last step a job's next fire time is armed.
        """
        results: list[list[Fired]] = [[] for _ in plans]
        going = [i for i, steps in enumerate(plans) if steps]
        step = 0
        while going:
            for i in going:
                request = plans[i][step]
                if request.overlap == "replace" and not request.skip_reason:
                    active = await self._store.active_runs(request.job_id)
                    if active:
                        await self._outcomes.cancel_runs(active, f"replaced by the firing due at {request.scheduled_ms}")
            fired = await self._store.fire_many([plans[i][step] for i in going])
            created, still = False, []
            for i, (run_id, res) in zip(going, fired):
                request = plans[i][step]
                results[i].append(Fired(run_id, res))
                quiet = res.status is FireStatus.CREATED and not request.skip_reason
                manual = request.expected_ms is None  # a trigger or a backfill: not late, as asked for
                self._metrics.fired(res.status.value, None if manual else res.fired_ms - request.scheduled_ms)
                if res.status is FireStatus.FAILED:
                    # Its schedule entry is where it was: the next load of the schedule fires it again.
                    log.error("job=%s run=%s: its firing due at %d failed in Redis: %s", request.job_id, run_id,
                              request.scheduled_ms, res.error)
                    continue
                log.log(logging.DEBUG if quiet else logging.INFO, "job=%s run=%s fire %s (%+d ms from its time)%s",
                        request.job_id, run_id, res.status.value, res.fired_ms - request.scheduled_ms,
                        f": {request.skip_reason}" if request.skip_reason else "")
                if res.status is FireStatus.STALE and request.expected_ms is not None and res.due_ms >= 0:
                    # The entry moved since this firing was planned (fired meanwhile: a load that read it before, or
                    # a second master): arm where it is now — the stale time may have displaced that timer.
                    self._arming.consider(request.job_id, res.due_ms)
                if res.status is FireStatus.CHANGED and request.expected_ms is not None:
                    # The job was updated after this step was planned: plan its entry again, now, with the
                    # new spec (if the update moved the entry, the old time is refused as stale).
                    self._arming.consider(request.job_id, request.expected_ms)
                if res.status not in RUN_EXISTS or res.run_state is None:
                    continue
                if res.run_state in RUN_TERMINAL:
                    if res.status is FireStatus.EXISTS:
                        # A run made already (the schedule moved past it) that has ended: its end was
                        # signalled when it ended; only a fixed-delay job may still wait for it.
                        self._fixed_delay.consider(request.job_id, run_id)
                    else:
                        # Skipped, or created with no tasks: this firing ended the run.
                        self._outcomes.run_ended(run_id, res.run_state)
                created = created or res.status is FireStatus.CREATED
                if step + 1 < len(plans[i]):
                    still.append(i)
                elif request.next_fire_ms >= 0:
                    self._arming.consider(request.job_id, request.next_fire_ms)
            if created:
                self._outcomes.work_ready()
            going, step = still, step + 1
        return results

    async def fire_past(self, job_id: str, spec: pb.JobSpec, spec_version: int,
                        times_ms: Sequence[int]) -> list[tuple[str, FireStatus]]:
        """Backfill: a run for each past fire time, as the schedule would have made it (its scheduled time
        in its context), outside the schedule and its overlap policy (the backfill bounds how many run at
        once), with the job's spec of ``spec_version`` (``changed`` if it is no longer the job's). A time
        whose run exists already gets none: (run id, status) each."""
        inputs = split_job(spec)
        plans = [[FireRequest(job_id, spec, t, None, triggers.NONE, "allow", inputs, spec_version=spec_version,
                              backfill=True)] for t in times_ms]
        return [(run_id, res.status) for ((run_id, res),) in await self._fire(plans)]

    async def rerun(self, job_id: str, spec: pb.JobSpec, spec_version: int, original: RunRecord,
                    inputs: Sequence[Sequence[Any]], keep_steps: dict[str, str] | None = None) -> tuple[str, FireStatus]:
        """A user's rerun of an ended run: a new run now (its id has this moment's time), with the
        original's scheduled time (so ``ctx.scheduled_at`` is the one the original saw) and the given
        inputs, outside the schedule; the job's current spec of ``spec_version``."""
        now = await self._store.time_ms()
        request = FireRequest(job_id, spec, original.scheduled_ms, None, triggers.NONE, "allow", inputs,
                              spec_version=spec_version, run_ms=now, rerun_of=original.id, keep_steps=keep_steps)
        ((run_id, res),) = (await self._fire([[request]]))[0]
        return run_id, res.status

    async def trigger_now(self, job_id: str, spec: pb.JobSpec, spec_version: int) -> tuple[str, FireStatus]:
        """A user's manual firing: a run now, outside the schedule (which is left as it is), with the job's
        spec of ``spec_version`` (refused as ``changed`` if it is no longer the job's)."""
        request = FireRequest(job_id, spec, await self._store.time_ms(), None, triggers.NONE,
                              _OVERLAP.get(spec.overlap, "allow"), split_job(spec), spec_version=spec_version)
        ((run_id, res),) = (await self._fire([[request]]))[0]
        return run_id, res.status
