"""Leader election: every master on one Redis namespace tries to lead; one does, the others stand by.

The leader holds a lease in Redis (``P:leader``: id, epoch, address; it expires unless renewed) under an
epoch that grows on every change of leader (``leader.lua``). It renews the lease every ``lease / 6``; a
standby tries to take it every ``lease / 12``, so a graceful stop, which gives the lease up, hands over
within ``lease / 12``, and a leader whose host died or was cut off is replaced within about
``lease + lease / 12`` (3.25 s by default).

A leader whose process died (``kill -9``, the OOM killer, a crash) is replaced sooner, without waiting out its
lease: its Redis connections, named after it (:func:`connection_name`), closed with it. A standby that sees
none of them for half a lease (``CLIENT LIST``, every ``lease / 12``) takes the lease over from that holder
(``leader.lua`` ``takeover``), about ``lease / 2`` after the death (1.5 s by default). Half a lease is two
renewals of a live leader: one whose connections were dropped (Redis restarted, a connection killed) has
opened new ones by then. A leader that is alive but stopped (SIGSTOP, a long pause) keeps its connections,
and so its lease. Were a live leader ever taken over this way, nothing breaks: it is fenced like one paused
past its lease. Where ``CLIENT LIST`` is refused (an ACL without it, a proxy), the lease alone decides.

The epoch is what makes this safe rather than merely likely: every write script compares the caller's
epoch with the current one and refuses otherwise (:mod:`sparkyard.master.scripts`). A leader paused past
its lease (SIGSTOP, a long GC, a partition from Redis) may wake up still believing it leads; its first
write is refused, its next renewal fails, and it steps down. It also steps down on its own when it could
not renew for a whole lease (Redis unreachable, or not answering: a renewal is given what is left of the
lease, not what TCP would wait): by then a standby may lead.

A master id stays the same across restarts (host and port), so a leader restarted before its lease
expired takes the lease back at once under a new epoch instead of waiting it out.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

import grpc
import redis.exceptions

from sparkyard.clock import Clock
from sparkyard.errors import LEADER_METADATA
from sparkyard.master.auth import aborting_handler
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import ScriptLibrary

log = logging.getLogger(__name__)

LEADER = "leader"
STANDBY = "standby"
# A leader's renewal gets at least this long to answer, even when its lease has run out meanwhile (a process
# paused past it): one that answers in time, with nobody having taken the lease, leads on as before.
RENEW_MIN_S = 0.5
T = TypeVar("T")
# A master not seen for this many leases is left out of the status' list of masters.
MASTER_SEEN_LEASES = 3
# What a standby still answers itself.
STANDBY_SERVES = ("/grpc.health.v1.Health/", "/grpc.reflection.", "/sparkyard.v1.ClusterService/GetStatus")


@dataclass(frozen=True)
class LeaderView:
    """Who leads, as Redis says (epoch 0 and no id: nobody)."""

    epoch: int
    leader_id: str
    address: str


def connection_name(namespace: str, master_id: str) -> str:
    """The name every Redis connection of a master carries (``CLIENT SETNAME``; no spaces or controls)."""
    return f"sparkyard:{namespace}:master:" + "".join(c if "!" <= c <= "~" else "_" for c in master_id)


async def _leader_op(scripts: ScriptLibrary, op: str, master_id: str, address: str, lease_ms: int,
                     holder: LeaderView | None = None) -> tuple[bool, LeaderView]:
    args: list[object] = [op, master_id, address, lease_ms, scripts.epoch]
    if holder is not None:
        args += [holder.leader_id, holder.epoch]
    status, epoch, leader_id, leader_address = await scripts("leader", [], args)
    return status == LEADER, LeaderView(int(epoch), leader_id, leader_address)


async def take_lead(scripts: ScriptLibrary, master_id: str, lease_ms: int = 600_000) -> int:
    """Lead a namespace outright, for a process that writes to it alone (a benchmark, a store test):
    its scripts then carry the new epoch. Raises if a master leads it."""
    leading, view = await _leader_op(scripts, "acquire", master_id, "", lease_ms)
    if not leading:
        raise RuntimeError(f"{view.leader_id} leads this namespace (epoch {view.epoch})")
    scripts.epoch = view.epoch
    return view.epoch


class _LeaseRanOut(Exception):
    """A leader's call to Redis did not answer within what was left of its lease."""


