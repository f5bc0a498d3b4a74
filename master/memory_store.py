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

The entries it keeps per job, run, task and attempt are in :mod:`sparkyard.master.memory_records`.
It is safe for one event loop: no method awaits in the middle, so each call is atomic like a script.
Invalid arguments (an unknown report outcome, a pause target other than PAUSED/ACTIVE) raise ValueError
before anything changes.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any, Iterable, Sequence

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.master.memory_records import (
    AttemptEnd,
    AttemptEntry,
    JobEntry,
    RunEntry,
    TaskEntry,
    job_record,
    run_record,
    task_record,
)
from sparkyard.master.records import JobRecord, RunRecord, TaskRecord
from sparkyard.master.routing import Routable
from sparkyard.master.sorted_set import SortedSet
from sparkyard.master.store import (
    DEFAULT_DUE_LIMIT,
    DEFAULT_PRIORITY_AGING_MS,
    DEFAULT_SWEEP_LIMIT,
    CancelResult,
    Claim,
    FireRequest,
    FireResult,
    NewJob,
    Reaped,
    RenewResult,
    Report,
    RunBlock,
    Store,
    SubmitResult,
    Verdict,
)
from sparkyard.states import AttemptState, JobState, RunState, TaskState, can_move
from sparkyard.v1 import sparkyard_pb2 as pb

