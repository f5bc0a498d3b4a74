"""The attempts leased to a worker, from arrival to reported end: the queue of prefetched ones, slots,
timeouts, kills, self-fencing and results.

An attempt arrives in a TaskBatch and is queued; while it waits its bundle is fetched; a free slot takes
it (:meth:`AttemptSlots.pump`), not before its ``start_after`` has passed (a scheduled run fired ahead of its
time starts at its time), and its runner runs it; its end — run to completion, failed, timed out,
killed by a cancel, a lost lease, self-fencing or a hand-back — is handed to the result ledger once, which
keeps it until the master acknowledges it. The master frees the slot only on that report, so every end is
reported. A kill is recorded once, on the attempt (:class:`Kill`), before its runner is asked to stop it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Coroutine, Iterable, Iterator

from sparkyard.clock import Clock
from sparkyard.config import WorkerConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.bundles import BundleCache
from sparkyard.worker.connection import LeaseTerms
from sparkyard.worker.disk import Disk, no_space
from sparkyard.worker.execution import Execution
from sparkyard.worker.ledger import ResultLedger
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.metrics import WorkerMetrics
from sparkyard.worker.prefetch import Prefetch
from sparkyard.worker.runner.base import AttemptRun, Kill, Outcome
from sparkyard.worker.runners import Runners
from sparkyard.worker.workspace import Workspace, WorkspaceError, workspace

log = logging.getLogger(__name__)

# A queued task that has waited this long for a slot is handed back (RELEASED, no attempt used up) so a
# worker with a free slot runs it: the slots here are held by attempts that run far longer than usual.
HANDBACK_AFTER_S = 1.0
# An attempt still running after this long reports that it started (shorter ones report it with their
# result): halves the messages of a stream of short tasks, keeps `logs -f` working for long ones. The
# check runs every WATCH_S, so the report leaves 0.1–0.35 s after the start.
STARTED_REPORT_AFTER_S = 0.1
# A loop's timer may run its callback a hair before its deadline: an attempt this close to its start time
# starts (else it would wait for the next pump, up to a watch period).
START_SLACK_S = 0.0002
# How often the watch looks at lease renewals (self-fencing), queued tasks and start reports.
WATCH_S = 0.25
# How long a stop or the end of a drain waits for killed attempts to end (each runner bounds its kill).
STOP_TIMEOUT_S = 60.0

# An attempt's workspace until it is placed (bundle fetched, working directory chosen).
_UNPLACED = Workspace("", "", (), ())
# Every ended attempt is reported, killed ones too: the master frees a slot only on a worker's result.
# A lost lease's report is refused as stale (the master already moved the task on); a self-fenced one's
# hands the task back if the master has not requeued it yet.
_KILL_OUTCOMES = {"timeout": pb.ATTEMPT_TIMED_OUT, "cancel": pb.ATTEMPT_CANCELLED, "release": pb.ATTEMPT_RELEASED,
                  "lost": pb.ATTEMPT_RELEASED, "fence": pb.ATTEMPT_RELEASED}


class AttemptSlots:
    def __init__(self, cfg: WorkerConfig, clock: Clock, logs: LogFiles, bundles: BundleCache, runners: Runners,
                 ledger: ResultLedger, prefetch: Prefetch, metrics: WorkerMetrics, terms: LeaseTerms,
                 fence_address: str, disk: Disk) -> None:
        self._cfg, self._clock, self._logs, self._bundles = cfg, clock, logs, bundles
        self._runners, self._ledger, self.prefetch, self._metrics = runners, ledger, prefetch, metrics
        self._terms = terms  # lease_s: how long an attempt may run unrenewed before it fences itself
        self._fence_address = fence_address  # the fence desk's, given to every attempt's context
        self._disk = disk  # checked before each start; told when a start is refused for want of space
        self._attempts_dir = str(cfg.work_path / "attempts")
        self.executions: dict[str, Execution] = {}  # every attempt leased here, queued or running
        self.queue: deque[Execution] = deque()  # leased, waiting for a slot (prefetched), in arrival order
        self.busy = 0  # attempts on a slot
        self._pumping = False
        self.draining = False  # no new attempt takes a slot
        self._idle = asyncio.Event()  # set while no attempt is running
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()

    # ---- life cycle ------------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Hand back every attempt (RELEASED) and wait for their ends."""
        self.kill_all("worker stopping")
        await self.until_idle(STOP_TIMEOUT_S)

    def start_draining(self) -> None:
        """Take no more attempts; the queued ones go back to the master now."""
        self.draining = True
        log.info("draining: %d running, %d queued (handed back now), waiting up to %.0fs", self.busy,
                 len(self.queue), self._cfg.drain_timeout_s)
        self.release_queued("worker draining: handed back")

    def release_queued(self, reason: str) -> None:
        """Hand back (RELEASED) every attempt still waiting for a slot."""
        for execution in list(self.queue):
            self.kill(execution, "release", reason)

    def kill_all(self, reason: str) -> None:
        for execution in list(self.executions.values()):
            self.kill(execution, "release", reason)

    async def until_idle(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until no attempt is running."""
        if self.executions:
            try:
                await asyncio.wait_for(self._idle.wait(), timeout_s)
            except asyncio.TimeoutError:
                log.warning("%d attempts still running after %.0fs", len(self.executions), timeout_s)

    # ---- what the master link asks -----------------------------------------------------------------------

    def fence_verdict(self, task_id: str, token: int) -> str:
        """Why the attempt of ``task_id`` with ``token`` is known here to be fenced ('' when nothing here
        says so: the master then decides)."""
        execution = self.executions.get(task_id)
        if execution is None or execution.assignment.fencing_token != token:
            return f"worker {self._cfg.worker_id} no longer runs task {task_id} with fencing token {token}"
        killed = execution.run.killed
        if killed is not None:
            return f"the attempt is being stopped ({killed.kind}: {killed.reason})"
        unrenewed = self._clock.monotonic() - execution.renewed_at
        if unrenewed > self._terms.lease_s - self._cfg.self_fence_margin_s:
            return f"the attempt's lease was not renewed for {unrenewed:.1f}s"
        return ""

    def free_slots(self) -> int:
        """Slots that may take a new attempt: those of the default runner that can run one, less running
        attempts (an attempt of the other runner also takes a slot)."""
        if self.draining:
            return 0
        return max(0, self._runners.readiness()[2] - self.busy)

    def held(self) -> list[pb.Lease]:
        """The leases of running attempts (to renew, and to declare on (re)registering)."""
        return [pb.Lease(task_id=e.assignment.task_id, fencing_token=e.assignment.fencing_token)
                for e in self.executions.values() if e.run.killed is None]

    def running_for(self, now: float) -> Iterator[float]:
        """How long each attempt on a slot has run."""
        return (now - e.begun_at for e in self.executions.values() if e.begun_at)

    def task_ids(self) -> list[str]:
        return list(self.executions)

    def log_of(self, task_id: str, attempt: int) -> str | None:
        """The log path of an attempt queued or running here (None: not here)."""
        e = self.executions.get(task_id)
        return e.run.log_path if e is not None and e.assignment.attempt == attempt else None

    def registered(self, lost: set[tuple[str, int]], asked_at: float) -> None:
        """A master took this worker's leases: all renewed but ``lost``, whose attempts are killed. ``asked_at``:
        when this worker sent its Register (monotonic): the master renewed them after that, so counting from
        then never makes a lease outlive the master's, however late the answer came."""
        for execution in list(self.executions.values()):
            if (execution.assignment.task_id, execution.assignment.fencing_token) in lost:
                self.kill(execution, "lost", "the master no longer recognises this lease")
            else:
                execution.renewed_at = max(execution.renewed_at, asked_at)

    def renewed(self, leases: Iterable[pb.Lease], lost: Iterable[pb.Lease], asked_at: float) -> None:
        """A heartbeat's answer: ``leases`` renewed when the master read the heartbeat sent at ``asked_at``
        (monotonic; see :meth:`registered`), ``lost`` ones killed."""
        for lease in leases:
            execution = self._leased(lease.task_id, lease.fencing_token)
            if execution is not None:
                execution.renewed_at = max(execution.renewed_at, asked_at)
        for lease in lost:
            execution = self._leased(lease.task_id, lease.fencing_token)
            if execution is not None:
                self.kill(execution, "lost", "lease lost (cancelled, expired or reassigned)")

    def cancel(self, cancel: pb.CancelTask) -> None:
        execution = self.executions.get(cancel.task_id)
        if execution is not None and cancel.fencing_token in (0, execution.assignment.fencing_token):
            self.kill(execution, "cancel", cancel.reason or "cancelled")

    def _leased(self, task_id: str, token: int) -> Execution | None:
        execution = self.executions.get(task_id)
        return execution if execution is not None and execution.assignment.fencing_token == token else None

    # ---- attempts ----------------------------------------------------------------------------------------

    def accept(self, assignment: pb.TaskAssignment, have_room: bool, leased_at: float) -> bool:
        """Queue an attempt for a slot (True), or hand it straight back when it is a duplicate or the
        worker has no room (the master's view of its capacity was out of date). ``leased_at`` (monotonic): when
        this worker sent the last message the master had read before it leased the task — its lease is counted
        from then (see :meth:`registered`)."""
        if assignment.task_id in self.executions:
            log.warning("task=%s already running here; duplicate assignment ignored", assignment.task_id)
            return False
        if not have_room:
            self._finish(assignment, pb.ATTEMPT_RELEASED, Outcome("FAILED", error="worker has no free slot"), 0, 0)
            return False
        log_path = self._logs.path_for(assignment.task_id, assignment.attempt, self._clock.now())
        run = AttemptRun(assignment, self._cfg.worker_id, log_path, self._attempts_dir, self._cfg.result_max_bytes,
                         _UNPLACED, fence=self._fence_address)
        now = self._clock.monotonic()
        wait_s = assignment.start_after.ToMilliseconds() / 1000
        execution = Execution(assignment, run, self._runners.for_spec(assignment.spec), renewed_at=leased_at,
                              not_before=now + wait_s)
        if wait_s > 0:
            self._clock.call_later(wait_s, self.pump)
        self.executions[assignment.task_id] = execution
        self._idle.clear()
        self.queue.append(execution)
        ref = assignment.spec.bundle
        root = self._bundles.acquire_cached(ref) if ref.digest else None
        if root is not None:
            execution.bundle, execution.bundle_root, execution.placed = ref, root, True
        elif ref.digest:  # fetched while it waits for a slot
            self._spawn(self._place(execution))
        else:
            execution.placed = True
        return True

    def kill(self, execution: Execution, kind: str, reason: str) -> None:
        """Stop an attempt (once): a queued one ends without running, a running one's runner stops it."""
        if execution.run.killed is not None:
            return
        execution.run.killed = Kill(kind, reason)
        if execution.begun_at:
            execution.runner.kill(execution.run)
            return
        try:
            self.queue.remove(execution)
        except ValueError:
            pass
        self._ended(execution, Outcome("FAILED", error=reason))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def pump(self) -> None:
        """Give free slots the queued attempts that can run (in arrival order)."""
        if self._pumping:  # an attempt that ends at once re-enters here: the loop below sees it
            return
        self._pumping = True
        try:
            now = self._clock.monotonic() + START_SLACK_S
            ready_slots = self._runners.readiness()[2]  # once: beginning an attempt readies or retires no driver
            while self.queue and not self.draining and self.busy < ready_slots:
                execution = next((e for e in self.queue if e.placed and e.not_before <= now), None)
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
            root = await self._bundles.acquire(ref)
        except Exception as exc:
            log.warning("task=%s: bundle %s unavailable: %s", execution.assignment.task_id, ref.digest[:12], exc)
            if not execution.ended:
                self.queue.remove(execution)
                self._ended(execution, Outcome.failure(exc, f"cannot fetch the job's bundle {ref.digest[:12]}: "))
            return
        if execution.ended:  # killed while its bundle was fetched
            self._bundles.release(ref)
            return
        execution.bundle = ref
        execution.bundle_root = root
        execution.placed = True
        self.pump()

    def _begin(self, execution: Execution) -> None:
        assignment = execution.assignment
        runner = execution.runner
        full = self._disk.check_recent()
        if full:  # filled since the last probe: the attempt goes back unstarted
            self.kill(execution, "release", f"handed back: {full}")
            return
        execution.begun_at = self._clock.monotonic()
        execution.started_ms = int(self._clock.now() * 1000)
        self.busy += 1
        timeout_s = assignment.spec.timeout.ToMilliseconds() / 1000
        if timeout_s > 0:
            execution.timer = self._clock.call_later(
                timeout_s, lambda: self.kill(execution, "timeout", f"timed out after {timeout_s:g}s"))
        try:
            run = execution.run
            run.workspace = workspace(assignment.spec, execution.bundle_root, lambda: run.work_dir)
        except WorkspaceError as exc:
            self._ended(execution, Outcome("FAILED", error=str(exc)))
            return
        log.debug("task=%s attempt=%d token=%d starting (%s runner)", assignment.task_id, assignment.attempt,
                  assignment.fencing_token, runner.name)
        try:
            runner.begin(execution.run, lambda outcome: self._ended(execution, outcome))
        except Exception as exc:
            if no_space(exc):
                self._ended(execution, Outcome("FAILED", error=f"could not start: {exc}", no_space=exc))
                return
            log.exception("task=%s runner failed", assignment.task_id)
            self._ended(execution, Outcome.failure(exc, f"{runner.name} runner error: "))

    def _ended(self, execution: Execution, outcome: Outcome) -> None:
        """The runner's outcome of an attempt, or the end of one that never ran (once per attempt)."""
        if execution.ended:
            return
        execution.ended = True
        a = execution.assignment
        killed = execution.run.killed
        if execution.begun_at:
            self.busy -= 1
            if killed is None:
                self.prefetch.ended(self._clock.monotonic() - execution.begun_at)
        if execution.timer is not None:
            execution.timer.cancel()
        if execution.bundle is not None:
            self._bundles.release(execution.bundle)
            execution.bundle = None
        if self.executions.get(a.task_id) is execution:
            del self.executions[a.task_id]
        if not self.executions:
            self._idle.set()
        finished_ms = int(self._clock.now() * 1000)
        if killed is None and outcome.no_space is not None:  # never ran: handed back, no attempt used up
            self._disk.refused(outcome.no_space)
            killed = execution.run.killed = Kill("release", f"handed back: {self._disk.problem}")
        if killed is not None:
            outcome.error = killed.reason
            state = _KILL_OUTCOMES[killed.kind]
        else:
            state = pb.ATTEMPT_SUCCEEDED if outcome.state == "SUCCEEDED" else pb.ATTEMPT_FAILED
        log_path = execution.run.log_path if execution.begun_at else ""
        if log_path:  # a log request that names the attempt's range as it began, or no path, finds it here
            self._logs.ended(a.task_id, a.attempt, log_path)
        quiet = killed is None or killed.kind == "release"
        self._finish(a, state, outcome, execution.started_ms, finished_ms, log_path, quiet=quiet)
        self.pump()
        # Results leave now when nothing more is coming soon to share the message, or when the master needs
        # them to refill the queue in time (worker/reports.py).
        if self.busy == 0 or self.prefetch.running_low(len(self.queue), self._cfg.slots):
            self._ledger.flush()

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
        self._metrics.attempt_ended(state, started_ms, finished_ms)
        self._ledger.record(result)

    # ---- the watch -----------------------------------------------------------------------------------------

    async def watch(self) -> None:
        """Self-fencing, hand-back of queued tasks stuck behind long attempts, and the start reports of
        attempts that outlive STARTED_REPORT_AFTER_S.

        Short attempts report their start together with their result; a longer one tells the master it
        started (so ``logs -f`` finds its log) from here, instead of from a timer per attempt.
        """
        while True:
            self._hand_back_stuck()
            limit = self._terms.lease_s - self._cfg.self_fence_margin_s
            now = self._clock.monotonic()
            announce_before_ms = int(self._clock.now() * 1000) - STARTED_REPORT_AFTER_S * 1000
            for execution in list(self.executions.values()):
                if execution.run.killed is None and now - execution.renewed_at > limit:
                    log.warning("task=%s lease not renewed for %.1fs; killing it (self-fencing)",
                                execution.assignment.task_id, now - execution.renewed_at)
                    self.kill(execution, "fence", "lease could not be renewed (self-fencing)")
                if not execution.announced and 0 < execution.started_ms <= announce_before_ms:
                    execution.announced = True
                    self._announce_start(execution)
            await self._clock.sleep(WATCH_S)

    def _hand_back_stuck(self) -> None:
        now = self._clock.monotonic()
        stuck = [e for e in self.queue if e.placed and now - e.not_before > HANDBACK_AFTER_S]
        if stuck:
            log.info("handing back %d queued tasks: no slot freed for %.1fs (the slots run long attempts)",
                     len(stuck), HANDBACK_AFTER_S)
        for execution in stuck:
            self.kill(execution, "release", f"handed back after waiting {now - execution.not_before:.1f}s for a "
                                            "free slot on this worker (its slots run long attempts)")

    def _announce_start(self, execution: Execution) -> None:
        a = execution.assignment
        started = pb.TaskStarted(task_id=a.task_id, fencing_token=a.fencing_token, log_path=execution.run.log_path)
        started.started_at.FromMilliseconds(execution.started_ms)
        self._ledger.started(started)
