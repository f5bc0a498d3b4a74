"""Leader election and fencing on a real redis-server: one leader per namespace, an epoch that grows with
every change of leader, and write scripts that refuse any other epoch."""

from __future__ import annotations

import asyncio
import itertools
import re
from typing import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from harness import RedisServer
from sparkyard.clock import FakeClock, SystemClock
from sparkyard.keys import Keys
from sparkyard.master.leader import Leadership, connection_name
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import SCRIPT_NAMES, UNFENCED, Fenced, ScriptLibrary

_ns = itertools.count(1)
LEASE_S = 0.5


class Master:
    """The election part of one master: its own script library (its own epoch) on the shared Redis."""

    def __init__(self, redis: Redis, keys: Keys, name: str, lease_s: float = LEASE_S,
                 clock: SystemClock | FakeClock | None = None) -> None:
        self.store = RedisStore(redis, keys)
        self.events: list[str] = []
        self.why: list[str] = []  # each deposal's reason

        async def elected(epoch: int) -> None:
            self.events.append(f"elected {epoch}")

        async def deposed(why: str) -> None:
            self.events.append("deposed")
            self.why.append(why)

        self.leadership = Leadership(self.store, name, f"{name}:7070", lease_s, clock or SystemClock(), elected,
                                     deposed)


