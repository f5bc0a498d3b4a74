"""The master's hub: the components of one master process and how they react to task outcomes.

Every path that changes a task in Redis — a worker's report, the reaper, a cancel — ends here with the
script's answer, and :class:`MasterCore` turns it into in-memory consequences:

* a task back in a ready queue → the scheduler wakes;
* a failed attempt with a retry due → a timer in the wheel releases it after its backoff;
* a run ended → its waiters in the purgatory complete, and a fixed-delay job gets its next fire time;
* a lease lost or a task cancelled while running → its worker is told to kill it (its slot stays taken
  until the worker reports the attempt's end: :meth:`WorkerRegistry.release`, called only from reports).

Nothing here decides a state change; the Lua scripts did. This module only keeps memory in step.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Iterable

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.config import MasterConfig
from sparkyard.master import triggers
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.purgatory import Purgatory
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.scheduler import SlotScheduler
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import CancelResult, Reaped, Store, Verdict
from sparkyard.master.store_outcomes import RescheduleStatus
from sparkyard.master.timer import SystemTimer
from sparkyard.states import Loss, RunState, TaskState, VerdictKind
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Retry releases that fall due together are sent to Redis in one call (and so are the checks of ended
# runs whose job's spec is not cached).
RELEASE_BATCH = 1000
# After a failed check of ended runs (Redis unreachable), the next try comes this much later.
AFTER_RUN_RETRY_S = 1.0


def _fixed_delay(spec: pb.JobSpec) -> bool:
    return spec.trigger.WhichOneof("kind") == "every" and spec.trigger.every.fixed_delay


class MasterCore:
    """Owns the in-memory parts of a master and keeps them in step with Redis."""

    def __init__(self, cfg: MasterConfig, store: Store, clock: Clock, timer: SystemTimer,
                 arm: Callable[[str, int], None], metrics: MasterMetrics | None = None) -> None:
        self.cfg = cfg
        self.metrics = metrics or MasterMetrics()
        self.store = store
        self.clock = clock
        self.timer = timer
        self.purgatory = Purgatory(timer, "wait-run")
        self.registry = WorkerRegistry(clock, on_capacity=self.wake)
        self.scheduler = SlotScheduler(
            store, self.registry, clock,
            lease_ms=int(cfg.lease_s * 1000),
            timeout_grace_ms=int(cfg.timeout_grace_s * 1000),
            dispatch_batch=cfg.dispatch_batch,
        )
        self._pending_release: set[str] = set()
        self._release_task: asyncio.Task[None] | None = None
        # Ended runs of jobs whose spec is not cached: job id → run id, checked against `awaiting` in batches.
        self._unknown_ended: dict[str, str] = {}
        self._unknown_flushing = False
        self._background: set[asyncio.Task[None]] = set()
        self._arm = arm  # arms the timer of a job's next fire time (Arming.consider)
        self.run_end_listeners: list[Callable[[str, RunState], None]] = []  # told of every run that ends

    def wake(self) -> None:
        self.scheduler.wake()

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        """Run a coroutine in the background, logging (not losing) its failure."""
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task %s failed", task.get_name(), exc_info=task.exception())

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)

    # ---- reactions ----------------------------------------------------------------------------------

    def apply_verdicts(self, verdicts: Iterable[Verdict]) -> None:
        """After report.lua, for results: arm retries, wake waiters (the slot was freed on receipt).

        Every accepted result wakes the scheduler: the task may have been retried (READY again), or its
        end may have let a task of a capped run (``--max-concurrent``) into the ready queue.
        """
        for v in verdicts:
            if v.verdict is not VerdictKind.ACCEPTED or v.task_state is TaskState.LEASED:
                continue
            if v.task_state is not None:
                self.metrics.tasks.labels(v.task_state.value).inc()
            self.wake()
            if v.task_state is TaskState.FAILED and v.not_before_ms:
                self.arm_release(v.task_id, v.not_before_ms)
            if v.run_state:
                self.run_ended(v.run_id, v.run_state)

    def apply_reaped(self, reaped: Iterable[Reaped]) -> None:
        """After reap.lua: lost leases requeued (or DEAD), timed-out attempts failed."""
        for r in reaped:
            why = "lease expired" if r.what is Loss.LOST else "timed out"
            (self.metrics.leases_expired if r.what is Loss.LOST else self.metrics.timeouts).inc()
            self.metrics.tasks.labels(r.task_state.value).inc()
            log.info("task=%s %s on worker=%s → %s", r.task_id, why, r.worker, r.task_state.value)
            # The worker may still be running it (hung, partitioned): tell it to stop if it is connected. The
            # token makes sure a newer attempt of the same task on that worker is left alone.
            self.registry.send(r.worker, pb.MasterMessage(cancel=pb.CancelTask(
                task_id=r.task_id, fencing_token=r.token,
                reason=why)))
            if r.task_state is TaskState.READY:
                self.wake()
            elif r.task_state is TaskState.FAILED and r.not_before_ms:
                self.arm_release(r.task_id, r.not_before_ms)
            if r.run_state:
                self.run_ended(r.run_id, r.run_state)

    def apply_cancel(self, result: CancelResult, reason: str) -> None:
        self.wake()  # a cancelled task of a capped run may have let a gated one into the ready queue
        for task_id, worker, token in result.leased:
            self.registry.send(worker, pb.MasterMessage(cancel=pb.CancelTask(
                task_id=task_id, fencing_token=token, reason=reason)))
        for run_id, state in result.ended_runs:
            self.run_ended(run_id, state)

    async def task_ids(self, run_ids: list[str]) -> list[str]:
        """Every task id of these runs (a cancel names them all)."""
        counts = await self.store.run_task_counts(run_ids)
        return [ids.task_id(run, i) for run in run_ids for i in range(counts.get(run, 0))]

    async def cancel_runs(self, run_ids: list[str], reason: str) -> None:
        """Cancel runs and everything running for them (overlap policy REPLACE)."""
        result = await self.store.cancel(reason, run_ids=run_ids, task_ids=await self.task_ids(run_ids))
        self.apply_cancel(result, reason)

    def run_ended(self, run_id: str, state: RunState) -> None:
        log.log(logging.DEBUG if state is RunState.SUCCEEDED else logging.INFO, "run=%s ended %s", run_id, state.value)
        self.metrics.runs.labels(state.value).inc()
        self.purgatory.complete_watchers(run_id)
        for listener in self.run_end_listeners:
            listener(run_id, state)
        job_id = run_id.split(".", 1)[0]
        spec = self.store.cached_spec(job_id)
        if spec is None:
            # Not in the spec cache (a burst larger than it, or a run another master fired): ask Redis
            # whether the job waits for this run, for many runs in one round trip.
            self._unknown_ended[job_id] = run_id
            if not self._unknown_flushing:
                self._unknown_flushing = True
                self.spawn(self._flush_unknown_ended(), "after-run-check")
        elif _fixed_delay(spec):
            self.spawn(self._after_run(job_id, run_id), f"after-run-{run_id}")

    def job_ended(self, job_id: str) -> None:
        """A job was cancelled: wake whoever waits for a run of it that will now never fire."""
        self.purgatory.complete_watchers(job_id)

    async def _flush_unknown_ended(self) -> None:
        try:
            while self._unknown_ended:
                batch = dict(self._unknown_ended.popitem()
                             for _ in range(min(RELEASE_BATCH, len(self._unknown_ended))))
                try:
                    waiting = await self.store.awaiting_among(list(batch))
                except Exception:
                    log_failure(log, "checking %d ended runs for fixed-delay jobs failed; retrying in %.0fs",
                                len(batch), AFTER_RUN_RETRY_S)
                    self._unknown_ended.update(batch)
                    await self.clock.sleep(AFTER_RUN_RETRY_S)
                    continue
                for job_id in waiting:
                    self.spawn(self._after_run(job_id, batch[job_id]), f"after-run-{batch[job_id]}")
        finally:
            self._unknown_flushing = False

    async def _after_run(self, job_id: str, run_id: str) -> None:
        """Fixed-delay jobs: the next fire time counts from the end of this run."""
        job = await self.store.get_job(job_id)
        if job is None or not _fixed_delay(job.spec):
            return  # gone, or updated to another trigger (the update gave it its next fire time)
        if job.awaited_run_id and job.awaited_run_id != run_id:
            return  # the job waits for another run's end (or for none: rescheduled already)
        next_ms = triggers.after_run_ms(job.spec.trigger, await self.store.time_ms(), job.runs)
        status, next_fire = await self.store.reschedule_after_run(job_id, run_id, next_ms)
        if status is RescheduleStatus.OK and next_fire >= 0:
            self._arm(job_id, next_fire)

    # ---- retry backoffs -----------------------------------------------------------------------------

    def arm_release(self, task_id: str, not_before_ms: int) -> None:
        """Release a FAILED task to its ready queue when its backoff ends (Redis TIME decides)."""
        def due() -> None:
            self._pending_release.add(task_id)
            if self._release_task is None or self._release_task.done():
                self._release_task = asyncio.ensure_future(self._flush_releases())

        self.timer.schedule_at_wall(not_before_ms / 1000.0, due)

    async def _flush_releases(self) -> None:
        while self._pending_release:
            batch = [self._pending_release.pop() for _ in range(min(RELEASE_BATCH, len(self._pending_release)))]
            try:
                released = await self.store.release_due(len(batch), batch)
            except Exception:
                log_failure(log, "releasing %d retries failed; the reaper's sweep will release them", len(batch))
                return
            if released:
                self.wake()
            # A task whose Redis-time backoff is not over yet (clock skew) is released by the reaper's sweep.