# As lib.lua: only the first this-many task indexes of a recurring job remember their last worker.
AFFINITY_MAX_INDEX = 256
# Report outcomes report.lua knows (STARTED, then how an attempt ended).
REPORT_OUTCOMES = frozenset({"STARTED", "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "RELEASED"})
# The job states a pause or resume may ask for.
PAUSE_TARGETS = frozenset({JobState.PAUSED, JobState.ACTIVE})


class MemoryStore(Store):
    """Sparkyard's shared state as Python objects; time from ``clock`` (wall clock, milliseconds)."""

    def __init__(self, clock: Clock, priority_aging_ms: int = DEFAULT_PRIORITY_AGING_MS) -> None:
        self.clock = clock
        self.priority_aging_ms = priority_aging_ms
        self._jobs: dict[str, JobEntry] = {}
        self._runs: dict[str, RunEntry] = {}
        self._tasks: dict[str, TaskEntry] = {}
        self._job_index = SortedSet()  # job id → created ms
        self._job_runs: defaultdict[str, SortedSet] = defaultdict(SortedSet)  # run id → scheduled ms
        self._active: defaultdict[str, set[str]] = defaultdict(set)  # job id → runs not terminal
        self._idempotency: dict[str, tuple[str, int]] = {}  # key → (job id, expiry ms)
        self._schedule = SortedSet()
        self._awaiting: set[str] = set()
        self._ready: defaultdict[str, SortedSet] = defaultdict(SortedSet)
        self._groups: set[str] = set()
        self._leases = SortedSet()
        self._timeouts = SortedSet()
        self._delayed = SortedSet()
        self._worker_leases: defaultdict[str, set[str]] = defaultdict(set)
        self._workers: dict[str, str] = {}  # worker id → JSON
        self._fence = 0

    def _now(self) -> int:
        return round(self.clock.now() * 1000)

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
        existing = self._runs.get(run_id)
        if existing is not None:
            return run_id, FireResult("exists", now, existing.state.value)
        skip_reason, blocker = r.skip_reason, ""
        if not skip_reason and r.overlap == "forbid" and self._active[r.job_id]:
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
        job.last_run_id = run_id
        self._job_runs[r.job_id].add(run_id, r.scheduled_ms)
        if skip_reason:
            self._runs[run_id] = RunEntry(r.job_id, RunState.SKIPPED, r.scheduled_ms, now, 0, finished_ms=now,
                                      reason=skip_reason)
            return run_id, FireResult("skipped", now, RunState.SKIPPED.value)
        block = RunBlock.of(r.spec, r.scheduled_ms, r.inputs, self.priority_aging_ms)
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
                                        timeout_ms=max(b.timeout_ms, 0), cap=max(b.cap, 0))
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

    # ---- dispatch (peek.lua, claim.lua, renew.lua, report.lua) ----------------------------------------

    async def peek_ready(self, group: str, n: int) -> list[Routable]:
        queue = self._ready.get(group)
        if queue is None:
            return []
        out = []
        for task_id in queue.first(n):
            t = self._tasks[task_id]
            out.append(Routable(task_id, t.prev_worker, t.routing, t.route))
        return out

    async def claim(self, group: str, pairs: Sequence[tuple[str, str]], *, lease_ms: int,
                    timeout_grace_ms: int) -> list[Claim]:
        if not pairs:
            return []
        now = self._now()
        # Tokens are reserved for every pair, claimed or not (claim.lua's one INCRBY).
        token = self._fence
        self._fence += len(pairs)
        queue = self._ready.get(group)
        out: list[Claim] = []
        for task_id, worker in pairs:
            token += 1
            if queue is None or not queue.remove(task_id):
                continue
            t = self._tasks.get(task_id)
            if t is None or t.state is not TaskState.READY:
                continue
            run = self._runs[t.run_id]
            attempt = len(t.attempts) + 1
            deadline = now + lease_ms
            t.state, t.token, t.worker, t.lease_ms, t.not_before_ms = TaskState.LEASED, token, worker, deadline, 0
            t.attempts.append(AttemptEntry(attempt, token, worker, now))
            if run.timeout_ms > 0:
                self._timeouts.add(task_id, now + run.timeout_ms + timeout_grace_ms)
            self._leases.add(task_id, deadline)
            self._worker_leases[worker].add(task_id)
            if run.state is RunState.SCHEDULED:
                run.state, run.started_ms = RunState.RUNNING, now
            out.append(Claim(task_id, worker, token, attempt, t.run_id, t.job_id, t.index, t.inputs,
                             run.scheduled_ms, run.task_count))
        return out

    async def renew(self, worker: str, leases: Sequence[tuple[str, int]], lease_ms: int) -> RenewResult:
        deadline = self._now() + lease_ms
        renewed, lost = [], []
        for task_id, token in leases:
            t = self._tasks.get(task_id)
            if t is not None and t.state is TaskState.LEASED and t.token == token and t.worker == worker:
                if task_id in self._leases:
                    self._leases.add(task_id, deadline)
                t.lease_ms = deadline
                renewed.append((task_id, token))
            else:
                lost.append((task_id, token))
        return RenewResult(renewed, lost, deadline)

    async def report(self, reports: Sequence[Report]) -> list[Verdict]:
        for r in reports:
            if r.outcome not in REPORT_OUTCOMES:
                raise ValueError(f"report of task {r.task_id}: outcome {r.outcome!r} is not one of "
                                 f"{', '.join(sorted(REPORT_OUTCOMES))}")
        now = self._now()
        return [self._apply_report(r, now) for r in reports]

    def _apply_report(self, r: Report, now: int) -> Verdict:
        t = self._tasks.get(r.task_id)
        if t is None:
            return Verdict.of(r.task_id, "unknown", "", "", "", 0)
        if t.token != r.token:
            return Verdict.of(r.task_id, "stale", t.state.value, t.run_id, "", 0)
        if t.state is not TaskState.LEASED:
            return Verdict.of(r.task_id, "terminal", t.state.value, t.run_id, "", 0)
        if r.outcome == "STARTED":
            t.attempts[-1].started_ms, t.attempts[-1].log_path = r.started_ms, r.log_path
            return Verdict.of(r.task_id, "accepted", t.state.value, t.run_id, "", 0)
        self._drop_lease(r.task_id, t)
        # The worker's finish time, kept within [the attempt's start, now] (see report.lua).
        finished = min(r.finished_ms if r.finished_ms > 0 else now, now)
        if r.started_ms > 0:
            finished = max(finished, r.started_ms)
        ended = AttemptEnd(AttemptState(r.outcome), finished, r.error, r.traceback, r.log_path,
                       r.started_ms if r.started_ms > 0 else None)
        if r.outcome == "SUCCEEDED":
            self._finish_attempt(t, ended)
            t.state, t.result, t.error = TaskState.SUCCEEDED, r.result_json, ""
            if t.aff:
                self._jobs[t.job_id].last_workers[t.index] = t.worker
            return Verdict.of(r.task_id, "accepted", "SUCCEEDED", t.run_id, self._task_terminal(t.run_id, "succeeded", now), 0)
        if r.outcome in ("FAILED", "TIMED_OUT"):
            state, run_state, not_before = self._fail_attempt(r.task_id, t, now, r.error, ended)
            return Verdict.of(r.task_id, "accepted", state, t.run_id, run_state, not_before)
        # CANCELLED or RELEASED by the worker itself: back to the queue without using up an attempt.
        self._finish_attempt(t, ended)
        t.state, t.prev_worker, t.worker, t.error = TaskState.READY, t.worker, "", ""
        self._enqueue_ready(r.task_id, t)
        return Verdict.of(r.task_id, "accepted", "READY", t.run_id, "", 0)

    async def release_due(self, limit: int = DEFAULT_SWEEP_LIMIT, task_ids: Sequence[str] = ()) -> list[tuple[str, str]]:
        now = self._now()
        candidates = list(task_ids) if task_ids else [task_id for task_id, _ in self._delayed.upto(now, limit)]
        out = []
        for task_id in candidates:
            due = self._delayed.score(task_id)
            if due is None or due > now:
                continue
            self._delayed.remove(task_id)
            t = self._tasks.get(task_id)
            if t is not None and t.state is TaskState.FAILED:
                t.state, t.not_before_ms, t.error = TaskState.READY, 0, ""
                self._enqueue_ready(task_id, t)
                out.append((task_id, t.group))
        return out

    async def delayed_entries(self) -> list[tuple[str, int]]:
        return self._delayed.items()

    # ---- reap (reap.lua) -------------------------------------------------------------------------------

    async def reap_expired(self, max_lost: int, limit: int = DEFAULT_SWEEP_LIMIT) -> list[Reaped]:
        now = self._now()
        out = []
        # `limit` bounds the entries looked at by the whole call, expired leases first (reap.lua).
        expired, looked = self._due_leased(self._leases, now, limit)
        for task_id, t in expired:
            worker, token = t.worker, t.token or 0
            state, run_state = self._lose_lease(task_id, t, now, max_lost, f"lease expired on worker {worker}")
            out.append(Reaped.of(task_id, "lost", state, t.run_id, run_state, worker, 0, token))
        overdue, _ = self._due_leased(self._timeouts, now, limit - looked)
        for task_id, t in overdue:
            worker, token = t.worker, t.token or 0
            self._drop_lease(task_id, t)
            msg = f"timed out: no result from worker {worker} within the task timeout"
            state, run_state, not_before = self._fail_attempt(
                task_id, t, now, msg, AttemptEnd(AttemptState.TIMED_OUT, now, msg))
            out.append(Reaped.of(task_id, "timeout", state, t.run_id, run_state, worker, not_before, token))
        return out

    def _due_leased(self, deadlines: SortedSet, now: int, limit: int) -> tuple[list[tuple[str, TaskEntry]], int]:
        """Tasks whose deadline in ``deadlines`` has passed, among the first ``limit`` due entries, and how
        many entries were looked at; entries of tasks no longer LEASED are dropped."""
        due = []
        entries = deadlines.upto(now, limit)
        for task_id, _ in entries:
            t = self._tasks.get(task_id)
            if t is None or t.state is not TaskState.LEASED:
                deadlines.remove(task_id)
            else:
                due.append((task_id, t))
        return due, len(entries)

    async def reap_worker(self, worker: str, task_ids: Sequence[str], max_lost: int) -> list[Reaped]:
        now = self._now()
        out = []
        for task_id in task_ids:
            t = self._tasks.get(task_id)
            if t is None or t.state is not TaskState.LEASED or t.worker != worker:
                continue
            token = t.token or 0
            state, run_state = self._lose_lease(task_id, t, now, max_lost, f"worker {worker} restarted")
            out.append(Reaped.of(task_id, "lost", state, t.run_id, run_state, worker, 0, token))
        return out

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

    async def awaiting_among(self, job_ids: Sequence[str]) -> list[str]:
        return [job_id for job_id in job_ids if job_id in self._awaiting]

    async def awaiting_jobs(self) -> list[str]:
        return sorted(self._awaiting)

    # ---- the helpers of lib.lua ------------------------------------------------------------------------

    def _enqueue_ready(self, task_id: str, t: TaskEntry) -> None:
        self._ready[t.group].add(task_id, t.score)
        self._groups.add(t.group)

    def _drop_lease(self, task_id: str, t: TaskEntry) -> None:
        self._leases.remove(task_id)
        self._timeouts.remove(task_id)
        held = self._worker_leases.get(t.worker)
        if held is not None:
            held.discard(task_id)

    def _finish_attempt(self, t: TaskEntry, ended: AttemptEnd) -> None:
        """End the task's latest attempt; empty texts leave what the attempt already had."""
        a = t.attempts[-1]
        a.worker, a.state, a.finished_ms = t.worker, ended.state, ended.finished_ms
        a.error = ended.error or a.error
        a.traceback = ended.traceback or a.traceback
        a.log_path = ended.log_path or a.log_path
        if ended.started_ms is not None:
            a.started_ms = ended.started_ms

    def _fail_attempt(self, task_id: str, t: TaskEntry, now: int, error: str, ended: AttemptEnd) -> tuple[str, str, int]:
        """A failed attempt: retry after the backoff while attempts remain, else DEAD."""
        t.failures += 1
        run = self._runs[t.run_id]
        self._finish_attempt(t, ended)
        t.error = error
        if t.failures >= run.max_attempts:
            t.state, t.worker = TaskState.DEAD, ""
            return "DEAD", self._task_terminal(t.run_id, "dead", now), 0
        backoff = min(run.backoff_ms * run.backoff_mult ** (t.failures - 1), run.backoff_max_ms)
        not_before = now + math.floor(backoff)
        t.state, t.prev_worker, t.worker, t.not_before_ms = TaskState.FAILED, t.worker, "", not_before
        self._delayed.add(task_id, not_before)
        return "FAILED", "", not_before

    def _lose_lease(self, task_id: str, t: TaskEntry, now: int, max_lost: int, reason: str) -> tuple[str, str]:
        """A lease that ended without a result: requeue, or DEAD once lost more than ``max_lost`` times."""
        self._drop_lease(task_id, t)
        self._finish_attempt(t, AttemptEnd(AttemptState.LOST, now, reason))
        t.lost += 1
        if t.lost > max_lost:
            t.state, t.worker, t.error = TaskState.DEAD, "", f"lost {t.lost} times (last: {reason})"
            return "DEAD", self._task_terminal(t.run_id, "dead", now)
        t.state, t.prev_worker, t.worker, t.error = TaskState.READY, t.worker, "", ""
        self._enqueue_ready(task_id, t)
        return "READY", ""

    def _task_terminal(self, run_id: str, counter: str, now: int) -> str:
        """Count a task that just became terminal; end its run when every task is. Returns the run's new
        terminal state or ''. A capped run lets its next gated task into the ready queue."""
        run = self._runs.get(run_id)
        if run is None:
            return ""
        setattr(run, counter, getattr(run, counter) + 1)
        if run.cap:
            gated = run.gate.pop_first()
            t = self._tasks.get(gated) if gated is not None else None
            if gated is not None and t is not None and t.state is TaskState.READY:
                self._ready[t.group].add(gated, t.score)
        if run.succeeded + run.dead + run.cancelled < run.task_count:
            return ""
        target = RunState.FAILED if run.dead else RunState.CANCELLED if run.cancelled else RunState.SUCCEEDED
        if not can_move("run", run.state.value, target.value):
            return ""
        run.state, run.finished_ms = target, now
        self._active[run.job_id].discard(run_id)
        return target.value

    # ---- reads -----------------------------------------------------------------------------------------

    async def job_progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
        return {j: (self._jobs[j].state.value, self._jobs[j].runs) for j in job_ids if j in self._jobs}

    async def due_schedule(self, until_ms: int, limit: int = DEFAULT_DUE_LIMIT) -> list[tuple[str, int]]:
        return self._schedule.upto(until_ms, limit)

    async def time_ms(self) -> int:
        return self._now()

    async def get_job(self, job_id: str) -> JobRecord | None:
        job = self._jobs.get(job_id)
        return None if job is None else job_record(job_id, job)

    def cached_spec(self, job_id: str) -> pb.JobSpec | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.spec

    async def get_specs(self, job_ids: Iterable[str]) -> dict[str, pb.JobSpec]:
        return {job_id: self._jobs[job_id].spec for job_id in job_ids if job_id in self._jobs}

    async def get_spec(self, job_id: str) -> pb.JobSpec | None:
        return self.cached_spec(job_id)

    async def list_jobs(self, limit: int, state: JobState | None = None, group: str = "") -> list[JobRecord]:
        out: list[JobRecord] = []
        for job_id, _ in self._job_index.items(reverse=True):
            if len(out) >= limit:
                break
            job = self._jobs[job_id]
            if (state is None or job.state is state) and (not group or job.spec.group == group):
                out.append(job_record(job_id, job))
        return out

    async def get_run(self, run_id: str, *, with_tasks: bool = True) -> RunRecord | None:
        run = self._runs.get(run_id)
        if run is None:
            return None
        record = run_record(run_id, run)
        if with_tasks:
            record.tasks = await self.get_tasks([ids.task_id(run_id, i) for i in range(run.task_count)])
        return record

    async def list_runs(self, job_id: str, limit: int, *, with_tasks: bool = False) -> list[RunRecord]:
        newest = [run_id for run_id, _ in self._job_runs[job_id].items(reverse=True)]
        # ZREVRANGE 0 limit-1: a limit of 0 or less counts from the end, as Redis does.
        stop = limit - 1 if limit > 0 else len(newest) + limit - 1
        runs = []
        for run_id in newest[:max(stop + 1, 0)]:
            run = await self.get_run(run_id, with_tasks=with_tasks)
            if run is not None:
                runs.append(run)
        return runs

    async def get_tasks(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        return [task_record(task_id, self._tasks[task_id]) for task_id in task_ids if task_id in self._tasks]

    async def active_runs(self, job_id: str) -> list[str]:
        return sorted(self._active[job_id])

    async def run_task_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        return {r: self._runs[r].task_count if r in self._runs else 0 for r in run_ids}

    async def ready_counts(self) -> dict[str, int]:
        return {group: len(self._ready[group]) for group in sorted(self._groups)}

    async def counts(self) -> dict[str, int]:
        return {"leased": len(self._leases), "scheduled": len(self._schedule), "delayed": len(self._delayed)}

    # ---- workers -----------------------------------------------------------------------------------------

    async def put_worker(self, worker_id: str, info: dict[str, Any]) -> None:
        self._workers[worker_id] = json.dumps(info, separators=(",", ":"))

    async def get_workers(self) -> dict[str, dict[str, Any]]:
        return {w: json.loads(v) for w, v in self._workers.items()}

    async def worker_leases(self, worker_id: str) -> set[str]:
        return set(self._worker_leases.get(worker_id, ()))
