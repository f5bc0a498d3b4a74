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
jobs and runs: submit, fire, cancel, pause, resume, the reschedule after a run, delete and retention.

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
    PurgeResult,
    RetentionBounds,
    RunBlock,
    SubmitResult,
    UpdateResult,
)
from sparkyard.states import JOB_TERMINAL, RUN_TERMINAL, AttemptState, JobState, RunState, TaskState, can_move
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
            if new.fire_mode == "after" and new.after not in self._jobs:
                out.append(SubmitResult(new.job_id, False, 0, -1, parent_missing=True))
                continue
            spec = copies.get(id(new.spec))
            if spec is None:
                spec = copies[id(new.spec)] = pb.JobSpec()
                spec.CopyFrom(new.spec)
            fire = now + new.fire_value_ms if new.fire_mode == "delay" else new.fire_value_ms
            self._job_index.add(new.job_id, now)
            if new.idempotency_key:
                self._idempotency[new.idempotency_key] = (new.job_id, now + idempotency_ttl_ms)
            if new.fire_mode == "after":
                self._jobs[new.job_id] = JobEntry(spec, JobState.ACTIVE, now, now, after=new.after)
                self._children[new.after].add(new.job_id)
                out.append(SubmitResult(new.job_id, False, now, -1))
                continue
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
        run_id = ids.run_id(r.job_id, r.scheduled_ms if r.run_ms is None else r.run_ms)
        job = self._jobs.get(r.job_id)
        manual = r.expected_ms is None
        only_active = not manual or bool(r.after_run)  # a child job fired by its parent skips while paused
        if job is None or job.state is JobState.CANCELLED or (only_active and job.state is not JobState.ACTIVE):
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
        block = RunBlock.of(r.spec, r.scheduled_ms, r.inputs, self.priority_aging_ms, r.spec_version, r.rerun_of,
                            r.after_run)
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
                                        spec_version=b.spec_version, rerun_of=b.rerun_of, after_run=b.after_run)
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

    # ---- delete and retention (delete_job.lua, retention.lua, lib.lua unlink_job) --------------------------

    async def delete_job(self, job_id: str, bundle_digests: Sequence[str] = ()) -> tuple[str, list[str]]:
        """As delete_job.lua (this store keeps no bundles: the digests change nothing)."""
        if job_id not in self._jobs:
            return "missing", []
        if self._active[job_id]:
            return "active", sorted(self._active[job_id])
        if self._children.get(job_id):
            return "children", sorted(self._children[job_id])
        self._unlink_job(job_id, self._now())
        return "ok", []

    def _unlink_job(self, job_id: str, now: int) -> None:
        parent = self._jobs.pop(job_id).after
        if parent:
            self._children[parent].discard(job_id)
        self._children.pop(job_id, None)
        self._active.pop(job_id, None)
        self._job_index.remove(job_id)
        self._schedule.remove(job_id)
        self._awaiting.discard(job_id)
        self._backfill.pop(job_id, None)
        self._backfills.pop(job_id, None)
        self._purge.add(job_id, now)

    async def purge_history(self, cursor: int, bounds: RetentionBounds) -> PurgeResult:
        now = self._now()
        step = _Step(bounds.budget, now - bounds.max_age_ms)
        purging = False
        while step.budget > 0:
            first = self._purge.first(1)
            if not first:
                break
            runs = self._job_runs[first[0]]
            for run_id in [r for r, _ in runs.items()][:step.budget]:
                if not self._delete_run(first[0], run_id, step):
                    break
            if runs:
                purging = True
                break
            del self._job_runs[first[0]]
            self._purge.remove(first[0])
        page = [j for j, _ in self._job_index.items(reverse=True)][cursor:cursor + bounds.jobs_per_step] \
            if step.budget > 0 else []
        scanned = unlinked = 0
        for job_id in page:
            if step.budget <= 0:
                break
            if self._trim_job(job_id, bounds.keep_runs, step, now):
                unlinked += 1
                scanned += 1
            elif step.complete:
                scanned += 1
        more = step.budget <= 0 or purging or unlinked > 0
        next_cursor = 0 if not more and len(page) < bounds.jobs_per_step else cursor + scanned - unlinked
        return PurgeResult(next_cursor, step.runs, step.jobs, step.keys, more)

    def _trim_job(self, job_id: str, keep: int, step: _Step, now: int) -> bool:
        """One job of retention.lua's scan: unlink it if it ended past the max age (True), else delete its
        ended runs beyond the bounds (``step.complete`` says whether it got through them)."""
        job = self._jobs[job_id]
        active = len(self._active[job_id])
        last = self._runs.get(job.last_run_id)
        last_end = last.finished_ms if last is not None else 0
        step.complete = True
        if job.state in JOB_TERMINAL and not active and job.updated_ms < step.cutoff and last_end < step.cutoff:
            self._unlink_job(job_id, now)
            step.jobs += 1
            step.keys += 1
            step.budget -= 1
            return True
        runs = self._job_runs[job_id]
        excess = len(runs) - active - keep
        for run_id, scheduled in runs.items()[:max(step.budget, 0)]:
            if excess <= 0 and scheduled >= step.cutoff:
                break
            if step.budget <= 0:
                step.complete = False
                break
            run = self._runs[run_id]
            ended = run.state in RUN_TERMINAL and run_id not in self._active[job_id]
            if ended and run_id not in (job.last_run_id, job.awaits) and (excess > 0 or run.finished_ms < step.cutoff):
                if not self._delete_run(job_id, run_id, step):
                    step.complete = False
                    break
                excess -= 1
        if step.complete and job.old_specs:  # replaced specs no remaining run was made from
            oldest = min((self._runs[r].spec_version for r, _ in runs.items()), default=job.spec_version)
            job.old_specs = {v: spec for v, spec in job.old_specs.items() if v >= oldest}
        return False

    def _delete_run(self, job_id: str, run_id: str, step: _Step) -> bool:
        """retention.lua delete_run: tasks from the highest index down while the budget lasts, then the run."""
        run = self._runs[run_id]
        while run.task_count > 0 and step.budget > 2:
            run.task_count -= 1
            task_id = ids.task_id(run_id, run.task_count)
            t = self._tasks.pop(task_id, None)
            if t is not None:
                self._ready[t.group].remove(task_id)
                if t.worker:
                    self._worker_leases[t.worker].discard(task_id)
                step.keys += 1 + (len(t.attempts) > 1)  # the task hash, and its archive once retried
            for index in (self._leases, self._timeouts, self._delayed):
                index.remove(task_id)
            step.budget -= 2
        if run.task_count > 0:
            return False
        step.keys += 1 + (len(run.gate) > 0)
        del self._runs[run_id]
        self._job_runs[job_id].remove(run_id)
        step.budget -= 2
        step.runs += 1
        return True


class _Step:
    """What one purge_history call has left and has done (retention.lua's locals)."""

    def __init__(self, budget: int, cutoff: int) -> None:
        self.budget = budget
        self.cutoff = cutoff
        self.runs = self.jobs = self.keys = 0
        self.complete = True
