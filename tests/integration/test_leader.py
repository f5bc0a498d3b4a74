"""Leader election and fencing on a real redis-server: one leader per namespace, an epoch that grows with
every change of leader, and write scripts that refuse any other epoch."""

from __future__ import annotations

import asyncio
import itertools
from typing import AsyncIterator

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from harness import RedisServer
from sparkyard.clock import SystemClock
from sparkyard.keys import Keys
from sparkyard.master.leader import Leadership
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import SCRIPT_NAMES, UNFENCED, Fenced, ScriptLibrary

_ns = itertools.count(1)
LEASE_S = 0.5


class Master:
    """The election part of one master: its own script library (its own epoch) on the shared Redis."""

    def __init__(self, redis: Redis, keys: Keys, name: str) -> None:
        self.store = RedisStore(redis, keys)
        self.events: list[str] = []

        async def elected(epoch: int) -> None:
            self.events.append(f"elected {epoch}")

        async def deposed(why: str) -> None:
            self.events.append("deposed")

        self.leadership = Leadership(self.store, name, f"{name}:7070", LEASE_S, SystemClock(), elected, deposed)


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
        for _ in range(200):
            if a.events:
                break
            await asyncio.sleep(0.01)
        assert a.events == ["elected 1"]
        await redis.delete(keys.leader)
        assert await b.leadership.acquire()
        await asyncio.wait_for(loop, 10 * LEASE_S)  # the loop ends once deposed
        assert a.events == ["elected 1", "deposed"] and a.store.scripts.epoch == 0
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


async def test_every_write_script_is_fenced_and_refuses_before_it_writes(redis: Redis, keys: Keys) -> None:
    library = ScriptLibrary(redis, keys)
    library.epoch = 7  # not the current epoch (there is none)
    for name in SCRIPT_NAMES:
        if name in UNFENCED:
            continue
        with pytest.raises(Fenced):
            await library(name, [keys.schedule], ["x"] * 8)
    assert await redis.keys(f"{keys.namespace}:*") == []