async def elected(master: Master) -> None:
    """Wait until the loop of ``master`` has made it leader."""
    for _ in range(500):
        if master.events:
            break
        await asyncio.sleep(0.01)
    assert master.events == ["elected 1"]


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis(port=redis_server.port, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
def keys() -> Keys:
    return Keys(f"lead{next(_ns)}")


async def test_one_master_leads_and_the_other_is_told_who(redis: Redis, keys: Keys) -> None:
    a, b = Master(redis, keys, "a"), Master(redis, keys, "b")
    assert await a.leadership.acquire() and a.leadership.epoch == 1
    assert not await b.leadership.acquire()
    assert (b.leadership.view.leader_id, b.leadership.view.address, b.leadership.view.epoch) == ("a", "a:7070", 1)
    assert await a.leadership.renew() and not await b.leadership.renew()


async def test_a_standby_takes_over_a_lapsed_lease_and_fences_the_old_leader(redis: Redis, keys: Keys) -> None:
    a, b = Master(redis, keys, "a"), Master(redis, keys, "b")
    assert await a.leadership.acquire()
    await redis.delete(keys.leader)  # the lease lapsed (a was paused past it)
    assert await b.leadership.acquire() and b.leadership.epoch == 2
    with pytest.raises(Fenced, match="epoch 1 is not the current one"):
        await a.store.reschedule_after_run("j1", "r1", 0)
    await b.store.reschedule_after_run("j1", "r1", 0)  # the new leader writes
    assert not await a.leadership.renew()  # and the old one learns it lost


async def test_leader_and_standby_both_record_themselves_among_the_masters(redis: Redis, keys: Keys) -> None:
    """master.lua is unfenced on purpose: a standby, with no epoch, still shows in ``status``."""
    a, b = Master(redis, keys, "a"), Master(redis, keys, "b")
    assert await a.leadership.acquire() and not await b.leadership.acquire()
    await a.leadership._advertise()
    await b.leadership._advertise()
    seen = {mid: (r["address"], r["role"]) for mid, r in await b.leadership.masters()}
    assert seen == {"a": ("a:7070", "leader"), "b": ("b:7070", "standby")}


async def test_a_restarted_master_takes_its_own_lease_back_at_once(redis: Redis, keys: Keys) -> None:
    first = Master(redis, keys, "a")
    assert await first.leadership.acquire()
    again = Master(redis, keys, "a")  # the same master id after a restart, within the old lease
    assert await again.leadership.acquire() and again.leadership.epoch == 2
    with pytest.raises(Fenced):
        await first.store.reschedule_after_run("j1", "r1", 0)


async def test_resigning_hands_over_at_the_next_try(redis: Redis, keys: Keys) -> None:
    a, b = Master(redis, keys, "a"), Master(redis, keys, "b")
    assert await a.leadership.acquire()
    await a.leadership.resign()
    assert not a.leadership.leading and await b.leadership.acquire()


async def test_the_loop_deposes_a_leader_whose_lease_was_taken(redis: Redis, keys: Keys) -> None:
    a, b = Master(redis, keys, "a"), Master(redis, keys, "b")
    loop = asyncio.create_task(a.leadership.run())
    try:
        await elected(a)
        await redis.delete(keys.leader)
        assert await b.leadership.acquire()
        await asyncio.wait_for(loop, 10 * LEASE_S)  # the loop ends once deposed
        assert a.events == ["elected 1", "deposed"] and a.store.scripts.epoch == 0
        # How late the failed renewal was, for a log reader to tell a starved loop from a slow Redis.
        assert re.search(r"this renewal left [0-9.]+s after the last that kept it and took [0-9.]+s", a.why[0])
    finally:
        loop.cancel()


async def test_a_leader_that_could_not_start_leading_steps_down(redis: Redis, keys: Keys) -> None:
    """Redis failing while the wheel is rebuilt must not leave a leader that holds the lease and renews it
    but never dispatches: it steps down (and the master execs itself afresh)."""
    a = Master(redis, keys, "a")

    async def half_started(epoch: int) -> None:
        a.events.append(f"elected {epoch}")
        raise RedisConnectionError("Connection closed by server.")

    a.leadership._on_elected = half_started
    await asyncio.wait_for(a.leadership.run(), 10 * LEASE_S)  # the loop ends once deposed
    assert a.events == ["elected 1", "deposed"] and not a.leadership.leading and a.store.scripts.epoch == 0


START_LEASE_S = 3.0  # the default leader lease: a stall of the loop under 2.5 s loses nothing
RENEWALS_IN_A_START = 8  # every lease/6: a start of 8 renewals lasts 1.33 leases


def renewals_counted(master: Master) -> list[int]:
    """Count ``master``'s renewals that kept the lease (in the list's only element)."""
    count = [0]
    renew = master.leadership.renew

    async def counted() -> bool:
        held = await renew()
        count[0] += held
        return held

    master.leadership.renew = counted  # type: ignore[method-assign]
    return count


async def start_lasting(renewals: list[int]) -> None:
    """A start as leader that lasts until the lease was renewed RENEWALS_IN_A_START times (longer than the lease)."""
    deadline = asyncio.get_running_loop().time() + 60 * START_LEASE_S  # ~50x the typical; a hang fails here
    while renewals[0] < RENEWALS_IN_A_START:
        assert asyncio.get_running_loop().time() < deadline, f"{renewals[0]} renewals while it started"
        await asyncio.sleep(0.05)


async def test_a_start_as_leader_longer_than_the_lease_keeps_the_lease_meanwhile(redis: Redis, keys: Keys) -> None:
    """Rebuilding a large wheel on a loaded machine can take longer than the lease: the new leader renews it
    meanwhile, as it does when leading, so that no standby takes over while it starts."""
    a, b = Master(redis, keys, "a", START_LEASE_S), Master(redis, keys, "b", START_LEASE_S)
    renewals = renewals_counted(a)
    taken: list[bool] = []

    async def start(epoch: int) -> None:
        taken.append(await b.leadership.acquire())  # another master tries, while the lease is fresh
        await start_lasting(renewals)
        taken.append(await b.leadership.acquire())  # and again, more than a lease after it was taken
        a.events.append(f"elected {epoch}")

    a.leadership._on_elected = start
    loop = asyncio.create_task(a.leadership.run())
    try:
        deadline = asyncio.get_running_loop().time() + 120 * START_LEASE_S
        while not a.events:  # the start: ~1.3 leases
            assert asyncio.get_running_loop().time() < deadline and not loop.done(), a.events
            await asyncio.sleep(0.05)
        assert a.events == ["elected 1"] and a.leadership.leading and taken == [False, False]
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_a_first_start_as_leader_longer_than_the_lease_keeps_the_lease(redis: Redis, keys: Keys) -> None:
    """A master's start as leader before its port opens (its wheel rebuilt): renewed meanwhile, or its first
    renewal would find the lease lapsed and the master would restart and start again for ever."""
    a = Master(redis, keys, "a", START_LEASE_S)
    renewals = renewals_counted(a)
    assert await a.leadership.first_election()
    await a.leadership.lead_first(start_lasting(renewals))
    assert a.leadership.leading and a.events == [] and await a.leadership.renew()


async def test_a_leader_whose_lease_is_taken_while_it_starts_stops_starting_and_steps_down(
        redis: Redis, keys: Keys) -> None:
    a, b = Master(redis, keys, "a"), Master(redis, keys, "b")
    started = asyncio.Event()

    async def start(epoch: int) -> None:
        a.events.append("starting")
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            a.events.append("start cancelled")
            raise

    a.leadership._on_elected = start
    loop = asyncio.create_task(a.leadership.run())
    try:
        await asyncio.wait_for(started.wait(), 10 * LEASE_S)
        await redis.delete(keys.leader)
        assert await b.leadership.acquire()
        await asyncio.wait_for(loop, 10 * LEASE_S)  # the loop ends once deposed
        assert a.events == ["starting", "start cancelled", "deposed"] and a.store.scripts.epoch == 0
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)


