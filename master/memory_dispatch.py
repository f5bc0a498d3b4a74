"""The scripts of a task's lease in :class:`~sparkyard.master.memory_store.MemoryStore`: peek, claim,
renew, report, the release of retries and the reaping of lost or overdue leases.

They are what hands tasks to workers and takes them back (``peek.lua``, ``claim.lua``, ``renew.lua``,
``report.lua``, ``release.lua``, ``reap.lua``), step for step as the scripts do, with the ``lib.lua``
helpers that end an attempt — requeue it, retry it after its backoff, or end its task and perhaps its
run. They are apart from :mod:`sparkyard.master.memory_store` because they move tasks between the ready
queues, the leases and the retry backoffs and never touch a job's schedule; the cancel there reuses the
helpers to end a leased attempt.
"""

from __future__ import annotations

import math
from typing import Sequence

from sparkyard.master.memory_records import AttemptEnd, AttemptEntry, TaskEntry
from sparkyard.master.memory_state import MemoryState
from sparkyard.master.routing import Routable
from sparkyard.master.sorted_set import SortedSet
from sparkyard.master.store import DEFAULT_SWEEP_LIMIT, Claim, Reaped, RenewResult, Report, Verdict
from sparkyard.states import AttemptState, RunState, TaskState, can_move

# Report outcomes report.lua knows (STARTED, then how an attempt ended).
REPORT_OUTCOMES = frozenset({"STARTED", "SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED", "RELEASED"})


class MemoryDispatch(MemoryState):
    """Claims, renewals, reports, retries and reaping on the memory store's state."""

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
            if t is None or not can_move("task", t.state.value, TaskState.LEASED.value):
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
            if can_move("run", run.state.value, RunState.RUNNING.value):
                run.state, run.started_ms = RunState.RUNNING, now
            out.append(Claim(task_id, worker, token, attempt, t.run_id, t.job_id, t.index, t.inputs,
                             run.scheduled_ms, run.task_count, run.spec_version))
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
