"""From durable schedule to timing wheel to fired runs (LTS's PreLoader, without its 1-second pull).

The schedule lives in Redis (``schedule``: job id → next fire ms). The preloader loads every entry due
within the horizon (60 s by default) into the timing wheel, tops the wheel up every half horizon, and
has new entries armed as they are written (submit, resume, next fire time: :mod:`sparkyard.master.arming`).
When an entry's timer expires, the job is fired:

1. read the job (state, spec, runs so far) and plan the firing(s) with its misfire policy
   (:func:`sparkyard.master.triggers.plan`);
2. for overlap REPLACE, cancel the job's active runs first;
3. split the run into tasks (:mod:`sparkyard.master.splitter`);
4. ``fire.lua``: create the run and READY tasks and advance the schedule in one step — only if the entry
   still says what we planned from, so a second master firing the same entry finds it ``stale``/``exists``;
5. arm the next fire time and wake the scheduler.

Firings are processed by a small pool of coroutines fed by a queue, so 10,000 jobs due in the same second
make 10,000 Redis calls in flight a few at a time rather than 10,000 concurrent tasks.
"""

from __future__ import annotations

import asyncio
import logging

from sparkyard.master import triggers
from sparkyard.master.arming import Arming
from sparkyard.master.core import MasterCore
from sparkyard.master.splitter import split_job
from sparkyard.master.store import FireRequest
from sparkyard.master.timer import TimerTask
from sparkyard.states import JobState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Coroutines firing due jobs concurrently; each takes up to FIRE_BATCH due entries at a time and fires
# them in one pipeline, so 10,000 jobs due in the same second cost ~20 round trips, not 10,000.
FIRE_CONCURRENCY = 4
FIRE_BATCH = 500

_OVERLAP = {
    pb.OVERLAP_UNSPECIFIED: "allow",
    pb.OVERLAP_ALLOW: "allow",
    pb.OVERLAP_FORBID: "forbid",
    pb.OVERLAP_REPLACE: "replace",
}


class Preloader:
    def __init__(self, core: MasterCore, arming: Arming) -> None:
        self._core = core
        self._arming = arming
        self._store = core.store
        self._timer = core.timer
        self._clock = core.clock
        self._horizon_ms = arming.horizon_ms
        self._threshold_ms = int(core.cfg.misfire_threshold_s * 1000)
        self._queue = arming.due
        self._workers: list[asyncio.Task[None]] = []
        self._topup: TimerTask | None = None
        self.fired = 0

    async def start(self) -> None:
        self._workers = [asyncio.create_task(self._fire_loop(), name=f"fire-{i}") for i in range(FIRE_CONCURRENCY)]
        await self._load()
        await self._recover_awaiting()

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
        for job_id, due_ms in await self._store.due_schedule(until):
            self._arming.consider(job_id, due_ms)
        self._topup = self._timer.schedule(self._horizon_ms / 2000.0, self._on_topup)

    def _on_topup(self) -> None:
        self._core.spawn(self._load(), "preload-topup")

    async def _recover_awaiting(self) -> None:
        """Fixed-delay jobs whose run ended while no master was watching get their next fire time now."""
        for job_id in await self._store.awaiting_jobs():
            job = await self._store.get_job(job_id)
            if job is None or not job.last_run_id:
                continue
            run = await self._store.get_run(job.last_run_id, with_tasks=False)
            if run is not None and run.finished_ms:
                self._core.run_ended(run.id, run.state)

    async def _fire_loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < FIRE_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self.fire_batch(batch)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("firing %d due jobs failed; they are retried at the next top-up", len(batch))

    async def fire_batch(self, due: list[tuple[str, int]]) -> None:
        """Fire many due entries: simple ones in one pipeline, the rest (misfires, skips, replace) one by one."""
        progress = await self._store.job_progress([job_id for job_id, _ in due])
        now = self._now_ms()
        simple: list[tuple[FireRequest, int]] = []
        for job_id, due_ms in due:
            state, runs = progress.get(job_id, ("", 0))
            spec = await self._store.get_spec(job_id) if state == JobState.ACTIVE.value else None
            if spec is None:
                continue
            plan = triggers.plan(spec, due_ms, now, self._threshold_ms, runs)
            overlap = _OVERLAP.get(spec.overlap, "allow")
            if len(plan.fires) == 1 and plan.skipped_at == triggers.NONE and overlap != "replace":
                request = FireRequest(job_id, spec, plan.fires[0], due_ms, plan.next_ms, overlap,
                                      split_job(spec))
                simple.append((request, plan.next_ms))
            else:
                await self.fire_due(job_id, due_ms)
        if not simple:
            return
        created = False
        for (request, next_ms), (run_id, res) in zip(simple, await self._store.fire_many([r for r, _ in simple])):
            log.log(logging.DEBUG if res.status == "created" else logging.INFO, "job=%s run=%s fire %s (late %d ms)",
                    request.job_id, run_id, res.status, res.fired_ms - request.scheduled_ms)
            if res.status in ("created", "skipped"):
                self.fired += 1
                created = created or res.status == "created"
                if next_ms >= 0:
                    self._arming.consider(request.job_id, next_ms)
        if created:
            self._core.wake()

    async def fire_due(self, job_id: str, due_ms: int) -> None:
        """Fire the schedule entry (job, due time) according to the job's policies."""
        job = await self._store.get_job(job_id)
        if job is None or job.state != JobState.ACTIVE:
            return
        spec = job.spec
        plan = triggers.plan(spec, due_ms, self._now_ms(), self._threshold_ms, job.runs)
        overlap = _OVERLAP.get(spec.overlap, "allow")
        expected = due_ms
        if plan.skipped_at != triggers.NONE:
            after = plan.fires[0] if plan.fires else plan.next_ms
            run_id, res = await self._store.fire(job_id, spec, plan.skipped_at, expected_ms=expected,
                                                 next_fire_ms=after, overlap=overlap, inputs=[],
                                                 skip_reason=plan.skip_reason)
            log.info("job=%s run=%s %s: %s", job_id, run_id, res.status, plan.skip_reason)
            if res.status not in ("skipped", "created"):
                return
            expected = after
        for i, scheduled in enumerate(plan.fires):
            next_ms = plan.fires[i + 1] if i + 1 < len(plan.fires) else plan.next_ms
            if overlap == "replace":
                active = await self._store.active_runs(job_id)
                if active:
                    await self._core.cancel_runs(active, f"replaced by the firing due at {scheduled}")
            run_id, res = await self._store.fire(job_id, spec, scheduled, expected_ms=expected, next_fire_ms=next_ms,
                                                 overlap=overlap, inputs=split_job(spec))
            log.info("job=%s run=%s fire %s (late %d ms)", job_id, run_id, res.status, res.fired_ms - scheduled)
            if res.status not in ("created", "skipped"):
                return
            self.fired += 1
            expected = next_ms
            if res.status == "created":
                self._core.wake()
        if plan.next_ms >= 0:
            self._arming.consider(job_id, plan.next_ms)

    async def trigger_now(self, job_id: str, spec: pb.JobSpec) -> tuple[str, str]:
        """A user's manual firing: a run now, outside the schedule (which is left as it is)."""
        now = await self._store.time_ms()
        run_id, res = await self._store.fire(job_id, spec, now, expected_ms=None, next_fire_ms=triggers.NONE,
                                             overlap=_OVERLAP.get(spec.overlap, "allow"),
                                             inputs=split_job(spec))
        if res.status == "created":
            self._core.wake()
        return run_id, res.status
