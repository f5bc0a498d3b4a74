"""The :class:`~sparkyard.master.store.Store` contract kept in one process's memory, against an injected clock.

Each method does what the Lua script of the same name does (``common/scripts/*.lua``, helpers in
``lib.lua``), step for step and in the same order, so the records, verdicts and queue orders it returns are
those Redis would return — ``tests/contract`` checks both against one suite. Where a script reads Redis
``TIME``, this store reads :meth:`Clock.now`; with a :class:`~sparkyard.clock.FakeClock`, leases expire
and backoffs end exactly when a test advances the clock, without waiting.

A worked example (one task, one worker)::

    clock = FakeClock()
    store = MemoryStore(clock)
    await store.submit_many([NewJob(job_id, spec, "abs", 0, fire_now=[()])], 60_000)  # one READY task
    (claim,) = await store.claim("default", [(task_id, "w1")], lease_ms=10_000, timeout_grace_ms=0)
    clock.advance(11)                      # nobody renewed the lease within 10 s
    await store.reap_expired(max_lost=3)   # READY again, prev_worker w1, one LOST attempt
    (again,) = await store.claim("default", [(task_id, "w2")], lease_ms=10_000, timeout_grace_ms=0)
    await store.report([Report(task_id, claim.token, "SUCCEEDED")])   # 'stale': w1's token is old

The entries it keeps per job, run, task and attempt are in :mod:`sparkyard.master.memory_records`; what it
holds and its reads in :mod:`sparkyard.master.memory_state`; the scripts of a task's lease (peek, claim,
renew, report, release, reap) in :mod:`sparkyard.master.memory_dispatch`. This module adds the scripts of
jobs and runs: submit, fire, cancel, pause, resume and the reschedule after a run.

It is safe for one event loop: no method awaits in the middle, so each call is atomic like a script.
Invalid arguments (an unknown report outcome, a pause target other than PAUSED/ACTIVE) raise ValueError
before anything changes.
"""

from __future__ import annotations

from typing import Sequence

from sparkyard import ids
from sparkyard.master.memory_dispatch import MemoryDispatch
from sparkyard.master.memory_records import AttemptEnd, JobEntry, RunEntry, TaskEntry
from sparkyard.master.store import (
    CancelResult,
    FireRequest,
    FireResult,
    NewJob,
    RunBlock,
    SubmitResult,
    UpdateResult,
)
from sparkyard.states import AttemptState, JobState, RunState, TaskState, can_move
from sparkyard.v1 import sparkyard_pb2 as pb

# As lib.lua: only the first this-many task indexes of a recurring job remember their last worker.
AFFINITY_MAX_INDEX = 256
# The job states a pause or resume may ask for.
PAUSE_TARGETS = frozenset({JobState.PAUSED, JobState.ACTIVE})


