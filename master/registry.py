"""The workers connected to this master, their slots and what they hold (Doris FE's BE slot view).

A worker can take ``ready + prefetch − leased`` more tasks, where ``ready`` is how many of its slots its
runner can run a task on now (the worker's readiness: a worker whose Spark drivers are still warming
offers none), ``prefetch`` is how many tasks it asked to have queued beyond them (so a slot that frees
starts its next task without waiting a round trip to the master), and ``leased`` is the master's own
record of the tasks (and fencing tokens) it leased to the worker and has not yet seen end. A slot is freed as soon as the
worker's result for that lease arrives — the worker stopped using it when it sent the result — so the
next dispatch round overlaps with writing the result to Redis instead of waiting for it. The record is
rebuilt from what a worker reports when it (re)connects, so a master restart loses nothing. A draining
worker has no idle slots; so has a worker whose outbound queue is full (backpressure: its stream is not
keeping up).

Each session owns a bounded outbound queue that its ``Connect`` stream drains; everything the master
sends a worker goes through :meth:`WorkerRegistry.send`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Iterable

from sparkyard.clock import Clock
from sparkyard.errors import NotFound, quote
from sparkyard.master.events import WORK_READY, Events
from sparkyard.master.routing import WorkerLoad
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)


@dataclass(eq=False)
class WorkerSession:
    """One connected worker (one Connect stream)."""

    worker_id: str
    group: str
    slots: int
    host: str
    pid: int
    labels: dict[str, str]
    default_runner: int
    registered_at: float  # wall clock
    last_seen: float  # monotonic
    outbound: asyncio.Queue[pb.MasterMessage]
    leased: dict[str, int] = field(default_factory=dict)  # task id → fencing token
    draining: bool = False
    readiness: int = pb.READINESS_READY
    readiness_reason: str = ""
    ready_slots: int = -1  # slots its runner can run a task on now (-1: all; an older worker says nothing)
    prefetch: int = 0  # tasks it asked for beyond its ready slots (queued on the worker)
    reports_seq: int = 0  # the last Reports message received from it (echoed in each TaskBatch)
    # The latest send time (its own monotonic µs) of its messages read here: a batch tells the worker the one read
    # before its tasks were leased (TaskBatch.asked_us; master/scheduler.py).
    heard_us: int = 0
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def ready(self) -> int:
        return self.slots if self.ready_slots < 0 else min(self.slots, self.ready_slots)

    @property
    def capacity(self) -> int:
        """Tasks it may hold: a running one per ready slot, plus the ones it asked to have queued."""
        return self.ready + self.prefetch if self.ready else 0

    @property
    def idle(self) -> int:
        """Tasks it can take now (what dispatch fills)."""
        if self.draining or self.closed.is_set() or self.outbound.full():
            return 0
        return max(0, self.capacity - len(self.leased))

    @property
    def free_slots(self) -> int:
        """Ready slots not leased (what an operator reads: queued tasks are not counted as free)."""
        return max(0, self.ready - len(self.leased))

    def set_prefetch(self, message: pb.Register | pb.Heartbeat | pb.Reports) -> bool:
        """Record the prefetch a message carries (if it carries one); True if it grew (dispatch can send more)."""
        if not message.HasField("prefetch"):
            return False
        value = max(0, message.prefetch)
        grew = value > self.prefetch
        self.prefetch = value
        return grew

    def set_readiness(self, readiness: int, reason: str, ready_slots: int) -> bool:
        """Record what the worker says it can run; True if that changed."""
        if readiness == pb.READINESS_UNSPECIFIED:  # an older worker: ready with every slot
            readiness, ready_slots = pb.READINESS_READY, -1
        changed = (readiness, reason, ready_slots) != (self.readiness, self.readiness_reason, self.ready_slots)
        self.readiness, self.readiness_reason, self.ready_slots = readiness, reason, ready_slots
        return changed

    def close(self, reason: str) -> None:
        if not self.closed.is_set():
            log.info("worker=%s stream closed: %s", self.worker_id, reason)
            self.closed.set()


class WorkerRegistry:
    """Connected workers by id and by node group."""

    def __init__(self, clock: Clock, events: Events) -> None:
        self._clock = clock
        self._sessions: dict[str, WorkerSession] = {}
        self._events = events

    def add(self, session: WorkerSession) -> WorkerSession | None:
        """Register a session; a previous session of the same worker id is closed and returned."""
        old = self._sessions.get(session.worker_id)
        if old is not None and old is not session:
            old.close("replaced by a new connection of the same worker")
        self._sessions[session.worker_id] = session
        self._events.publish(WORK_READY)
        return old

    def remove(self, session: WorkerSession) -> None:
        """Forget a session if it is still the current one for its worker id."""
        session.close("disconnected")
        if self._sessions.get(session.worker_id) is session:
            del self._sessions[session.worker_id]

    def get(self, worker_id: str) -> WorkerSession | None:
        return self._sessions.get(worker_id)

    def sessions(self) -> list[WorkerSession]:
        return list(self._sessions.values())

    def groups(self) -> set[str]:
        return {s.group for s in self._sessions.values()}

    def loads(self, group: str) -> list[WorkerLoad]:
        """Routing's view of a group: only workers that can take a task now count their slots."""
        return [
            WorkerLoad(s.worker_id, s.capacity, len(s.leased) if s.idle else s.capacity)
            for s in self._sessions.values() if s.group == group
        ]

    def idle_slots(self, group: str) -> int:
        return sum(s.idle for s in self._sessions.values() if s.group == group)

    def touch(self, session: WorkerSession) -> None:
        session.last_seen = self._clock.monotonic()

    def lease(self, worker_id: str, leases: Iterable[tuple[str, int]]) -> None:
        """``worker_id`` now runs these (task id, fencing token) leases."""
        session = self._sessions.get(worker_id)
        if session is not None:
            session.leased.update(leases)

    def release(self, worker_id: str, task_id: str, token: int) -> None:
        """The worker reported the end of this attempt: its slot is free again.

        The one place a slot is freed, and only on the worker's word: a cancel, an expired lease or a lost
        one does not free it, since the attempt may still run (a Spark job takes seconds to stop) until the
        worker reports it ended. Only the lease of this very token is let go, so a late result of an older
        attempt leaves a newer attempt's slot taken. A worker that disconnects takes its slots with it.
        """
        session = self._sessions.get(worker_id)
        if session is None or session.leased.get(task_id) != token:
            return
        del session.leased[task_id]
        self._events.publish(WORK_READY)

    def send(self, worker_id: str, message: pb.MasterMessage) -> bool:
        """Queue a message for a worker; False if it is not connected or its queue is full."""
        session = self._sessions.get(worker_id)
        if session is None or session.closed.is_set():
            return False
        try:
            session.outbound.put_nowait(message)
            return True
        except asyncio.QueueFull:
            log.warning("worker=%s outbound queue full (%d); message dropped", worker_id, session.outbound.maxsize)
            return False

    def drain(self, worker_id: str, reason: str) -> None:
        """Ask a connected worker to drain and exit, as SIGTERM does (``sparkyard drain``, the console)."""
        if not self.send(worker_id, pb.MasterMessage(drain=pb.Drain(reason=reason))):
            raise NotFound(f"worker {quote(worker_id)} is not connected to this master")
        log.info("worker=%s asked to drain: %s", worker_id, reason)

    def stale(self, dead_after_s: float) -> list[WorkerSession]:
        """Sessions that have not been heard from for ``dead_after_s``."""
        now = self._clock.monotonic()
        return [s for s in self._sessions.values() if now - s.last_seen > dead_after_s]
