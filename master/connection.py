"""One worker's ``Connect`` stream, from the master's side.

Protocol:

1. the worker's first message is ``Register`` (id, group, slots, the leases it still holds after a
   reconnect); the master renews the held leases it still recognises, ends the ones the worker no longer
   has (it restarted), and answers ``Registered`` (lease and heartbeat periods, leases to kill);
2. then, concurrently: the worker sends ``Heartbeat`` (renews its leases: the answer lists renewed and
   lost ones), ``Reports`` (attempts started and finished, batched; results are answered by ``ResultAcks``
   — the worker keeps a result until it is acked and resends it after a reconnect) and ``LogData``; the
   master sends ``TaskBatch``, ``CancelTask`` and ``LogRequest`` through the session's bounded outbound
   queue.

Results are applied with the fencing rule: a result whose token is not the task's current one is refused
(``accepted = false``) — the worker drops it, and the newer attempt's result stands.
"""

from __future__ import annotations

import asyncio
import logging
from typing import AsyncIterator

from redis.exceptions import RedisError

from sparkyard.errors import InvalidArgument, SparkyardError, quote
from sparkyard.clock import Clock
from sparkyard.config import MasterConfig
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.logs import LogRelay
from sparkyard.master.registry import WorkerRegistry, WorkerSession
from sparkyard.master.reports import ReportSink
from sparkyard.master.scripts import Fenced, log_failure
from sparkyard.master.store import Store
from sparkyard.spec import DEFAULT_GROUP
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# A worker's stream carries something at least this often (an empty HeartbeatAck when there is nothing
# else): a worker hears within a few of them that its master stopped (SIGSTOP, a partition), so it is
# waiting at a standby when the leader lease (default 3 s) runs out, not heartbeats later.
LIVENESS_S = 0.5
# A worker's id names it in logs, Redis keys and listings; longer than this it is not a name.
MAX_WORKER_ID_CHARS = 200
# Slots of one worker: each runs an attempt in a process of its own (with a JVM), so more than this on one
# machine is a typo, and the master would lease that many tasks to it.
MAX_WORKER_SLOTS = 1024

