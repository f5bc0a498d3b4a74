"""What the scripts decided, turned into the master's in-memory consequences: the one place a task's or a
run's change becomes an event.

Every path that changes a task in Redis — a worker's report, the reaper, a cancel, a firing — ends here with
the script's answer:

* a task back in a ready queue, or a slot's task ended → :class:`WorkReady` (the scheduler looks again);
* a failed attempt with a retry due → its backoff timer (:class:`sparkyard.master.retries.Retries`);
* a run ended → :class:`RunEnded`, published once, here, by the component whose script ended it; its
  reactions (waiters, fixed-delay next fire, child jobs, backfill, webhooks, metrics) are subscribers; a
  step's run whose end ended its pipeline run comes back from the script with that end (lib_pipelines.lua
  pipeline_end), published right after it as the pipeline run's own :class:`RunEnded`;
* a lease lost or a task cancelled while running → its worker is told to kill it (its slot stays taken
  until the worker reports the attempt's end: :meth:`WorkerRegistry.release`, called only from reports).

Nothing here decides a state change; the Lua scripts did.
"""

from __future__ import annotations

import logging
from typing import Iterable

from sparkyard import ids
from sparkyard.master.events import WORK_READY, Events, JobEnded, RunEnded
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.retries import Retries
from sparkyard.master.store import Store
from sparkyard.master.store_outcomes import PipelineEnd
from sparkyard.master.store_values import CancelResult, Reaped, Verdict
from sparkyard.states import Loss, RunState, TaskState, VerdictKind
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)


class Outcomes:
    def __init__(self, store: Store, registry: WorkerRegistry, retries: Retries, events: Events,
                 metrics: MasterMetrics) -> None:
        self._store = store
        self._registry = registry
        self._retries = retries
        self._events = events
        self._metrics = metrics

    def work_ready(self) -> None:
        self._events.publish(WORK_READY)

    def apply_verdicts(self, verdicts: Iterable[Verdict]) -> None:
        """After report.lua, for results: arm retries, end runs (the slot was freed on receipt).

        Every accepted result wakes the scheduler: the task may have been retried (READY again), or its
        end may have let a task of a capped run (``--max-concurrent``) into the ready queue.
        """
        for v in verdicts:
            if v.verdict is not VerdictKind.ACCEPTED or v.task_state is TaskState.LEASED:
                continue
            if v.task_state is not None:
                self._metrics.tasks_by[v.task_state.value].inc()
            self.work_ready()
            if v.task_state is TaskState.FAILED and v.not_before_ms:
                self._retries.arm(v.task_id, v.not_before_ms)
            if v.run_state:
                self.run_ended(v.run_id, v.run_state, v.pipeline)

    def apply_reaped(self, reaped: Iterable[Reaped]) -> None:
        """After reap.lua: lost leases requeued (or DEAD), timed-out attempts failed."""
        for r in reaped:
            why = "lease expired" if r.what is Loss.LOST else "timed out"
            (self._metrics.leases_expired if r.what is Loss.LOST else self._metrics.timeouts).inc()
            self._metrics.tasks_by[r.task_state.value].inc()
            log.info("task=%s %s on worker=%s → %s", r.task_id, why, r.worker, r.task_state.value)
            # The worker may still be running it (hung, partitioned): tell it to stop if it is connected. The
            # token makes sure a newer attempt of the same task on that worker is left alone.
            self._registry.send(r.worker, pb.MasterMessage(cancel=pb.CancelTask(
                task_id=r.task_id, fencing_token=r.token, reason=why)))
            if r.task_state is TaskState.READY:
                self.work_ready()
            elif r.task_state is TaskState.FAILED and r.not_before_ms:
                self._retries.arm(r.task_id, r.not_before_ms)
            if r.run_state:
                self.run_ended(r.run_id, r.run_state, r.pipeline)

    def apply_cancel(self, result: CancelResult, reason: str) -> None:
        self.work_ready()  # a cancelled task of a capped run may have let a gated one into the ready queue
        for task_id, worker, token in result.leased:
            self._registry.send(worker, pb.MasterMessage(cancel=pb.CancelTask(
                task_id=task_id, fencing_token=token, reason=reason)))
        for run_id, state, pipeline in result.ended_runs:
            self.run_ended(run_id, state, pipeline)

    def run_ended(self, run_id: str, state: RunState, pipeline: PipelineEnd | None = None) -> None:
        """A script ended this run (and with it ``pipeline``, the pipeline run of a step's run): the one
        signal of each, the step's first."""
        self._publish_end(run_id, state)
        if pipeline is not None:
            self._metrics.pipeline_runs.labels(pipeline.state.value).inc()
            self._metrics.pipeline_duration.labels(pipeline.state.value).observe(pipeline.took_ms / 1000)
            self._publish_end(pipeline.run_id, pipeline.state)
        # The script that ended it may have made runs (a pipeline's next steps, child jobs): look for work.
        self.work_ready()

    def _publish_end(self, run_id: str, state: RunState) -> None:
        log.log(logging.DEBUG if state is RunState.SUCCEEDED else logging.INFO, "run=%s ended %s", run_id, state.value)
        self._metrics.runs_by[state.value].inc()
        self._events.publish(RunEnded(run_id, state))

    def job_ended(self, job_id: str) -> None:
        """A job was cancelled or deleted: whoever waits for a run of it that will now never fire wakes."""
        self._events.publish(JobEnded(job_id))

    async def task_ids(self, run_ids: list[str]) -> list[str]:
        """Every task id of these runs (a cancel names them all)."""
        counts = await self._store.run_task_counts(run_ids)
        return [ids.task_id(run, i) for run in run_ids for i in range(counts.get(run, 0))]

    async def cancel_runs(self, run_ids: list[str], reason: str) -> None:
        """Cancel runs and everything running for them (overlap policy REPLACE)."""
        result = await self._store.cancel(reason, run_ids=run_ids, task_ids=await self.task_ids(run_ids))
        self.apply_cancel(result, reason)
