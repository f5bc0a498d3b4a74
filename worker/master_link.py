"""The worker's link to the masters (LTS's TaskTracker, Doris BE): connect, register, heartbeat, and the
messages each way.

Life of a connection: open ``WorkerService.Connect`` to a master (trying the configured list in turn,
with jittered exponential backoff), send ``Register`` with the leases still held from before, wait for
``Registered``, resend every result not yet acknowledged (worker/ledger.py), then heartbeat every interval
while the attempts that arrive in ``TaskBatch`` messages go to the slots (worker/slots.py).

A master that says nothing for a few of its intervals is taken for gone and left for another; a standby
names the leader to connect to. The prefetch this worker asks for (worker/prefetch.py) rides on every
Register, Heartbeat and Reports message.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Coroutine

import grpc
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, wait_exponential_jitter

from sparkyard.channel import open_channel
from sparkyard.clock import Clock
from sparkyard.config import WorkerConfig
from sparkyard.errors import LEADER_METADATA
from sparkyard.lifecycle import cancel_until_done
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg
from sparkyard.worker.connection import Connection
from sparkyard.worker.ledger import ResultLedger
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.runners import Runners
from sparkyard.worker.self_report import SelfReport
from sparkyard.worker.slots import AttemptSlots
from sparkyard.worker.unreachable import UnreachableLog, unreachable_text

log = logging.getLogger(__name__)

# Reconnect backoff: first pause and cap (jittered). The cap is short: a master that restarts or fails over
# must find its workers back well within their tasks' lease, and a connection attempt costs next to nothing.
RECONNECT_INITIAL_S = 0.2
RECONNECT_MAX_S = 1.0
# How long to wait for Registered after opening a stream; and, for a master this worker left for being
# silent while another is there to ask, how long one probe of it may take (a live master answers in ms).
REGISTER_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 1.0
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
# A batch whose tasks' leases count from a message of this worker's older than this many heartbeats (the master
# had read nothing newer when it leased them) is followed by a heartbeat at once, which renews them.
STALE_ASK_HEARTBEATS = 0.25
# How often the prefetch asked for is compared with what it would be now (sent when it changed).
PREFETCH_CHECK_S = 0.25
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
class _Stream:
    outbound: asyncio.Queue[pb.WorkerMessage | None] = field(default_factory=asyncio.Queue)


class MasterLink:
    def __init__(self, cfg: WorkerConfig, clock: Clock, connection: Connection, slots: AttemptSlots,
                 ledger: ResultLedger, runners: Runners, logs: LogFiles, drain_requested: asyncio.Event) -> None:
        self._cfg, self._clock, self.connection = cfg, clock, connection
        self._terms = connection.terms
        self._slots, self._ledger, self._runners, self._logs = slots, ledger, runners, logs
        self._prefetch = slots.prefetch
        self._drain_requested = drain_requested  # the master asked this worker to drain
        self.registered = asyncio.Event()
        self.connections = 0
        self._readiness: tuple[int, str, int] = (pb.READINESS_STARTING, "starting", 0)  # as last told
        self.report = SelfReport(cfg, clock, slots, ledger, runners)  # what it says of itself
        self._master_index = 0
        self._leader_hint = ""  # the leader a standby named: the next connection goes there
        self._silent: dict[str, float] = {}  # masters left for not answering → next probe (monotonic)
        self._heard_at = 0.0  # monotonic time of the master's last message on this connection
        self._trying = ""  # the master address of the current connection attempt (for the retry's log line)
        self._unreachable = UnreachableLog(clock, log)  # the retries' log lines, one a minute at most
        self._loops: list[asyncio.Task[None]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._loops = [asyncio.create_task(self._connect_loop(), name="connect"),
                       asyncio.create_task(self._readiness_loop(), name="readiness"),
                       asyncio.create_task(self._prefetch_loop(), name="prefetch")]

    async def stop(self) -> None:
        # The connect loop takes a cancel that lands while it leaves a silent master for its own (and
        # reconnects): cancelled again until it ends.
        await asyncio.gather(*(cancel_until_done(loop) for loop in self._loops))

    async def answer_fence(self, task_id: str, token: int) -> tuple[bool, str]:
        """The fence desk's answer: not current when this worker knows the attempt is fenced, else the master's."""
        reason = self._slots.fence_verdict(task_id, token)
        return (False, reason) if reason else await self.connection.confirm_fence(task_id, token)

    # ---- connection ------------------------------------------------------------------------------------

    async def _connect_loop(self) -> None:
        while True:
            backoff = wait_exponential_jitter(multiplier=RECONNECT_INITIAL_S, max=RECONNECT_MAX_S)

            def pause(state: RetryCallState) -> float:
                failure = state.outcome.exception() if state.outcome else None
                return failure.pause if isinstance(failure, Redirected) else backoff(state)

            retrying = AsyncRetrying(
                wait=pause,
                retry=retry_if_exception_type((grpc.aio.AioRpcError, StreamClosed, OSError, asyncio.TimeoutError,
                                               Redirected)),
                before_sleep=lambda state: self._unreachable.failed(
                    self._trying, unreachable_text(state.outcome.exception() if state.outcome else None),
                    state.next_action.sleep if state.next_action else 0.0),
            )
            async for attempt in retrying:
                with attempt:
                    await self._connect_once()

    async def _connect_once(self) -> None:
        masters = self._cfg.masters
        address, self._leader_hint = self._leader_hint, ""
        self._trying = address or masters[self._master_index % len(masters)]
        hinted = bool(address)
        if not address or not self._may_try(address):
            turn = [masters[(self._master_index + i) % len(masters)] for i in range(len(masters))]
            address = next((a for a in turn if self._may_try(a)), turn[0])
            self._master_index = masters.index(address) + 1
        self._trying = address
        probing = address in self._silent and len(masters) > 1
        if probing:
            self._silent[address] = self._clock.monotonic() + self._terms.heartbeat_s
        # Each attempt dials afresh: gRPC's process-wide subchannel pool would otherwise share one subchannel,
        # and its own reconnect backoff (1 s growing to 120 s), across our channels, so a restarted master was
        # seen seconds late — past its tasks' leases (CI: back 3.9 s after it listened, over a 10 s lease).
        options = [("grpc.keepalive_time_ms", KEEPALIVE_MS), ("grpc.keepalive_permit_without_calls", 1),
                   ("grpc.max_receive_message_length", 64 * 1024 * 1024), ("grpc.use_local_subchannel_pool", 1),
                   ("grpc.initial_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", 1000)]
        async with open_channel(address, self._cfg, options, asynchronous=True) as channel:
            self.connection.opened(channel)
            stream = _Stream()
            asked_at = self._clock.monotonic()
            stream.outbound.put_nowait(pb.WorkerMessage(register=self.report.register(asked_at)))
            call = pbg.WorkerServiceStub(channel).Connect(self._requests(stream),
                                                          metadata=self.connection.metadata())
            try:
                first = await self._registered_reply(call, address, hinted, probing)
            except BaseException:
                stream.outbound.put_nowait(None)  # ends the request stream: gRPC's reader of it must not leak
                raise
            self._silent.pop(address, None)
            self._on_registered(first.registered, stream, address, asked_at)
            self._heard_at = self._clock.monotonic()
            silent = asyncio.Event()
            heartbeat = asyncio.create_task(self._heartbeat_loop(call, silent, address), name="heartbeat")
            try:
                while True:
                    message = await call.read()
                    if message is grpc.aio.EOF:
                        log.warning("master %s closed the stream", address)
                        return
                    self._heard_at = self._clock.monotonic()
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
                self.connection.lost()
                stream.outbound.put_nowait(None)

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
                self._silent[address] = self._clock.monotonic() + self._terms.heartbeat_s
            if probing:
                raise Redirected("") from None
            raise
        if first is grpc.aio.EOF or first.WhichOneof("kind") != "registered":
            raise StreamClosed(f"master {address} did not answer Register")
        return first

    async def _requests(self, stream: _Stream) -> AsyncIterator[pb.WorkerMessage]:
        """The messages to the master as they leave; a Reports message is stamped with the prefetch (the
        results in it free slots, the prefetch says how many more tasks to send), its number and its send time."""
        while True:
            message = await stream.outbound.get()
            if message is None:
                return
            if message.WhichOneof("kind") == "reports":
                now = self._clock.monotonic()
                message.reports.prefetch = self.report.ask()
                message.reports.seq = self._prefetch.next_seq(now, bool(message.reports.results))
                message.reports.sent_us = int(now * 1e6)
            yield message

    def _on_registered(self, reg: pb.Registered, stream: _Stream, address: str, asked_at: float) -> None:
        self._terms.agreed(reg)
        self._slots.registered({(lease.task_id, lease.fencing_token) for lease in reg.lost}, asked_at)
        self.connection.registered(stream.outbound)
        self.connections += 1
        self.registered.set()
        log.info("registered with master %s%s as %s (slots %d, group %s, lease %.0fs, heartbeat %.0fs); readiness %s",
                 address, self._unreachable.registered(), self._cfg.worker_id, self._cfg.slots, self._cfg.group,
                 self._terms.lease_s, self._terms.heartbeat_s, pb.Readiness.Name(self._readiness[0]).removeprefix("READINESS_"))
        self._ledger.resend_all()

    # ---- messages from the master ----------------------------------------------------------------------

    def _on_message(self, message: pb.MasterMessage) -> None:
        kind = message.WhichOneof("kind")
        if kind == "batch":
            now = self._clock.monotonic()
            self._prefetch.batch_arrived(now, message.batch.reports_seq)
            # Leased after the master read the message this worker sent then, however long the batch was on its way.
            leased_at = _sent_at(message.batch.asked_us, now)
            # Room for what this worker asked for: its ready slots and its last prefetch. A master that
            # sends more worked from an older figure; the excess goes straight back.
            room = self.report.room()
            accepted = 0
            for assignment in message.batch.tasks:
                if self._slots.accept(assignment, room > 0, leased_at):
                    room -= 1
                    accepted += 1
            self._slots.pump()
            if accepted and now - leased_at > self._terms.heartbeat_s * STALE_ASK_HEARTBEATS:
                # Counted from a message the master read a while ago (an idle worker says little but heartbeats):
                # renewed now, from about their arrival, rather than up to a heartbeat later — else a task's first
                # renewal could come up to two heartbeats after the time its lease counts from.
                self.send_heartbeat()
        elif kind == "heartbeat_ack":
            ack = message.heartbeat_ack
            # From when the answered heartbeat left, not when the answer came.
            self._slots.renewed(ack.renewed, ack.lost, _sent_at(ack.heartbeat_sent_us, self._clock.monotonic()))
        elif kind == "cancel":
            self._slots.cancel(message.cancel)
        elif kind == "acks":
            self._ledger.acknowledged(message.acks)
        elif kind == "log_request":
            self._spawn(self._answer_log(message.log_request))
        elif kind == "drain":
            log.info("the master asks this worker to drain (%s)", message.drain.reason or "no reason given")
            self._drain_requested.set()

    async def _answer_log(self, request: pb.LogRequest) -> None:
        try:
            data = await self._logs.answer(request, self._slots.log_of)
        except Exception as exc:  # an unreadable file, a path that is no log: the request is answered, saying so
            log.warning("log request %s for task=%s: %s", request.request_id, request.task_id, exc)
            data = pb.LogData(request_id=request.request_id, error=f"cannot read the log: {exc}")
        self.connection.send(pb.WorkerMessage(log=data))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- heartbeats, readiness and prefetch ------------------------------------------------------------

    def send_heartbeat(self) -> None:
        self.connection.send(pb.WorkerMessage(heartbeat=self.report.heartbeat()))

    def _may_try(self, address: str) -> bool:
        """False for a master this worker left for not answering and probed within the last heartbeat (a
        standby may name it leader for a whole leader lease after it died)."""
        return self._clock.monotonic() >= self._silent.get(address, 0.0)

    async def _heartbeat_loop(self, call: Any, silent: asyncio.Event, address: str) -> None:
        """Heartbeats, resends of unacknowledged results, and the watch on the master: one that has said
        nothing for SILENT_INTERVALS of its liveness intervals (or SILENT_HEARTBEATS heartbeats, if it names
        none) — paused, partitioned, hung — is left for another."""
        terms = self._terms
        watch_s = terms.liveness_s or terms.heartbeat_s
        silent_after = SILENT_INTERVALS * terms.liveness_s if terms.liveness_s else SILENT_HEARTBEATS * terms.heartbeat_s
        next_beat = 0.0
        while True:
            now = self._clock.monotonic()
            quiet = now - self._heard_at
            if quiet > silent_after:
                log.warning("the master has not answered for %.1fs; connecting again", quiet)
                self._silent[address] = now + terms.heartbeat_s
                silent.set()
                call.cancel()
                return
            if now >= next_beat:
                next_beat = now + terms.heartbeat_s
                self.send_heartbeat()
                self._ledger.resend_overdue()
            await self._clock.sleep(min(watch_s, next_beat - now))

    async def _readiness_loop(self) -> None:
        """Tell the master at once when the slots that can run a task change (not at the next heartbeat)."""
        while True:
            now = await self._runners.changed()
            if now != self._readiness:
                self._readiness = now
                # The runners' readiness; with no master registered yet no slot is offered to anyone, so the
                # worker is not READY whatever its runners are (the registration's line says when it is).
                name = pb.Readiness.Name(now[0]).removeprefix("READINESS_")
                if self.registered.is_set():
                    log.info("readiness %s%s (%d of %d slots)", name, f": {now[1]}" if now[1] else "", now[2],
                             self._cfg.slots)
                else:
                    log.info("not ready: not registered with a master yet (runners %s%s, %d of %d slots)", name,
                             f": {now[1]}" if now[1] else "", now[2], self._cfg.slots)
                if self.registered.is_set():
                    self.send_heartbeat()

    async def _prefetch_loop(self) -> None:
        """The prefetch, sent on its own (an empty Reports message) when it changes with no result to carry it."""
        while True:
            asked = self.report.asked
            if self.registered.is_set() and self.report.ask() != asked:
                log.debug("prefetch %d → %d (task %.2f ms, refill %.2f ms)", asked, self.report.asked,
                          (self._prefetch.task_s or 0) * 1000, self._prefetch.refill_s * 1000)
                self.connection.send(pb.WorkerMessage(reports=pb.Reports()))
            await self._clock.sleep(PREFETCH_CHECK_S)


def _sent_at(sent_us: int, now: float) -> float:
    """When the message of this worker's that the master names (its ``sent_us``) left, on the monotonic clock: never
    later than ``now``; 0 (a liveness message, an older master naming nothing) counts as ``now``, as before."""
    return min(now, sent_us / 1e6) if sent_us else now