class MemoryStore(MemoryDispatch):
    """Sparkyard's shared state as Python objects; time from ``clock`` (wall clock, milliseconds)."""

    # ---- submit and fire (submit.lua, fire.lua, lib.lua create_run) ---------------------------------

    async def submit_many(self, jobs: Sequence[NewJob], idempotency_ttl_ms: int) -> list[SubmitResult]:
        if idempotency_ttl_ms <= 0 and any(job.idempotency_key for job in jobs):
            raise ValueError(f"idempotency TTL must be positive, not {idempotency_ttl_ms} ms")
        now = self._now()
        copies: dict[int, pb.JobSpec] = {}
        out: list[SubmitResult] = []
        for new in jobs:
            existing = self._idempotent_job(new.idempotency_key, now)
            if existing is not None:
                job = self._jobs[existing]
                out.append(SubmitResult(existing, True, job.created_ms, job.next_fire_ms))
                continue
            if new.job_id in self._jobs:
                out.append(SubmitResult(new.job_id, False, 0, -1, id_taken=True))
                continue
            spec = copies.get(id(new.spec))
            if spec is None:
                spec = copies[id(new.spec)] = pb.JobSpec()
                spec.CopyFrom(new.spec)
            fire = now + new.fire_value_ms if new.fire_mode == "delay" else new.fire_value_ms
            self._job_index.add(new.job_id, now)
            if new.idempotency_key:
                self._idempotency[new.idempotency_key] = (new.job_id, now + idempotency_ttl_ms)
            if new.fire_now is None:
                self._jobs[new.job_id] = JobEntry(spec, JobState.ACTIVE, now, now, next_fire_ms=fire)
                self._schedule.add(new.job_id, fire)
                out.append(SubmitResult(new.job_id, False, now, fire))
                continue
            scheduled = new.fire_value_ms
            run_id = ids.run_id(new.job_id, scheduled)
            job = self._jobs[new.job_id] = JobEntry(spec, JobState.COMPLETED, now, now, runs=1, last_run_id=run_id)
            self._job_runs[new.job_id].add(run_id, scheduled)
            block = RunBlock.of(new.spec, scheduled, new.fire_now, self.priority_aging_ms)
            self._create_run(job, new.job_id, run_id, scheduled, now, block, new_job=True)
            out.append(SubmitResult(new.job_id, False, now, scheduled, fired=True))
        return out

    def _idempotent_job(self, key: str, now: int) -> str | None:
        """The job stored under an idempotency key within its TTL, if it still exists."""
        entry = self._idempotency.get(key) if key else None
        if entry is None:
            return None
        job_id, expires_ms = entry
        if expires_ms <= now:
            del self._idempotency[key]
            return None
        return job_id if job_id in self._jobs else None

    async def fire_many(self, requests: Sequence[FireRequest]) -> list[tuple[str, FireResult]]:
        return [self._fire(request) for request in requests]

    def _fire(self, r: FireRequest) -> tuple[str, FireResult]:
        now = self._now()
        run_id = ids.run_id(r.job_id, r.scheduled_ms)
        job = self._jobs.get(r.job_id)
        manual = r.expected_ms is None
        if job is None or job.state is JobState.CANCELLED or (not manual and job.state is not JobState.ACTIVE):
            return run_id, FireResult("inactive", now, "")
        if not manual and self._schedule.score(r.job_id) != r.expected_ms:
            return run_id, FireResult("stale", now, "")
        if job.spec_version != r.spec_version:
            return run_id, FireResult("changed", now, "")
        existing = self._runs.get(run_id)
        if existing is not None and manual:
            return run_id, FireResult("exists", now, existing.state.value)
        max_runs = r.spec.trigger.max_runs
        if not manual and max_runs and job.runs >= max_runs:
            self._schedule.remove(r.job_id)
            job.next_fire_ms, job.updated_ms = -1, now
            if can_move("job", job.state.value, JobState.COMPLETED.value):
                job.state = JobState.COMPLETED
            return run_id, FireResult("exhausted", now, "")
        skip_reason, blocker = r.skip_reason, ""
        if existing is None and not skip_reason and r.overlap == "forbid" and self._active[r.job_id]:
            blocker = min(self._active[r.job_id])
            skip_reason = f"overlap forbidden: run {blocker} is still active"
        if not manual:
            if r.next_fire_ms >= 0:
                self._schedule.add(r.job_id, r.next_fire_ms)
                job.next_fire_ms = r.next_fire_ms
            else:
                self._schedule.remove(r.job_id)
                job.next_fire_ms = -1
                if r.next_fire_ms == -2:
                    # A skipped firing waits for the end of the run that blocked it (fire.lua).
                    self._awaiting.add(r.job_id)
                    job.awaits = blocker or run_id
                elif can_move("job", job.state.value, JobState.COMPLETED.value):
                    job.state = JobState.COMPLETED
        job.updated_ms = now
        if existing is not None:  # a scheduled firing moves the schedule past a run made already
            return run_id, FireResult("exists", now, existing.state.value)
        job.last_run_id = run_id
        self._job_runs[r.job_id].add(run_id, r.scheduled_ms)
        if skip_reason:
            self._runs[run_id] = RunEntry(r.job_id, RunState.SKIPPED, r.scheduled_ms, now, 0, finished_ms=now,
                                      reason=skip_reason)
            return run_id, FireResult("skipped", now, RunState.SKIPPED.value)
        block = RunBlock.of(r.spec, r.scheduled_ms, r.inputs, self.priority_aging_ms, r.spec_version)
        state = self._create_run(job, r.job_id, run_id, r.scheduled_ms, now, block, new_job=False)
        return run_id, FireResult("created", now, state.value)

    def _create_run(self, job: JobEntry, job_id: str, run_id: str, scheduled_ms: int, now: int, b: RunBlock,
                    *, new_job: bool) -> RunState:
        """lib.lua create_run: a run with no tasks is SUCCEEDED at once and never active."""
        if not new_job:
            job.runs += 1
        state = RunState.SCHEDULED if b.tasks else RunState.SUCCEEDED
        run = self._runs[run_id] = RunEntry(job_id, state, scheduled_ms, now, len(b.tasks),
                                        finished_ms=0 if b.tasks else now,
                                        timeout_ms=max(b.timeout_ms, 0), cap=max(b.cap, 0),
                                        spec_version=b.spec_version)
        if b.max_attempts > 1:
            run.max_attempts, run.backoff_ms = b.max_attempts, b.backoff_ms
            run.backoff_mult, run.backoff_max_ms = b.backoff_mult, b.backoff_max_ms
        if not b.tasks:
            return state
        self._active[job_id].add(run_id)
        for i, inputs in enumerate(b.tasks):
            task_id = ids.task_id(run_id, i)
            aff = b.recurring and i < AFFINITY_MAX_INDEX
            self._tasks[task_id] = TaskEntry(
                run_id, job_id, i, b.group, b.score, "" if inputs == "[]" else inputs, b.routing,
                b.route if b.routing else "", aff, prev_worker=job.last_workers.get(i, "") if aff else "")
            if run.cap and i >= run.cap:
                run.gate.add(task_id, i)
            else:
                self._ready[b.group].add(task_id, b.score)
        self._groups.add(b.group)
        return state

    # ---- cancel, pause, resume (cancel.lua, job_state.lua, reschedule.lua) ----------------------------

    async def cancel(self, reason: str, *, job_id: str = "", run_ids: Sequence[str] = (),
                     task_ids: Sequence[str] = ()) -> CancelResult:
        now = self._now()
        if job_id and not self._active[job_id] <= set(run_ids):
            return CancelResult("retry", [], [], [])
        cancelled: list[str] = []
        leased: list[tuple[str, str, int]] = []
        ended: list[tuple[str, str]] = []
        job = self._jobs.get(job_id) if job_id else None
        if job is not None and can_move("job", job.state.value, JobState.CANCELLED.value):
            job.state, job.updated_ms, job.next_fire_ms = JobState.CANCELLED, now, -1
            self._schedule.remove(job_id)
            self._awaiting.discard(job_id)
            job.awaits = ""
            cancelled.append(job_id)
        for run_id in run_ids:
            run = self._runs.get(run_id)
            if run is not None and can_move("run", run.state.value, RunState.CANCELLED.value):
                run.reason = reason
        for task_id in task_ids:
            t = self._tasks.get(task_id)
            if t is None or not can_move("task", t.state.value, TaskState.CANCELLED.value):
                continue
            if t.state is TaskState.LEASED:
                self._drop_lease(task_id, t)
                self._finish_attempt(t, AttemptEnd(AttemptState.CANCELLED, now, reason))
                leased.append((task_id, t.worker, t.token or 0))
            elif t.state is TaskState.READY:
                self._ready[t.group].remove(task_id)
                self._runs[t.run_id].gate.remove(task_id)
            else:
                self._delayed.remove(task_id)
            t.state, t.worker, t.error = TaskState.CANCELLED, "", reason
            cancelled.append(task_id)
            run_state = self._task_terminal(t.run_id, "cancelled", now)
            if run_state:
                ended.append((t.run_id, run_state))
                cancelled.append(t.run_id)
        return CancelResult("ok", cancelled, leased, ended)

    async def set_job_state(self, job_id: str, target: JobState, next_fire_ms: int = -1) -> tuple[str, str, int]:
        if target not in PAUSE_TARGETS:
            raise ValueError(f"a job can be set PAUSED or ACTIVE, not {target.value}")
        job = self._jobs.get(job_id)
        if job is None:
            return "missing", "", -1
        if job.state is target:
            return "unchanged", job.state.value, job.next_fire_ms
        if not can_move("job", job.state.value, target.value):
            return "illegal", job.state.value, job.next_fire_ms
        if target is JobState.PAUSED:
            self._schedule.remove(job_id)
        else:
            if next_fire_ms >= 0:
                job.next_fire_ms = next_fire_ms
            if job.next_fire_ms >= 0:
                self._schedule.add(job_id, job.next_fire_ms)
        job.state, job.updated_ms = target, self._now()
        return "ok", target.value, job.next_fire_ms

    async def update_spec(self, job_id: str, base_version: int, spec: pb.JobSpec, next_fire_ms: int) -> UpdateResult:
        job = self._jobs.get(job_id)
        if job is None:
            return UpdateResult("missing", "", 0, -1)
        if job.state not in (JobState.ACTIVE, JobState.PAUSED):
            return UpdateResult("ended", job.state.value, job.spec_version, job.next_fire_ms)
        if job.spec_version != base_version:
            return UpdateResult("conflict", job.state.value, job.spec_version, job.next_fire_ms)
        job.old_specs[job.spec_version] = job.spec
        job.spec = pb.JobSpec()
        job.spec.CopyFrom(spec)
        job.spec_version += 1
        job.spec_updated_ms = job.updated_ms = self._now()
        if next_fire_ms >= 0:
            job.next_fire_ms = next_fire_ms
            if job.state is JobState.ACTIVE:
                self._schedule.add(job_id, next_fire_ms)
            self._awaiting.discard(job_id)
            job.awaits = ""
        return UpdateResult("ok", job.state.value, job.spec_version, job.next_fire_ms)

    async def reschedule_after_run(self, job_id: str, run_id: str, next_fire_ms: int) -> tuple[str, int]:
        job = self._jobs.get(job_id)
        if job is None or (job.awaits or job.last_run_id) != run_id or job_id not in self._awaiting:
            return "not_awaiting", -1
        self._awaiting.discard(job_id)
        job.awaits = ""
        if next_fire_ms >= 0:
            job.next_fire_ms = next_fire_ms
            if job.state is JobState.ACTIVE:
                self._schedule.add(job_id, next_fire_ms)
        else:
            job.next_fire_ms = -1
            if can_move("job", job.state.value, JobState.COMPLETED.value):
                job.state = JobState.COMPLETED
        return "ok", next_fire_ms
