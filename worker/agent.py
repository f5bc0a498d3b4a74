"""The worker agent (LTS's TaskTracker, Doris BE): slots, the master stream, leases, results, drain.

Life of a connection: open ``WorkerService.Connect`` to a master (trying the configured list in turn,
with jittered exponential backoff), send ``Register`` with the leases still held from before, wait for
``Registered``, resend every result not yet acknowledged, then heartbeat every interval while running
the tasks that arrive in ``TaskBatch`` messages.

Guarantees kept here:

* **results are not lost**: a result stays in ``pending`` until the master acknowledges it (accepted or
  refused as stale) and is resent after a reconnect;
* **self-fencing**: an attempt whose lease was not renewed for ``lease − margin`` is killed and its result
  dropped — by then the master may have given the task to another worker, and the two must not overlap;
* **drain**: on SIGTERM the worker stops taking tasks, lets running ones finish for ``drain_timeout``,
  hands the rest back (RELEASED, no attempt used up), waits for the acknowledgements and exits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Coroutine

import grpc
from tenacity import AsyncRetrying, retry_if_exception_type, wait_exponential_jitter

from sparkyard import __version__
from sparkyard.clock import Cancellable, Clock, SystemClock
from sparkyard.config import WorkerConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg
from sparkyard.worker.bundles import BundleCache, fetch_over
from sparkyard.worker.children import Children
from sparkyard.worker.logs import LogFiles, day_name, remove_older_than
from sparkyard.worker.prefetch import Prefetch
from sparkyard.worker.reports import ReportSender
from sparkyard.worker.runner.base import AttemptRun, Outcome, Runner
from sparkyard.worker.runner.session import SessionRunner
from sparkyard.worker.runner.submit import SubmitRunner
from sparkyard.worker.workspace import Workspace, WorkspaceError, workspace

log = logging.getLogger(__name__)

# Reconnect backoff: first pause and cap (jittered).
RECONNECT_INITIAL_S = 0.2
RECONNECT_MAX_S = 5.0
# How long to wait for Registered after opening a stream.
REGISTER_TIMEOUT_S = 10.0
# Lease and heartbeat assumed until the master says otherwise.
DEFAULT_LEASE_S = 15.0
DEFAULT_HEARTBEAT_S = 3.0
# An attempt still running after this long reports that it started (shorter ones report it with their
# result): halves the messages of a stream of short tasks, keeps `logs -f` working for long ones. The
# check runs every FENCE_CHECK_S, so the report leaves 0.1–0.35 s after the start.
STARTED_REPORT_AFTER_S = 0.1
# A queued task that has waited this long for a slot is handed back (RELEASED, no attempt used up) so a
# worker with a free slot runs it: the slots here are held by attempts that run far longer than usual.
HANDBACK_AFTER_S = 1.0
# A result not acknowledged for this long is sent again on the next heartbeat.
RESEND_AFTER_S = 10.0
# How often the self-fencing watchdog looks at lease renewals.
FENCE_CHECK_S = 0.25
# How long a stop or the end of a drain waits for killed attempts to end (each runner bounds its kill).
STOP_TIMEOUT_S = 60.0
# A runner that fails to start is tried again after this pause, doubling up to the maximum.
RUNNER_RETRY_S = 1.0
RUNNER_RETRY_MAX_S = 60.0
# After a drain, how long to wait for the master to acknowledge the last results.
FLUSH_TIMEOUT_S = 10.0
# The longest time between two sweeps of old attempt logs (a sweep runs every retention / 2 at most).
LOG_SWEEP_MAX_S = 3600.0
KEEPALIVE_MS = 10_000

# An attempt's workspace until the agent has placed it (bundle fetched, working directory chosen).
_UNPLACED = Workspace("", "", (), ())
_RUNNER_NAMES = {pb.RUNNER_SUBMIT: "submit", pb.RUNNER_SESSION: "session"}
# Every ended attempt is reported, killed ones too: the master frees a slot only on a worker's result.
# A lost lease's report is refused as stale (the master already moved the task on); a self-fenced one's
# hands the task back if the master has not requeued it yet.
_KILL_OUTCOMES = {"timeout": pb.ATTEMPT_TIMED_OUT, "cancel": pb.ATTEMPT_CANCELLED, "release": pb.ATTEMPT_RELEASED,
                  "lost": pb.ATTEMPT_RELEASED, "fence": pb.ATTEMPT_RELEASED}


class StreamClosed(Exception):
    """The master ended the stream (or it broke)."""


@dataclass(eq=False)
class Execution:
    """One attempt leased to this worker: queued for a slot, then running."""

    assignment: pb.TaskAssignment
    run: AttemptRun
    renewed_at: float  # monotonic time of the last lease renewal (or of receipt)
    queued_at: float  # monotonic time it arrived
    unqueue: Callable[[Execution], None]  # how a kill ends it while it is still queued
    begun_at: float = 0.0  # monotonic time a slot took it (0: still queued)
    started_ms: int = 0  # wall-clock ms when the runner was given the attempt
    placed: bool = False  # its bundle (if any) is in the cache: a slot can take it
    bundle_root: Path | None = None
    ended: bool = False
    announced: bool = False  # its start was reported on its own (see Agent._fence_loop)
    kill_kind: str = ""  # timeout | cancel | release | lost | fence
    timer: Cancellable | None = None  # the attempt's timeout, if it has one
    bundle: pb.BundleRef | None = None  # the bundle it holds in the cache while it runs

    def kill(self, kind: str, reason: str) -> None:
        if not self.kill_kind:
            self.kill_kind = kind
            self.run.kill(reason)
            if not self.begun_at:
                self.unqueue(self)


@dataclass
class _Pending:
    result: pb.TaskResult
    sent_at: float


@dataclass
class _Connection:
    outbound: asyncio.Queue[pb.WorkerMessage | None] = field(default_factory=asyncio.Queue)


class Agent:
    def __init__(self, cfg: WorkerConfig, *, clock: Clock | None = None,
                 runners: dict[str, Runner] | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.worker_id = cfg.worker_id
        self.work_dir = cfg.work_path
        self.logs = LogFiles(self.work_dir)
        self._attempts_dir = str(self.work_dir / "attempts")
        self.children = Children(self.work_dir)
        self.runners: dict[str, Runner] = runners or {
            "submit": SubmitRunner(cfg.spark_master, cfg.slots, self.children, task_memory_mb=cfg.task_memory_mb,
                                   conf=cfg.conf),
            "session": SessionRunner(cfg.spark_master, cfg.slots, self.work_dir, self.children, conf=cfg.conf,
                                     task_memory_mb=cfg.task_memory_mb, max_tasks=cfg.driver_max_tasks,
                                     on_readiness=self._readiness_changed),
        }
        self._channel: grpc.aio.Channel | None = None
        self.bundles = BundleCache(self.work_dir / "bundles", cfg.bundle_cache_bytes,
                                   fetch_over(lambda: self._channel, self._metadata))
        self._runner_error = ""  # the default runner failed to start (retried with backoff)
        self._readiness: tuple[int, str, int] = (pb.READINESS_STARTING, "starting", 0)
        self.executions: dict[str, Execution] = {}  # every attempt leased here, queued or running
        self.queue: deque[Execution] = deque()  # leased, waiting for a slot (prefetched), in arrival order
        self._busy = 0  # attempts on a slot
        self._pumping = False
        self.prefetch = Prefetch(cfg.prefetch_max)
        self._asked = 0  # the prefetch last told to the master
        self._asked_before = 0  # the one before it (the master may still be working from it)
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.draining = False
        self.lease_s = DEFAULT_LEASE_S
        self.heartbeat_s = DEFAULT_HEARTBEAT_S
        self.registered = asyncio.Event()
        self._conn: _Connection | None = None
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()  # set while no attempt is running
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._master_index = 0
        self.connections = 0
        self.reports = ReportSender(self.clock, self._send_reports)

    # ---- life cycle ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop` (after a drain or at once)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(self.children.end_leftovers)
        await asyncio.to_thread(self.bundles.load)
        await self._sweep_old_logs()
        self.reports.start()
        # Only the default runner starts now; another starts when a job first asks for it.
        starter = asyncio.create_task(self._start_default_runner(), name="start-runner")
        fence = asyncio.create_task(self._fence_loop(), name="self-fence")
        connect = asyncio.create_task(self._connect_loop(), name="connect")
        retention = asyncio.create_task(self._retention_loop(), name="log-retention")
        await self._stopping.wait()
        connect.cancel()
        fence.cancel()
        retention.cancel()
        starter.cancel()
        for execution in list(self.executions.values()):
            execution.kill("release", "worker stopping")
        await asyncio.gather(connect, fence, retention, starter, return_exceptions=True)
        await self._until_idle(STOP_TIMEOUT_S)
        await self.reports.close(timeout_s=1.0)
        for runner in self.runners.values():
            await runner.close()

    async def _start_default_runner(self) -> None:
        """Start the default runner, retrying with backoff; until it can run a task no slot is offered."""
        runner = self.runners[self.cfg.runner]
        pause = RUNNER_RETRY_S
        while True:
            try:
                await runner.start()
                self._runner_error = ""
                break
            except Exception as exc:
                self._runner_error = f"{runner.name} runner failed to start: {exc} (retrying in {pause:.0f}s)"
                log.error("%s", self._runner_error)
                self._readiness_changed()
                await asyncio.sleep(pause)
                pause = min(RUNNER_RETRY_MAX_S, pause * 2)
        self._readiness_changed()

    def readiness(self) -> tuple[int, str, int]:
        """(pb.Readiness, reason, slots that can take a task now), from the default runner."""
        if self._runner_error:
            return pb.READINESS_DEGRADED, self._runner_error, 0
        state, reason, ready = self.runners[self.cfg.runner].readiness()
        return state, reason, min(ready, self.cfg.slots)

    def _readiness_changed(self) -> None:
        """Tell the master at once when the slots that can run a task change (not at the next heartbeat)."""
        now = self.readiness()
        if now != self._readiness:
            self._readiness = now
            log.info("readiness %s%s (%d of %d slots)", pb.Readiness.Name(now[0]).removeprefix("READINESS_"),
                     f": {now[1]}" if now[1] else "", now[2], self.cfg.slots)
            if self.registered.is_set():
                self._send_heartbeat()

    async def drain(self) -> None:
        """Stop taking tasks, finish or hand back running ones, flush results, then stop."""
        if self.draining:
            return
        self.draining = True
        log.info("draining: %d running, %d queued (handed back now), waiting up to %.0fs", self._busy,
                 len(self.queue), self.cfg.drain_timeout_s)
        for execution in list(self.queue):
            execution.kill("release", "worker draining: handed back")
        self._send_heartbeat()
        await self._until_idle(self.cfg.drain_timeout_s)
        for execution in list(self.executions.values()):
            execution.kill("release", "worker draining: handed back")
        await self._until_idle(STOP_TIMEOUT_S)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while self.pending and time.monotonic() < deadline and self.registered.is_set():
            await asyncio.sleep(0.05)
        if self.pending:
            log.warning("%d results not acknowledged at exit; the master will requeue those tasks", len(self.pending))
        self.stop()

    def stop(self) -> None:
        self._stopping.set()

    async def _until_idle(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until no attempt is running."""
        if self.executions:
            try:
                await asyncio.wait_for(self._idle.wait(), timeout_s)
            except asyncio.TimeoutError:
                log.warning("%d attempts still running after %.0fs", len(self.executions), timeout_s)

    async def _retention_loop(self) -> None:
        """Sweep old attempt logs and scratch directories for as long as the worker runs (a worker runs
        for months; a sweep only at start would let its disk fill)."""
        interval = min(LOG_SWEEP_MAX_S, self.cfg.log_retention_s / 2)
        while True:
            await self.clock.sleep(interval)
            try:
                await self._sweep_old_logs()
            except Exception:  # a disk problem must not end the sweeps, or the worker
                log.exception("sweeping old attempt logs failed")

    async def _sweep_old_logs(self) -> None:
        """Remove day directories of logs and per-task scratch directories older than the retention —
        never today's log directory nor the scratch of a running task, however old."""
        now = self.clock.now()
        keep = {self.logs.current_day, day_name(now), *self.executions}
        removed = await asyncio.to_thread(remove_older_than, (self.logs.root, self.work_dir / "attempts"),
                                          now - self.cfg.log_retention_s, keep)
        if removed:
            log.info("removed %d log/scratch directories older than %.0fs", removed, self.cfg.log_retention_s)

    # ---- connection ------------------------------------------------------------------------------------

    def _metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.cfg.token}")] if self.cfg.token else []

    async def _connect_loop(self) -> None:
        while not self._stopping.is_set():
            retrying = AsyncRetrying(
                wait=wait_exponential_jitter(initial=RECONNECT_INITIAL_S, max=RECONNECT_MAX_S),
                retry=retry_if_exception_type((grpc.aio.AioRpcError, StreamClosed, OSError, asyncio.TimeoutError)),
                before_sleep=lambda state: log.warning(
                    "cannot reach a master (%r); retrying", state.outcome.exception() if state.outcome else "?"),
            )
            async for attempt in retrying:
                with attempt:
                    await self._connect_once()

    async def _connect_once(self) -> None:
        masters = self.cfg.masters
        address = masters[self._master_index % len(masters)]
        self._master_index += 1
        options = [("grpc.keepalive_time_ms", KEEPALIVE_MS), ("grpc.keepalive_permit_without_calls", 1),
                   ("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        async with grpc.aio.insecure_channel(address, options=options) as channel:
            self._channel = channel
            conn = _Connection()
            conn.outbound.put_nowait(pb.WorkerMessage(register=self._register_message()))
            call = pbg.WorkerServiceStub(channel).Connect(self._requests(conn), metadata=self._metadata())
            try:
                first = await asyncio.wait_for(call.read(), REGISTER_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                    log.error("master %s refused this worker: %s", address, exc.details())
                raise
            if first is grpc.aio.EOF or first.WhichOneof("kind") != "registered":
                raise StreamClosed(f"master {address} did not answer Register")
            self._on_registered(first.registered, conn, address)
            heartbeat = asyncio.create_task(self._heartbeat_loop(), name="heartbeat")
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        log.warning("master %s closed the stream", address)
                        return
                    self._on_message(message)
            except grpc.aio.AioRpcError as exc:
                # A registered session that ends returns normally: the next connect starts with a short
                # backoff again; only failures to (re)register back off exponentially.
                log.warning("stream to master %s broke: %s", address, exc.details() or exc.code().name)
            finally:
                heartbeat.cancel()
                self.registered.clear()
                self._conn = None
                conn.outbound.put_nowait(None)

    @staticmethod
    async def _requests(conn: _Connection) -> AsyncIterator[pb.WorkerMessage]:
        while True:
            message = await conn.outbound.get()
            if message is None:
                return
            yield message

    def _register_message(self) -> pb.Register:
        readiness, reason, ready = self.readiness()
        return pb.Register(
            worker_id=self.worker_id, group=self.cfg.group, slots=self.cfg.slots, host=socket.gethostname(),
            pid=os.getpid(), labels=self.cfg.labels, version=__version__,
            default_runner=pb.RUNNER_SUBMIT if self.cfg.runner == "submit" else pb.RUNNER_SESSION,
            held=self._held(), readiness=readiness, readiness_reason=reason, ready_slots=ready,
            prefetch=self._ask(),
        )

    def _held(self) -> list[pb.Lease]:
        return [pb.Lease(task_id=e.assignment.task_id, fencing_token=e.assignment.fencing_token)
                for e in self.executions.values() if not e.kill_kind]

    def _on_registered(self, reg: pb.Registered, conn: _Connection, address: str) -> None:
        self.lease_s = reg.lease.ToMilliseconds() / 1000 or DEFAULT_LEASE_S
        self.heartbeat_s = reg.heartbeat_interval.ToMilliseconds() / 1000 or DEFAULT_HEARTBEAT_S
        now = self.clock.monotonic()
        lost = {(l.task_id, l.fencing_token) for l in reg.lost}
        for execution in list(self.executions.values()):
            key = (execution.assignment.task_id, execution.assignment.fencing_token)
            if key in lost:
                execution.kill("lost", "the master no longer recognises this lease")
            else:
                execution.renewed_at = now
        self._conn = conn
        self.connections += 1
        self.registered.set()
        log.info("registered with master %s as %s (slots %d, group %s, lease %.0fs, heartbeat %.0fs)", address,
                 self.worker_id, self.cfg.slots, self.cfg.group, self.lease_s, self.heartbeat_s)
        for pending in self.pending.values():
            self.reports.result(pending.result)
            pending.sent_at = now

    def _send(self, message: pb.WorkerMessage) -> bool:
        conn = self._conn
        if conn is None:
            return False
        conn.outbound.put_nowait(message)
        return True

    def _send_reports(self, message: pb.WorkerMessage) -> bool:
        """Reports carry the prefetch: the results in them free slots, the prefetch says how many more
        tasks to send."""
        message.reports.prefetch = self._ask()
        message.reports.seq = self.prefetch.next_seq(self.clock.monotonic(), bool(message.reports.results))
        return self._send(message)

    def _ask(self) -> int:
        """The prefetch to ask the master for now (and remember it was asked)."""
        now = self.clock.monotonic()
        running = (now - e.begun_at for e in self.executions.values() if e.begun_at)
        asked = 0 if self.draining else self.prefetch.want(self.readiness()[2], running)
        if asked != self._asked:
            self._asked_before, self._asked = self._asked, asked
        return asked

    # ---- messages from the master ----------------------------------------------------------------------

    def _on_message(self, message: pb.MasterMessage) -> None:
        kind = message.WhichOneof("kind")
        if kind == "batch":
            self.prefetch.batch_arrived(self.clock.monotonic(), message.batch.reports_seq)
            # Room for what this worker asked for: its ready slots and its last prefetch. A master that
            # sends more worked from an older figure; the excess goes straight back.
            ready = 0 if self.draining else self.readiness()[2]
            room = ready + max(self._asked, self._asked_before) - len(self.executions) if ready else 0
            for assignment in message.batch.tasks:
                if self._accept(assignment, room > 0):
                    room -= 1
            self._pump()
        elif kind == "heartbeat_ack":
            now = self.clock.monotonic()
            for lease in message.heartbeat_ack.renewed:
                execution = self.executions.get(lease.task_id)
                if execution is not None and execution.assignment.fencing_token == lease.fencing_token:
                    execution.renewed_at = now
            for lease in message.heartbeat_ack.lost:
                execution = self.executions.get(lease.task_id)
                if execution is not None and execution.assignment.fencing_token == lease.fencing_token:
                    execution.kill("lost", "lease lost (cancelled, expired or reassigned)")
        elif kind == "cancel":
            cancel = message.cancel
            execution = self.executions.get(cancel.task_id)
            if execution is not None and cancel.fencing_token in (0, execution.assignment.fencing_token):
                execution.kill("cancel", cancel.reason or "cancelled")
        elif kind == "acks":
            for ack in message.acks.acks:
                self.pending.pop((ack.task_id, ack.fencing_token), None)
                if not ack.accepted:
                    log.info("task=%s token=%d result refused by the master: %s", ack.task_id, ack.fencing_token,
                             ack.reason)
        elif kind == "log_request":
            self._spawn(self._answer_log(message.log_request))

    async def _answer_log(self, request: pb.LogRequest) -> None:
        def running(task_id: str, attempt: int) -> bool:
            e = self.executions.get(task_id)
            return e is not None and e.assignment.attempt == attempt

        data = await self.logs.answer(request, running)
        self._send(pb.WorkerMessage(log=data))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- heartbeats and self-fencing ---------------------------------------------------------------------

    def free_slots(self) -> int:
        """Slots that may take a new attempt: those of the default runner that can run one, less running
        attempts (an attempt of the other runner also takes a slot)."""
        if self.draining:
            return 0
        return max(0, self.readiness()[2] - self._busy)

    def _send_heartbeat(self) -> None:
        readiness, reason, ready = self.readiness()
        self._send(pb.WorkerMessage(heartbeat=pb.Heartbeat(
            free_slots=self.free_slots(), held=self._held(), draining=self.draining,
            readiness=readiness, readiness_reason=reason, ready_slots=ready, prefetch=self._ask())))

    async def _heartbeat_loop(self) -> None:
        while True:
            self._send_heartbeat()
            now = self.clock.monotonic()
            for pending in self.pending.values():
                if now - pending.sent_at > RESEND_AFTER_S:
                    self.reports.result(pending.result)
                    pending.sent_at = now
            await self.clock.sleep(self.heartbeat_s)

    async def _fence_loop(self) -> None:
        """Self-fencing, hand-back of queued tasks stuck behind long attempts, the prefetch when it
        changes with no result to carry it, and the start reports of attempts that outlive
        STARTED_REPORT_AFTER_S.

        Short attempts report their start together with their result; a longer one tells the master it
        started (so ``logs -f`` finds its log) from here, instead of from a timer per attempt.
        """
        while True:
            self._hand_back_stuck()
            asked = self._asked
            if self.registered.is_set() and self._ask() != asked:
                log.debug("prefetch %d → %d (task %.2f ms, refill %.2f ms)", asked, self._asked,
                          (self.prefetch.task_s or 0) * 1000, self.prefetch.refill_s * 1000)
                self._send_reports(pb.WorkerMessage(reports=pb.Reports()))
            limit = self.lease_s - self.cfg.self_fence_margin_s
            now = self.clock.monotonic()
            announce_before_ms = int(self.clock.now() * 1000) - STARTED_REPORT_AFTER_S * 1000
            for execution in list(self.executions.values()):
                if not execution.kill_kind and now - execution.renewed_at > limit:
                    log.warning("task=%s lease not renewed for %.1fs; killing it (self-fencing)",
                                execution.assignment.task_id, now - execution.renewed_at)
                    execution.kill("fence", "lease could not be renewed (self-fencing)")
                if not execution.announced and 0 < execution.started_ms <= announce_before_ms:
                    execution.announced = True
                    self._announce_start(execution)
            await self.clock.sleep(FENCE_CHECK_S)

    def _announce_start(self, execution: Execution) -> None:
        a = execution.assignment
        started = pb.TaskStarted(task_id=a.task_id, fencing_token=a.fencing_token, log_path=execution.run.log_path)
        started.started_at.FromMilliseconds(execution.started_ms)
        self.reports.started(started)

    # ---- running attempts --------------------------------------------------------------------------------

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
                         _UNPLACED)
        now = self.clock.monotonic()
        execution = Execution(assignment, run, renewed_at=now, queued_at=now, unqueue=self._unqueue)
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
        runner = self._runner_for(assignment.spec)
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
            if not execution.kill_kind:
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
        kind = execution.kill_kind
        if kind:
            outcome.error = execution.run.kill_reason
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
        self.pending[(a.task_id, a.fencing_token)] = _Pending(result, self.clock.monotonic())
        self.reports.result(result)
