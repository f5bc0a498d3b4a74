"""The worker agent (LTS's TaskTracker, Doris BE): the master stream, leases, results, drain (the attempts
themselves, from arrival to reported end, are :mod:`sparkyard.worker.attempts`).

Life of a connection: open ``WorkerService.Connect`` to a master (trying the configured list in turn,
with jittered exponential backoff), send ``Register`` with the leases still held from before, wait for
``Registered``, resend every result not yet acknowledged, then heartbeat every interval while running
the tasks that arrive in ``TaskBatch`` messages.

Guarantees kept here:

* **results are not lost**: a result stays in ``pending`` until the master acknowledges it (accepted or
  refused as stale) and is resent after a reconnect;
* **self-fencing**: an attempt whose lease was not renewed for ``lease − margin`` is killed (and its end
  reported, to be refused as stale if the master has moved on) — by then the master may have given the task
  to another worker, and the two must not overlap;
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
from typing import Any, AsyncIterator, Coroutine

import grpc
from aiohttp import web
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from sparkyard import __version__
from sparkyard.channel import open_channel
from sparkyard.clock import Clock, SystemClock
from sparkyard.config import WorkerConfig
from sparkyard.options import RUNNERS
from sparkyard.errors import LEADER_METADATA
from sparkyard.httpserve import Access, HttpEndpoint, Route, metrics_response
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg
from sparkyard.worker.attempts import AttemptSlots, Execution, Pending
from sparkyard.worker.bundles import BundleCache, fetch_over
from sparkyard.worker.children import Children
from sparkyard.worker.fence_desk import FenceDesk, confirm_with_master, desk_address
from sparkyard.worker.logs import LogFiles, Retention
from sparkyard.worker.metrics import WorkerMetrics
from sparkyard.worker.outbox import Outbox
from sparkyard.worker.prefetch import Prefetch
from sparkyard.worker.reports import ReportSender
from sparkyard.worker.runner.base import Runner
from sparkyard.worker.runner.connect import ConnectRunner
from sparkyard.worker.runner.session import SessionRunner
from sparkyard.worker.runner.submit import SubmitRunner

log = logging.getLogger(__name__)

# Reconnect backoff: first pause and cap (jittered).
RECONNECT_INITIAL_S = 0.2
RECONNECT_MAX_S = 5.0
# How long to wait for Registered after opening a stream; and, for a master this worker left for being
# silent while another is there to ask, how long one probe of it may take (a live master answers in ms).
REGISTER_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 1.0
# Lease and heartbeat assumed until the master says otherwise.
DEFAULT_LEASE_S = 15.0
DEFAULT_HEARTBEAT_S = 3.0
# An attempt still running after this long reports that it started (shorter ones report it with their
# result): halves the messages of a stream of short tasks, keeps `logs -f` working for long ones. The
# check runs every FENCE_CHECK_S, so the report leaves 0.1–0.35 s after the start.
STARTED_REPORT_AFTER_S = 0.1
# A result not acknowledged for this long is sent again on the next heartbeat.
RESEND_AFTER_S = 10.0
# How often the self-fencing watchdog looks at lease renewals.
FENCE_CHECK_S = 0.25
# While an election is under way, a worker asks a standby again this often.
ELECTION_POLL_S = 0.25
# A master that sends nothing (not even a heartbeat acknowledgement) for this many heartbeats is taken for
# gone (paused, partitioned): the worker connects again, to the leader a standby names. Such a silent
# master is probed (PROBE_TIMEOUT_S) once per heartbeat until it answers: it may be dead (a standby takes
# over within a leader lease), or this worker's own network may have been cut (the master leads on).
SILENT_HEARTBEATS = 3
# A master that names its liveness interval (it sends something at least that often) is taken for gone
# after this many of them without a word: 2 s with today's masters, inside the default leader lease, so
# the worker already waits at a standby when the standby takes over.
SILENT_INTERVALS = 4
# How long a stop or the end of a drain waits for killed attempts to end (each runner bounds its kill).
STOP_TIMEOUT_S = 60.0
# A runner that fails to start is tried again after this pause, doubling up to the maximum.
RUNNER_RETRY_S = 1.0
RUNNER_RETRY_MAX_S = 60.0
# After a drain, how long to wait for the master to acknowledge the last results.
FLUSH_TIMEOUT_S = 10.0
KEEPALIVE_MS = 10_000



class StreamClosed(Exception):
    """The master ended the stream (or it broke)."""


class Redirected(Exception):
    """A standby master answered: connect to the leader it named at once, or (no leader yet, or only one
    this worker left for being silent and probed within the last heartbeat) ask again after
    ELECTION_POLL_S; also raised when a probe of a silent master fails — never an exponential backoff while
    masters are there to answer."""

    def __init__(self, leader: str) -> None:
        super().__init__(leader or "no leader yet")
        self.pause = 0.0 if leader else ELECTION_POLL_S




@dataclass
class _Connection:
    outbound: asyncio.Queue[pb.WorkerMessage | None] = field(default_factory=asyncio.Queue)


class Agent(AttemptSlots):
    def __init__(self, cfg: WorkerConfig, *, clock: Clock | None = None,
                 runners: dict[str, Runner] | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.worker_id = cfg.worker_id
        self.work_dir = cfg.work_path
        self.logs = LogFiles(self.work_dir)
        self._attempts_dir = str(self.work_dir / "attempts")
        self.retention = Retention(self.logs, self.work_dir / "attempts", cfg.log_retention_s, self.clock,
                                   lambda: self.executions)
        self.children = Children(self.work_dir)
        self.runners: dict[str, Runner] = runners or {
            "submit": SubmitRunner(cfg.spark_master, cfg.slots, self.children, task_memory_mb=cfg.task_memory_mb,
                                   conf=cfg.conf),
            "session": SessionRunner(cfg.spark_master, cfg.slots, self.work_dir, self.children, conf=cfg.conf,
                                     task_memory_mb=cfg.task_memory_mb, max_tasks=cfg.driver_max_tasks,
                                     wait_max_s=cfg.runner_wait_max_s, on_readiness=self._readiness_changed),
            "connect": ConnectRunner(cfg.connect_url, cfg.spark_master, cfg.slots, self.work_dir, self.children,
                                     conf=cfg.conf, task_memory_mb=cfg.task_memory_mb, max_tasks=cfg.driver_max_tasks,
                                     wait_max_s=cfg.runner_wait_max_s, on_readiness=self._readiness_changed),
        }
        self._channel: grpc.aio.Channel | None = None
        self.fence_address = desk_address(self.work_dir)
        self.fence_desk = FenceDesk(self.fence_address, self.answer_fence)
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
        self.pending: dict[tuple[str, int], Pending] = {}
        self.outbox = Outbox(self.work_dir)
        self.draining = False
        self.lease_s = DEFAULT_LEASE_S
        self.heartbeat_s = DEFAULT_HEARTBEAT_S
        self.liveness_s = 0.0  # the master's liveness interval (0: it names none; heartbeats count)
        self.registered = asyncio.Event()
        self._conn: _Connection | None = None
        self._stopping = asyncio.Event()
        self._idle = asyncio.Event()  # set while no attempt is running
        self._idle.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._master_index = 0
        self._leader_hint = ""  # the leader a standby named: the next connection goes there
        self._silent: dict[str, float] = {}  # masters left for not answering → next probe (monotonic)
        self._heard_at = 0.0  # monotonic time of the master's last message on this connection
        self.connections = 0
        self.reports = ReportSender(self.clock, self._send_reports)
        self.metrics = WorkerMetrics()
        self.http: HttpEndpoint | None = None

    # ---- life cycle ------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run until :meth:`stop` (after a drain or at once)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for result in self.outbox.load():  # results a previous run of this worker never had acknowledged
            self.pending[(result.task_id, result.fencing_token)] = Pending(result, 0.0)
        await asyncio.to_thread(self.children.end_leftovers)
        await asyncio.to_thread(self.bundles.load)
        await self.retention.sweep()
        await self.fence_desk.start()
        self.reports.start()
        if self.cfg.metrics:
            cfg = self.cfg
            # The worker token opens it as the admin's does on the master; the metrics token only reads.
            self.http = HttpEndpoint(cfg.metrics, [Route("GET", "/metrics", self._metrics_page, Access.READ)],
                                     admin=cfg.token or cfg.metrics_token, viewer=cfg.metrics_token,
                                     tls=(cfg.metrics_tls_cert, cfg.metrics_tls_key) if cfg.metrics_tls_cert else None)
            await self.http.start()
        # Only the default runner starts now; another starts when a job first asks for it.
        starter = asyncio.create_task(self._start_default_runner(), name="start-runner")
        fence = asyncio.create_task(self._fence_loop(), name="self-fence")
        connect = asyncio.create_task(self._connect_loop(), name="connect")
        retention = asyncio.create_task(self.retention.run(), name="log-retention")
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
        self.outbox.close()
        await self.fence_desk.stop()
        if self.http is not None:
            await self.http.stop()

    async def _metrics_page(self, request: web.Request) -> web.Response:
        return metrics_response(self.metrics.render(
            slots=self.cfg.slots, ready_slots=self.readiness()[2], busy=self._busy, queued=len(self.queue),
            unacknowledged=len(self.pending), connected=self._conn is not None and self.registered.is_set(),
            connections=self.connections, draining=self.draining))

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
            log.warning("%d results not acknowledged at exit: kept in %s, sent when this worker (same --id and "
                        "--work-dir) starts again", len(self.pending), self.outbox.path)
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

    # ---- connection ------------------------------------------------------------------------------------

    def _metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.cfg.token}")] if self.cfg.token else []

    async def answer_fence(self, task_id: str, token: int) -> tuple[bool, str]:
        """The fence desk's answer: not current when this worker knows the attempt is fenced, else the master's."""
        reason = self.fence_verdict(task_id, token)
        return (False, reason) if reason else await confirm_with_master(self._channel, self._metadata(), task_id, token)

    async def _connect_loop(self) -> None:
        while not self._stopping.is_set():
            backoff = wait_exponential_jitter(initial=RECONNECT_INITIAL_S, max=RECONNECT_MAX_S)

            def pause(state: RetryCallState) -> float:
                failure = state.outcome.exception() if state.outcome else None
                return failure.pause if isinstance(failure, Redirected) else backoff(state)

            retrying = AsyncRetrying(
                wait=pause,
                retry=retry_if_exception_type((grpc.aio.AioRpcError, StreamClosed, OSError, asyncio.TimeoutError,
                                               Redirected)),
                before_sleep=lambda state: log.warning(
                    "cannot reach a master (%r); retrying", state.outcome.exception() if state.outcome else "?"),
            )
            async for attempt in retrying:
                with attempt:
                    await self._connect_once()

    async def _connect_once(self) -> None:
        masters = self.cfg.masters
        address, self._leader_hint = self._leader_hint, ""
        hinted = bool(address)
        if not address or not self._may_try(address):
            turn = [masters[(self._master_index + i) % len(masters)] for i in range(len(masters))]
            address = next((a for a in turn if self._may_try(a)), turn[0])
            self._master_index = masters.index(address) + 1
        probing = address in self._silent and len(masters) > 1
        if probing:
            self._silent[address] = self.clock.monotonic() + self.heartbeat_s
        options = [("grpc.keepalive_time_ms", KEEPALIVE_MS), ("grpc.keepalive_permit_without_calls", 1),
                   ("grpc.max_receive_message_length", 64 * 1024 * 1024)]
        async with open_channel(address, self.cfg, options, asynchronous=True) as channel:
            self._channel = channel
            conn = _Connection()
            conn.outbound.put_nowait(pb.WorkerMessage(register=self._register_message()))
            call = pbg.WorkerServiceStub(channel).Connect(self._requests(conn), metadata=self._metadata())
            try:
                first = await self._registered_reply(call, address, hinted, probing)
            except BaseException:
                conn.outbound.put_nowait(None)  # ends the request stream: gRPC's reader of it must not leak
                raise
            self._silent.pop(address, None)
            self._on_registered(first.registered, conn, address)
            self._heard_at = self.clock.monotonic()
            silent = asyncio.Event()
            heartbeat = asyncio.create_task(self._heartbeat_loop(call, silent, address), name="heartbeat")
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        log.warning("master %s closed the stream", address)
                        return
                    self._heard_at = self.clock.monotonic()
                    self._on_message(message)
            except grpc.aio.AioRpcError as exc:
                # A registered session that ends returns normally: the next connect starts with a short
                # backoff again; only failures to (re)register back off exponentially.
                log.warning("stream to master %s broke: %s", address, exc.details() or exc.code().name)
            except asyncio.CancelledError:
                if not silent.is_set():
                    raise
            finally:
                heartbeat.cancel()
                self.registered.clear()
                self._conn = None
                conn.outbound.put_nowait(None)

    async def _registered_reply(self, call: Any, address: str, hinted: bool,
                                probing: bool) -> pb.MasterMessage:
        """The master's answer to Register; a standby's refusal becomes :class:`Redirected` to the leader it
        names, and so does a failed probe of a silent master (the next master is asked at once)."""
        try:
            first = await asyncio.wait_for(call.read(), PROBE_TIMEOUT_S if probing else REGISTER_TIMEOUT_S)
        except asyncio.TimeoutError:
            if probing:
                log.info("master %s, silent before, still does not answer", address)
                raise Redirected("") from None
            raise
        except grpc.aio.AioRpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                log.error("master %s refused this worker: %s", address, exc.details())
            trailing = dict(exc.trailing_metadata() or ())
            if exc.code() == grpc.StatusCode.UNAVAILABLE and LEADER_METADATA in trailing:
                leader = str(trailing[LEADER_METADATA])
                if leader == address or not self._may_try(leader):
                    leader = ""
                log.info("master %s is a standby; %s", address, f"the leader is {leader}" if leader
                         else "waiting for a leader to be elected")
                self._leader_hint = leader
                raise Redirected(leader) from None
            if hinted and exc.code() == grpc.StatusCode.UNAVAILABLE:  # a dead leader, named
                self._silent[address] = self.clock.monotonic() + self.heartbeat_s
            if probing:
                raise Redirected("") from None
            raise
        if first is grpc.aio.EOF or first.WhichOneof("kind") != "registered":
            raise StreamClosed(f"master {address} did not answer Register")
        return first

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
            default_runner=RUNNERS[self.cfg.runner],
            held=self._held(), readiness=readiness, readiness_reason=reason, ready_slots=ready,
            prefetch=self._ask(),
        )

    def _on_registered(self, reg: pb.Registered, conn: _Connection, address: str) -> None:
        self.lease_s = reg.lease.ToMilliseconds() / 1000 or DEFAULT_LEASE_S
        self.heartbeat_s = reg.heartbeat_interval.ToMilliseconds() / 1000 or DEFAULT_HEARTBEAT_S
        self.liveness_s = reg.liveness_interval.ToMilliseconds() / 1000
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
                if self.pending.pop((ack.task_id, ack.fencing_token), None) is not None:
                    self.outbox.ack(ack.task_id, ack.fencing_token, len(self.pending))
                if not ack.accepted:
                    log.info("task=%s token=%d result refused by the master: %s", ack.task_id, ack.fencing_token,
                             ack.reason)
        elif kind == "log_request":
            self._spawn(self._answer_log(message.log_request))
        elif kind == "drain":
            log.info("the master asks this worker to drain (%s)", message.drain.reason or "no reason given")
            self._spawn(self.drain())

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

    def _send_heartbeat(self) -> None:
        readiness, reason, ready = self.readiness()
        self._send(pb.WorkerMessage(heartbeat=pb.Heartbeat(
            free_slots=self.free_slots(), held=self._held(), draining=self.draining,
            readiness=readiness, readiness_reason=reason, ready_slots=ready, prefetch=self._ask())))

    def _may_try(self, address: str) -> bool:
        """False for a master this worker left for not answering and probed within the last heartbeat (a
        standby may name it leader for a whole leader lease after it died)."""
        return self.clock.monotonic() >= self._silent.get(address, 0.0)

    async def _heartbeat_loop(self, call: Any, silent: asyncio.Event, address: str) -> None:
        """Heartbeats, resends of unacknowledged results, and the watch on the master: one that has said
        nothing for SILENT_INTERVALS of its liveness intervals (or SILENT_HEARTBEATS heartbeats, if it names
        none) — paused, partitioned, hung — is left for another."""
        watch_s = self.liveness_s or self.heartbeat_s
        silent_after = SILENT_INTERVALS * self.liveness_s if self.liveness_s else SILENT_HEARTBEATS * self.heartbeat_s
        next_beat = 0.0
        while True:
            now = self.clock.monotonic()
            quiet = now - self._heard_at
            if quiet > silent_after:
                log.warning("the master has not answered for %.1fs; connecting again", quiet)
                self._silent[address] = now + self.heartbeat_s
                silent.set()
                call.cancel()
                return
            if now >= next_beat:
                next_beat = now + self.heartbeat_s
                self._send_heartbeat()
                for pending in self.pending.values():
                    if now - pending.sent_at > RESEND_AFTER_S:
                        self.reports.result(pending.result)
                        pending.sent_at = now
                self.outbox.compact(p.result for p in self.pending.values())
            await self.clock.sleep(min(watch_s, next_beat - now))

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
                if execution.run.killed is None and now - execution.renewed_at > limit:
                    log.warning("task=%s lease not renewed for %.1fs; killing it (self-fencing)",
                                execution.assignment.task_id, now - execution.renewed_at)
                    execution.kill("fence", "lease could not be renewed (self-fencing)")
                if not execution.announced and 0 < execution.started_ms <= announce_before_ms:
                    execution.announced = True
                    self._announce_start(execution)
            await self.clock.sleep(FENCE_CHECK_S)