async def test_a_standby_takes_over_from_a_leader_whose_process_is_gone_before_its_lease_ends(
        redis_server: RedisServer, keys: Keys) -> None:
    """A leader's connections carry its name; once Redis has had none of them for half a lease, a standby
    takes the lease over from it (the lease here outlasts the test: only the half-lease window, on a fake
    clock, is waited for)."""
    clock = FakeClock()
    named = {m: Redis(port=redis_server.port, decode_responses=True, client_name=connection_name(keys.namespace, m))
             for m in ("a", "b")}
    try:
        a, b = (Master(named[m], keys, m, lease_s=600, clock=clock) for m in ("a", "b"))
        assert await a.leadership.acquire() and not await b.leadership.acquire()
        clock.advance(400)
        assert not await b.leadership.take_over_if_gone()  # a's connection is open: it lives, however long
        await named["a"].connection_pool.disconnect()  # a's process died: Redis saw its connections close
        gone = connection_name(keys.namespace, "a")
        for _ in range(200):  # Redis notices a closed socket on its next loop: wait for it, up to 10 s
            if all(c.get("name") != gone for c in await named["b"].client_list()):
                break
            await asyncio.sleep(0.05)
        assert not await b.leadership.take_over_if_gone()  # gone since now
        clock.advance(299)
        assert not await b.leadership.take_over_if_gone()
        clock.advance(2)
        assert await b.leadership.take_over_if_gone() and b.leadership.epoch == 2
        assert await named["b"].pttl(keys.leader) > 500_000  # b's own lease, a's was not waited out
        with pytest.raises(Fenced, match="epoch 1 is not the current one"):
            await a.store.reschedule_after_run("j1", "r1", 0)  # were a alive after all, it is fenced
        assert not await a.leadership.renew()
    finally:
        for client in named.values():
            await client.aclose()


async def test_a_takeover_never_takes_the_lease_from_a_holder_it_did_not_see_gone(redis: Redis, keys: Keys) -> None:
    a, b, c = Master(redis, keys, "a"), Master(redis, keys, "b"), Master(redis, keys, "c")
    assert await a.leadership.acquire() and not await b.leadership.acquire()
    seen_gone = b.leadership.view
    await redis.delete(keys.leader)  # a's lease lapsed and c took it, after b looked
    assert await c.leadership.acquire()
    assert not await b.leadership._take("takeover", seen_gone)
    assert b.leadership.view.leader_id == "c" and await c.leadership.renew()


async def test_a_standby_that_cannot_list_connections_waits_for_the_lease(redis: Redis, keys: Keys) -> None:
    """CLIENT LIST refused (an ACL without it): no takeover, and no further tries."""
    clock = FakeClock()
    a, b = Master(redis, keys, "a", lease_s=600, clock=clock), Master(redis, keys, "b", lease_s=600, clock=clock)
    calls = []

    async def refused() -> set[str]:
        calls.append(1)
        raise ResponseError("NOPERM this user has no permissions to run the 'client|list' command")

    b.store.connection_names = refused  # type: ignore[method-assign]
    assert await a.leadership.acquire() and not await b.leadership.acquire()
    await redis.client_kill_filter(_type="normal", skipme=False)  # nobody's connections are left at all
    for _ in range(3):
        clock.advance(400)
        assert not await b.leadership.take_over_if_gone()
    assert calls == [1] and not await b.leadership.acquire()


async def test_every_write_script_is_fenced_and_refuses_before_it_writes(redis: Redis, keys: Keys) -> None:
    library = ScriptLibrary(redis, keys)
    library.epoch = 7  # not the current epoch (there is none)
    for name in SCRIPT_NAMES:
        if name in UNFENCED:
            continue
        with pytest.raises(Fenced):
            await library(name, [keys.schedule], ["x"] * 8)
    assert await redis.keys(f"{keys.namespace}:*") == []


async def test_a_leader_whose_redis_stops_answering_steps_down_within_its_lease(redis: Redis, keys: Keys) -> None:
    """A partition that drops packets, or a stopped Redis, holds a call until TCP gives up (minutes): the
    leader must not wait for it while a standby takes over. Here the renewals hang from some point on."""
    a = Master(redis, keys, "a", lease_s=1.0)
    real_call = a.leadership._call
    hang = asyncio.Event()

    async def call(op: str, holder: object = None) -> bool:
        if hang.is_set():
            await asyncio.Event().wait()  # never answered
        return await real_call(op, holder)

    a.leadership._call = call
    loop = asyncio.create_task(a.leadership.run())
    try:
        await elected(a)
        hang.set()
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(loop, 30)  # the loop ends once deposed (before the change: never, while it hangs)
        took = asyncio.get_running_loop().time() - started
        assert a.events == ["elected 1", "deposed"] and not a.leadership.leading and a.store.scripts.epoch == 0
        print(f"deposed {took:.2f}s after its renewals stopped being answered (lease 1 s)")
    finally:
        loop.cancel()


async def test_a_new_leader_whose_redis_stops_answering_right_after_its_election_steps_down(
        redis: Redis, keys: Keys) -> None:
    a = Master(redis, keys, "a", lease_s=1.0)

    async def hangs() -> None:
        await asyncio.Event().wait()  # its entry in the masters list, the first write after the election

    a.leadership._advertise = hangs
    await asyncio.wait_for(a.leadership.run(), 30)  # ends once deposed (before: held until TCP gave up)
    assert a.events == ["elected 1", "deposed"] and not a.leadership.leading