class WorkerConnection:
    def __init__(self, store: Store, registry: WorkerRegistry, outcomes: Outcomes, logs: LogRelay,
                 reports: ReportSink, clock: Clock, cfg: MasterConfig) -> None:
        self._store = store
        self._registry = registry
        self._outcomes = outcomes
        self._reports = reports
        self._logs = logs
        self._clock = clock
        self._cfg = cfg

    async def serve(self, requests: AsyncIterator[pb.WorkerMessage], peer: str) -> AsyncIterator[pb.MasterMessage]:
        first = await anext(requests, None)
        if first is None:
            return
        if first.WhichOneof("kind") != "register":
            raise InvalidArgument("the first message on a worker stream must be Register")
        reg = first.register
        if not reg.worker_id or len(reg.worker_id) > MAX_WORKER_ID_CHARS:
            raise InvalidArgument(f"register.worker_id: {quote(reg.worker_id)} must be 1..{MAX_WORKER_ID_CHARS} characters")
        if not 0 < reg.slots <= MAX_WORKER_SLOTS:
            raise InvalidArgument(f"register.slots: {reg.slots} is outside 1..{MAX_WORKER_SLOTS}")
        session = WorkerSession(
            worker_id=reg.worker_id, group=reg.group or DEFAULT_GROUP, slots=reg.slots,
            host=reg.host or peer, pid=reg.pid, labels=dict(reg.labels), default_runner=reg.default_runner,
            registered_at=self._clock.now(), last_seen=self._clock.monotonic(),
            outbound=asyncio.Queue(maxsize=self._cfg.outbound_queue),
        )
        session.set_readiness(reg.readiness, reg.readiness_reason, reg.ready_slots)
        session.set_prefetch(reg)
        session.heard_us = reg.sent_us
        registered = await self._register(session, reg)
        self._registry.add(session)
        await self._persist(session, alive=True)
        log.info("worker=%s registered group=%s slots=%d host=%s held=%d", session.worker_id, session.group,
                 session.slots, session.host, len(reg.held))
        yield pb.MasterMessage(registered=registered)
        reader = asyncio.create_task(self._read(session, requests), name=f"read-{session.worker_id}")
        closed = asyncio.create_task(session.closed.wait())
        getter: asyncio.Task[pb.MasterMessage] | None = None
        try:
            while True:
                if getter is None:
                    getter = asyncio.create_task(session.outbound.get())
                done, _ = await asyncio.wait({getter, closed, reader}, timeout=LIVENESS_S,
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter in done:
                    yield getter.result()
                    getter = None
                elif not done:  # nothing to say for a while: say that this master is alive
                    yield pb.MasterMessage(heartbeat_ack=pb.HeartbeatAck())
                else:
                    refused = reader.result() if reader.done() and not reader.cancelled() else None
                    if refused is not None:  # the worker sent something invalid: end the stream saying what
                        raise refused
                    break
        finally:
            if getter is not None:
                getter.cancel()
            reader.cancel()
            closed.cancel()
            await asyncio.gather(reader, closed, return_exceptions=True)
            # The one place a worker is recorded gone: its stream ended (it left, broke, or the reaper closed
            # it for missed heartbeats), unless a newer connection of the same worker replaced it.
            replaced = self._registry.get(session.worker_id) not in (None, session)
            self._registry.remove(session)
            if not replaced:
                await self._persist(session, alive=False)
            log.info("worker=%s disconnected (leases held: %d)", session.worker_id, len(session.leased))

    async def _register(self, session: WorkerSession, reg: pb.Register) -> pb.Registered:
        held = [(l.task_id, l.fencing_token) for l in reg.held]
        lease_ms = int(self._cfg.lease_s * 1000)
        renewal = await self._store.renew(session.worker_id, held, lease_ms)
        # Every attempt it still runs takes a slot, lost ones too, until it reports their end.
        session.leased.update(held)
        # Tasks Redis still records as leased to this worker that it did not mention: it lost them.
        recorded = await self._store.worker_leases(session.worker_id)
        missing = sorted(recorded - {t for t, _ in held})
        if missing:
            log.info("worker=%s came back without %d leased tasks; requeueing them", session.worker_id, len(missing))
            self._outcomes.apply_reaped(await self._store.reap_worker(session.worker_id, missing, self._cfg.max_lost))
        out = pb.Registered(worker_id=session.worker_id,
                            lost=[pb.Lease(task_id=t, fencing_token=tok) for t, tok in renewal.lost])
        out.lease.FromMilliseconds(lease_ms)
        out.heartbeat_interval.FromMilliseconds(int(self._cfg.heartbeat_s * 1000))
        out.liveness_interval.FromMilliseconds(int(LIVENESS_S * 1000))
        return out

    async def _read(self, session: WorkerSession,
                    requests: AsyncIterator[pb.WorkerMessage]) -> SparkyardError | None:
        """Handle the worker's messages until its stream ends; the error to end the stream with when a
        message was refused (the request guard raises it from ``requests``)."""
        try:
            async for message in requests:
                self._registry.touch(session)
                kind = message.WhichOneof("kind")
                if kind == "heartbeat":
                    await self._heartbeat(session, message.heartbeat)
                elif kind == "reports":
                    session.reports_seq = max(session.reports_seq, message.reports.seq)
                    session.heard_us = max(session.heard_us, message.reports.sent_us)
                    if session.set_prefetch(message.reports):
                        self._outcomes.work_ready()
                    self._reports.accept(session.worker_id, message.reports)
                elif kind == "log":
                    self._logs.deliver(message.log)
                elif kind == "register":
                    log.warning("worker=%s sent Register twice; ignored", session.worker_id)
        except asyncio.CancelledError:
            raise
        except SparkyardError as exc:
            log.warning("worker=%s sent an invalid message: %s", session.worker_id, exc)
            return exc
        except Exception as exc:  # a broken stream or Redis outage ends this connection, not the master
            log.warning("worker=%s stream ended: %s", session.worker_id, exc)
        finally:
            session.close("stream ended")
        return None

    async def _heartbeat(self, session: WorkerSession, hb: pb.Heartbeat) -> None:
        session.heard_us = max(session.heard_us, hb.sent_us)
        was_draining = session.draining
        session.draining = hb.draining
        readiness_changed = session.set_readiness(hb.readiness, hb.readiness_reason, hb.ready_slots)
        if session.set_prefetch(hb):
            self._outcomes.work_ready()
        held = [(l.task_id, l.fencing_token) for l in hb.held]
        renewal = await self._store.renew(session.worker_id, held, int(self._cfg.lease_s * 1000))
        ack = pb.HeartbeatAck(
            renewed=[pb.Lease(task_id=t, fencing_token=tok) for t, tok in renewal.renewed],
            lost=[pb.Lease(task_id=t, fencing_token=tok) for t, tok in renewal.lost],
            heartbeat_sent_us=hb.sent_us,  # the worker counts the renewal from then (worker/master_link.py)
        )
        self._registry.send(session.worker_id, pb.MasterMessage(heartbeat_ack=ack))
        if was_draining != hb.draining:
            log.info("worker=%s %s", session.worker_id, "draining" if hb.draining else "no longer draining")
        if readiness_changed:
            log.info("worker=%s %s%s (%d of %d slots ready)", session.worker_id,
                     pb.Readiness.Name(session.readiness).removeprefix("READINESS_").lower(),
                     f": {session.readiness_reason}" if session.readiness_reason else "",
                     session.slots if session.ready_slots < 0 else session.ready_slots, session.slots)
        if readiness_changed or was_draining != session.draining:
            self._outcomes.work_ready()
        await self._persist(session, alive=True)

    async def _persist(self, session: WorkerSession, alive: bool) -> None:
        info = {
            "group": session.group, "slots": session.slots, "host": session.host, "pid": session.pid,
            "labels": session.labels, "runner": session.default_runner,
            "registered_ms": int(session.registered_at * 1000),
            "last_seen_ms": int(self._clock.now() * 1000), "alive": alive, "draining": session.draining,
            "readiness": session.readiness, "readiness_reason": session.readiness_reason,
            "ready_slots": session.ready_slots,
        }
        try:
            await self._store.put_worker(session.worker_id, info)
        except Fenced:  # this master no longer leads (it resigned as it stops): the leader records the worker
            log.debug("worker=%s not recorded: this master no longer leads", session.worker_id)
        except RedisError:  # only what `sparkyard workers` shows: the next change records it again
            log_failure(log, "recording worker=%s failed", session.worker_id)