class Leadership:
    """The election as this master takes part in it, through the store: the election script, the epoch its
    fenced scripts carry, and its entry in the list of masters."""

    def __init__(self, store: RedisStore, master_id: str, address: str, lease_s: float, clock: Clock,
                 on_elected: Callable[[int], Awaitable[None]], on_deposed: Callable[[str], Awaitable[None]]) -> None:
        self._store = store
        self._scripts = store.scripts
        self.master_id = master_id
        self.address = address
        self.lease_ms = int(lease_s * 1000)
        self._clock = clock
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self.leading = False
        self.view = LeaderView(0, "", "")
        self._renewed_at = 0.0
        self._stopping = False
        # The holder seen without a connection to Redis, and since when (monotonic s); None: none such.
        self._gone: tuple[LeaderView, float] | None = None
        self._sees_connections = True  # False once CLIENT LIST was refused: the lease alone decides

    @property
    def role(self) -> str:
        return LEADER if self.leading else STANDBY

    @property
    def epoch(self) -> int:
        return self._scripts.epoch

    async def _call(self, op: str, holder: LeaderView | None = None) -> bool:
        leading, self.view = await _leader_op(self._scripts, op, self.master_id, self.address, self.lease_ms,
                                              holder)
        return leading

    async def acquire(self) -> bool:
        """Take the lease if nobody holds it; True if this master now leads (``epoch`` is its epoch)."""
        return await self._take("acquire")

    async def _take(self, op: str, holder: LeaderView | None = None) -> bool:
        if await self._call(op, holder):
            self._scripts.epoch = self.view.epoch
            self.leading = True
            self._renewed_at = self._clock.monotonic()
        return self.leading

    async def take_over_if_gone(self) -> bool:
        """After a failed :meth:`acquire`: take the lease over from a holder none of whose connections Redis
        has had for half a lease (its process is gone); True if this master now leads."""
        holder = self.view
        if not self._sees_connections or not holder.leader_id or holder.leader_id == self.master_id:
            self._gone = None
            return False
        try:
            names = await self._store.connection_names()
        except redis.exceptions.ResponseError as exc:
            self._sees_connections = False
            log.info("cannot list Redis connections (%s): a leader is replaced when its lease ends", exc)
            return False
        if connection_name(self._store.keys.namespace, holder.leader_id) in names:
            self._gone = None
            return False
        now = self._clock.monotonic()
        if self._gone is None or self._gone[0] != holder:
            self._gone = (holder, now)
            return False
        gone_s = now - self._gone[1]
        if gone_s < self.lease_ms / 2000:
            return False
        if await self._take("takeover", holder):
            log.warning("the leader %s (epoch %d) has had no connection to Redis for %.1fs: its process is gone; "
                        "taking over before its lease ends", holder.leader_id, holder.epoch, gone_s)
        self._gone = None
        return self.leading

    async def first_election(self) -> bool:
        """:meth:`acquire` at start. A Redis that answers but does not take the call — a primary refusing
        writes (NOREPLICAS: its replica is not back yet), a connection dropped — leaves this master standing
        by, and :meth:`run` tries again, rather than ending the process (found by the nemesis soak)."""
        try:
            return await self.acquire()
        except redis.exceptions.RedisError as exc:
            log.warning("first election: redis did not take the call (%s); standing by, trying again", exc)
            return False

    async def renew(self) -> bool:
        """Extend the lease; False if this master no longer holds it."""
        held = await self._call("renew")
        if held:
            self._renewed_at = self._clock.monotonic()
        return held

    async def resign(self) -> None:
        """Stop taking part, and give the lease up (graceful stop): a standby takes over at its next try."""
        self._stopping = True
        if self.leading:
            self.leading = False
            try:
                await self._call("resign")
            except redis.exceptions.RedisError as exc:
                log.warning("could not give the leadership up (%s); it lapses in %d ms", exc, self.lease_ms)
            self._scripts.epoch = 0

    async def run(self) -> None:
        """Lead or stand by until cancelled or resigned; calls ``on_elected`` once and ``on_deposed`` at most
        once. (The loop also ends on its own after :meth:`resign`: a cancel that lands while redis-py opens a
        connection can be lost, and a stopping master must never take the lease again.)"""
        while not self._stopping:
            try:
                if self.leading:
                    sent = self._clock.monotonic()
                    if not await self._within_lease(self.renew()):
                        if self._stopping:
                            return
                        # How late it was says why: a renewal that left late (its loop starved or blocked) or one
                        # that took long (Redis, or the connection pool, slow to take it).
                        await self._depose(f"the lease was taken over (leader now {self.view.leader_id or 'nobody'}, "
                                           f"epoch {self.view.epoch}; this renewal left {sent - self._renewed_at:.1f}s "
                                           f"after the last that kept it and took "
                                           f"{self._clock.monotonic() - sent:.1f}s)")
                        return
                elif not self._stopping and (await self.acquire() or await self.take_over_if_gone()):
                    log.info("leading (epoch %d) as %s at %s", self.epoch, self.master_id, self.address)
                    try:
                        kept = await self._starting(self._on_elected(self.epoch))
                    except _LeaseRanOut:
                        raise
                    except Exception as exc:
                        # Redis failed while the wheel was being rebuilt: leading half started, this master
                        # would hold the lease and renew it without ever dispatching or reaping. A fresh
                        # process starts over (and, with the same id, takes its own lease back at once).
                        await self._depose(f"could not start leading: {exc!r}")
                        return
                    if not kept:
                        if self._stopping:
                            return
                        await self._depose(f"the lease was taken over while it started leading (leader now "
                                           f"{self.view.leader_id or 'nobody'}, epoch {self.view.epoch})")
                        return
                await (self._within_lease(self._advertise()) if self.leading else self._advertise())
            except _LeaseRanOut:
                if not self._stopping:
                    await self._depose(f"Redis did not answer within the lease ({self.lease_ms} ms)")
                return
            except redis.exceptions.RedisError as exc:
                log.warning("leader election: redis unreachable: %s", exc)
            if self.leading and self._clock.monotonic() - self._renewed_at > self.lease_ms / 1000:
                await self._depose(f"the lease could not be renewed for {self.lease_ms} ms")
                return
            await self._clock.sleep(self.lease_ms / (6000 if self.leading else 12000))

    async def lead_first(self, start: Awaitable[None]) -> None:
        """After :meth:`first_election` won: run ``start`` (the master's start as leader, before its port opens),
        renewing the lease meanwhile as :meth:`run` does for a standby that takes over — else a start longer than
        the lease (a large wheel) would find the lease lapsed at its first renewal, and the master would restart
        and start again for ever. A lease lost meanwhile deposes this master."""
        try:
            kept = await self._starting(start)
        except _LeaseRanOut:
            kept = False
        if not kept:
            self._stopping = True  # it restarts as a standby: this process never takes the lease again
            await self._depose(f"the lease was lost while it started leading (leader now "
                               f"{self.view.leader_id or 'nobody'}, epoch {self.view.epoch})")

    async def _starting(self, start: Awaitable[None]) -> bool:
        """Run ``start`` (the master's start as leader: the wheel rebuilt from Redis, its services started), renewing
        the lease meanwhile as a leader does: a start longer than the lease (a large wheel on a loaded machine)
        must not let the lease lapse while this master begins to lead. False when the lease was lost meanwhile
        (``start`` is cancelled); raises what ``start`` raised, or _LeaseRanOut when Redis stops answering."""
        starting = asyncio.ensure_future(start)
        try:
            while True:
                pause = asyncio.ensure_future(self._clock.sleep(self.lease_ms / 6000))
                try:
                    await asyncio.wait({starting, pause}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    pause.cancel()
                if starting.done():
                    starting.result()
                    return True
                try:
                    if not await self._within_lease(self.renew()):
                        return False
                except redis.exceptions.RedisError as exc:
                    log.warning("leader election: redis unreachable while starting to lead: %s", exc)
                    if self._clock.monotonic() - self._renewed_at > self.lease_ms / 1000:
                        raise _LeaseRanOut() from None
        finally:
            if not starting.done():
                starting.cancel()
                await asyncio.gather(starting, return_exceptions=True)

    async def _within_lease(self, call: Awaitable[T]) -> T:
        """A leader's call to Redis, given what is left of its lease (at least RENEW_MIN_S): a Redis that stops
        answering (a partition that drops packets, a stopped server) holds a call until TCP gives up, minutes
        later, and a leader waiting on it would go on believing it leads long after a standby took over.
        Raises _LeaseRanOut when the lease runs out first."""
        left = self.lease_ms / 1000 - (self._clock.monotonic() - self._renewed_at)
        try:
            return await asyncio.wait_for(call, max(left, RENEW_MIN_S))
        except asyncio.TimeoutError:
            raise _LeaseRanOut() from None

    async def _depose(self, why: str) -> None:
        log.warning("no longer leading (epoch %d): %s", self.epoch, why)
        self.leading = False
        self._scripts.epoch = 0
        await self._on_deposed(why)

    async def _advertise(self) -> None:
        """Let ``status`` list this master (unfenced: a standby records itself too; it only informs)."""
        record = {"address": self.address, "role": self.role, "seen_ms": int(self._clock.now() * 1000)}
        await self._store.put_master(self.master_id, record)

    async def masters(self) -> list[tuple[str, dict[str, object]]]:
        """Masters seen within the last few leases: (id, {address, role, seen_ms})."""
        oldest = self._clock.now() * 1000 - MASTER_SEEN_LEASES * self.lease_ms
        seen = (await self._store.get_masters()).items()
        return sorted(((mid, r) for mid, r in seen if int(str(r.get("seen_ms", 0))) >= oldest), key=lambda m: m[0])


class LeaderGate(grpc.aio.ServerInterceptor):
    """While this master stands by, every call but health, reflection and status is refused with
    UNAVAILABLE naming the leader (message and ``sparkyard-leader`` trailing metadata), so clients and
    workers given a list of masters go to the leader at once."""

    def __init__(self, leadership: Leadership) -> None:
        self._leadership = leadership

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or self._leadership.leading or details.method.startswith(STANDBY_SERVES):
            return handler
        view = self._leadership.view
        if view.address:
            message = f"this master is a standby; the leader is {view.address} (epoch {view.epoch})"
        else:
            message = "this master is a standby and no master leads yet (an election is under way); retry shortly"
        # No gRPC-level retry of this refusal (pushback -1): the caller follows the leader instead.
        trailing = ((LEADER_METADATA, view.address), ("grpc-retry-pushback-ms", "-1"))
        return aborting_handler(handler, message, grpc.StatusCode.UNAVAILABLE, trailing)
