"""The attempts leased to a worker, from arrival to reported end: the queue of prefetched ones, slots,
runners, timeouts, kills and results (the part of the agent that does not talk to the master itself).

An attempt arrives in a TaskBatch and is queued; while it waits its bundle is fetched; a free slot takes
it (:meth:`AttemptSlots._pump`) and its runner runs it; its end — run to completion, failed, timed out,
killed by a cancel, a lost lease, self-fencing or a hand-back — is reported once and stays pending until
the master acknowledges it. The master frees the slot only on that report, so every end is reported.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine

from sparkyard.clock import Cancellable, Clock
from sparkyard.config import WorkerConfig
from sparkyard.options import RUNNERS
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.bundles import BundleCache
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.metrics import WorkerMetrics
from sparkyard.worker.outbox import Outbox
from sparkyard.worker.prefetch import Prefetch
from sparkyard.worker.reports import ReportSender
from sparkyard.worker.runner.base import AttemptRun, Kill, Outcome, Runner
from sparkyard.worker.workspace import Workspace, WorkspaceError, workspace

log = logging.getLogger("sparkyard.worker.agent")

# A queued task that has waited this long for a slot is handed back (RELEASED, no attempt used up) so a
# worker with a free slot runs it: the slots here are held by attempts that run far longer than usual.
HANDBACK_AFTER_S = 1.0

# An attempt's workspace until the agent has placed it (bundle fetched, working directory chosen).
_UNPLACED = Workspace("", "", (), ())
_RUNNER_NAMES = {number: name for name, number in RUNNERS.items()}
# Every ended attempt is reported, killed ones too: the master frees a slot only on a worker's result.
# A lost lease's report is refused as stale (the master already moved the task on); a self-fenced one's
# hands the task back if the master has not requeued it yet.
_KILL_OUTCOMES = {"timeout": pb.ATTEMPT_TIMED_OUT, "cancel": pb.ATTEMPT_CANCELLED, "release": pb.ATTEMPT_RELEASED,
                  "lost": pb.ATTEMPT_RELEASED, "fence": pb.ATTEMPT_RELEASED}


@dataclass(eq=False)
class Execution:
    """One attempt leased to this worker: queued for a slot, then running."""

    assignment: pb.TaskAssignment
    run: AttemptRun
    runner: Runner  # the one that runs it (chosen on arrival, from its job's spec)
    renewed_at: float  # monotonic time of the last lease renewal (or of receipt)
    queued_at: float  # monotonic time it arrived
    unqueue: Callable[[Execution], None]  # how a kill ends it while it is still queued
    begun_at: float = 0.0  # monotonic time a slot took it (0: still queued)
    started_ms: int = 0  # wall-clock ms when the runner was given the attempt
    placed: bool = False  # its bundle (if any) is in the cache: a slot can take it
    bundle_root: Path | None = None
    ended: bool = False
    announced: bool = False  # its start was reported on its own (see Agent._fence_loop)
    timer: Cancellable | None = None  # the attempt's timeout, if it has one
    bundle: pb.BundleRef | None = None  # the bundle it holds in the cache while it runs

    def kill(self, kind: str, reason: str) -> None:
        if self.run.killed is None:
            self.run.killed = Kill(kind, reason)
            if self.begun_at:
                self.runner.kill(self.run)
            else:
                self.unqueue(self)


@dataclass
class Pending:
    """A result sent and not yet acknowledged (resent after RESEND_AFTER_S or a reconnect)."""

    result: pb.TaskResult
    sent_at: float


class AttemptSlots:
    """The agent's attempts (the agent is one of these; the fields are set up by :class:`Agent`)."""

    cfg: WorkerConfig
    clock: Clock
    worker_id: str
    logs: LogFiles
    bundles: BundleCache
    runners: dict[str, Runner]
    reports: ReportSender
    prefetch: Prefetch
    executions: dict[str, Execution]  # every attempt leased here, queued or running
    queue: deque[Execution]  # leased, waiting for a slot (prefetched), in arrival order
    pending: dict[tuple[str, int], Pending]  # results not yet acknowledged by the master
    outbox: Outbox  # the same, on disk
    draining: bool
    _attempts_dir: str
    _busy: int  # attempts on a slot
    _pumping: bool
    _idle: asyncio.Event  # set while no attempt is running
    metrics: WorkerMetrics
    lease_s: float
    fence_address: str  # the fence desk's, given to every attempt's context

    def readiness(self) -> tuple[int, str, int]:
        raise NotImplementedError

    def fence_verdict(self, task_id: str, token: int) -> str:
        """Why the attempt of ``task_id`` with ``token`` is known here to be fenced ('' when nothing here
        says so: the master then decides)."""
        execution = self.executions.get(task_id)
        if execution is None or execution.assignment.fencing_token != token:
            return f"worker {self.worker_id} no longer runs task {task_id} with fencing token {token}"
        if execution.run.killed is not None:
            return f"the attempt is being stopped ({execution.run.killed.kind}: {execution.run.killed.reason})"
        unrenewed = self.clock.monotonic() - execution.renewed_at
        if unrenewed > self.lease_s - self.cfg.self_fence_margin_s:
            return f"the attempt's lease was not renewed for {unrenewed:.1f}s"
        return ""

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    def free_slots(self) -> int:
        """Slots that may take a new attempt: those of the default runner that can run one, less running
        attempts (an attempt of the other runner also takes a slot)."""
        if self.draining:
            return 0
        return max(0, self.readiness()[2] - self._busy)

    def _held(self) -> list[pb.Lease]:
        """The leases to renew and to declare on (re)registering: running attempts, and ended ones whose
        result the master has not acknowledged — so a task that finished while no master was reachable
        is not requeued on reconnect, and its result (resent then) counts."""
        running = [pb.Lease(task_id=e.assignment.task_id, fencing_token=e.assignment.fencing_token)
                   for e in self.executions.values() if e.run.killed is None]
        return running + [pb.Lease(task_id=task_id, fencing_token=token) for task_id, token in self.pending]

    def _announce_start(self, execution: Execution) -> None:
        a = execution.assignment
        started = pb.TaskStarted(task_id=a.task_id, fencing_token=a.fencing_token, log_path=execution.run.log_path)
        started.started_at.FromMilliseconds(execution.started_ms)
        self.reports.started(started)

    def _runner_for(self, spec: pb.JobSpec) -> Runner:
        return self.runners[_RUNNER_NAMES.get(spec.runner, self.cfg.runner)]

    def _accept(self, assignment: pb.TaskAssignment, have_room: bool) -> bool:
        """Queue an attempt for a slot (True), or hand it straight back when it is a duplicate or the
        worker has no room (the master's view of its capacity was out of date)."""
        if assignment.task_id in self.executions:
            log.warning("task=%s already running here; duplicate assignment ignored", assignment.task_id)
            return False
        if not have_room:
            self._finish(assignment, pb.ATTEMPT_RELEASED, Outcome("FAILED", error="worker has no free slot"), 0, 0)
            return False
        log_path = self.logs.path_for(assignment.task_id, assignment.attempt, self.clock.now())
        run = AttemptRun(assignment, self.worker_id, log_path, self._attempts_dir, self.cfg.result_max_bytes,
                         _UNPLACED, fence=self.fence_address)
        now = self.clock.monotonic()
        execution = Execution(assignment, run, self._runner_for(assignment.spec), renewed_at=now, queued_at=now,
                              unqueue=self._unqueue)
        self.executions[assignment.task_id] = execution
        self._idle.clear()
        self.queue.append(execution)
        if assignment.spec.bundle.digest:  # fetched while it waits for a slot
            self._spawn(self._place(execution))
        else:
            execution.placed = True
        return True

    def _unqueue(self, execution: Execution) -> None:
        """A queued attempt was killed (cancel, hand-back, lost lease, drain): it ends without running."""
        try:
            self.queue.remove(execution)
        except ValueError:
            pass
        self._ended(execution, Outcome("FAILED", error=execution.run.kill_reason))

    def _hand_back_stuck(self) -> None:
        now = self.clock.monotonic()
        stuck = [e for e in self.queue if e.placed and now - e.queued_at > HANDBACK_AFTER_S]
        if stuck:
            log.info("handing back %d queued tasks: no slot freed for %.1fs (the slots run long attempts)",
                     len(stuck), HANDBACK_AFTER_S)
        for execution in stuck:
            execution.kill("release", f"handed back after waiting {now - execution.queued_at:.1f}s for a free "
                                      "slot on this worker (its slots run long attempts)")

    def _pump(self) -> None:
        """Give free slots the queued attempts that can run (in arrival order)."""
        if self._pumping:  # an attempt that ends at once re-enters here: the loop below sees it
            return
        self._pumping = True
        try:
            while self.queue and not self.draining and self._busy < self.readiness()[2]:
                execution = next((e for e in self.queue if e.placed), None)
                if execution is None:
                    return
                self.queue.remove(execution)
                self._begin(execution)
        finally:
            self._pumping = False

    async def _place(self, execution: Execution) -> None:
        """Bring the job's bundle into the cache (once per digest) while the attempt waits for a slot."""
        ref = execution.assignment.spec.bundle
        try:
            root = await self.bundles.acquire(ref)
        except Exception as exc:
            log.warning("task=%s: bundle %s unavailable: %s", execution.assignment.task_id, ref.digest[:12], exc)
            if not execution.ended:
                self.queue.remove(execution)
                self._ended(execution, Outcome.failure(exc, f"cannot fetch the job's bundle {ref.digest[:12]}: "))
            return
        if execution.ended:  # killed while its bundle was fetched
            self.bundles.release(ref)
            return
        execution.bundle = ref
        execution.bundle_root = root
        execution.placed = True
        self._pump()

    def _begin(self, execution: Execution) -> None:
        assignment = execution.assignment
        runner = execution.runner
        execution.begun_at = self.clock.monotonic()
        execution.started_ms = int(self.clock.now() * 1000)
        self._busy += 1
        timeout_s = assignment.spec.timeout.ToMilliseconds() / 1000
        if timeout_s > 0:
            execution.timer = self.clock.call_later(
                timeout_s, lambda: execution.kill("timeout", f"timed out after {timeout_s:g}s"))
        try:
            execution.run.workspace = workspace(assignment.spec, execution.bundle_root, execution.run.work_dir)
        except WorkspaceError as exc:
            self._ended(execution, Outcome("FAILED", error=str(exc)))
            return
        log.debug("task=%s attempt=%d token=%d starting (%s runner)", assignment.task_id, assignment.attempt,
                  assignment.fencing_token, runner.name)
        try:
            runner.begin(execution.run, lambda outcome: self._ended(execution, outcome))
        except Exception as exc:
            log.exception("task=%s runner failed", assignment.task_id)
            self._ended(execution, Outcome.failure(exc, f"{runner.name} runner error: "))

    def _ended(self, execution: Execution, outcome: Outcome) -> None:
        """The runner's outcome of an attempt, or the end of one that never ran (once per attempt)."""
        if execution.ended:
            return
        execution.ended = True
        a = execution.assignment
        if execution.begun_at:
            self._busy -= 1
            if execution.run.killed is None:
                self.prefetch.ended(self.clock.monotonic() - execution.begun_at)
        if execution.timer is not None:
            execution.timer.cancel()
        if execution.bundle is not None:
            self.bundles.release(execution.bundle)
            execution.bundle = None
        if self.executions.get(a.task_id) is execution:
            del self.executions[a.task_id]
        idle = not self.executions
        if idle:
            self._idle.set()
        finished_ms = int(self.clock.now() * 1000)
        killed = execution.run.killed
        kind = killed.kind if killed is not None else ""
        if killed is not None:
            outcome.error = killed.reason
            state = _KILL_OUTCOMES[kind]
        else:
            state = pb.ATTEMPT_SUCCEEDED if outcome.state == "SUCCEEDED" else pb.ATTEMPT_FAILED
        log_path = execution.run.log_path if execution.begun_at else ""
        self._finish(a, state, outcome, execution.started_ms, finished_ms, log_path, quiet=kind in ("", "release"))
        self._pump()
        if self._busy == 0:  # nothing more is coming soon to share the message
            self.reports.flush()

    def _finish(self, a: pb.TaskAssignment, state: int, outcome: Outcome, started_ms: int, finished_ms: int,
                log_path: str = "", *, quiet: bool = True) -> None:
        result = pb.TaskResult(task_id=a.task_id, fencing_token=a.fencing_token, outcome=state,
                               result_json=outcome.result_json, error=outcome.error, traceback=outcome.traceback,
                               log_path=log_path)
        if started_ms:
            result.started_at.FromMilliseconds(started_ms)
        if finished_ms:
            result.finished_at.FromMilliseconds(finished_ms)
        level = logging.DEBUG if quiet and state in (pb.ATTEMPT_SUCCEEDED, pb.ATTEMPT_RELEASED) else logging.INFO
        if log.isEnabledFor(level):
            log.log(level, "task=%s attempt=%d token=%d finished %s%s", a.task_id, a.attempt, a.fencing_token,
                    pb.AttemptState.Name(state), f": {outcome.error}" if outcome.error else "")
        self.metrics.attempt_ended(state, started_ms, finished_ms)
        self.outbox.add(result)  # on disk before it is sent: a restarted worker sends it again
        self.pending[(a.task_id, a.fencing_token)] = Pending(result, self.clock.monotonic())
        self.reports.result(result)
