"""A master's start as leader and its stop (:class:`sparkyard.master.assembly.Master`), built by its composition
root over a RedisStore timed by a FakeClock: a start cancelled halfway — the lease lost meanwhile — leaves
nothing of the leadership running once it stopped leading."""

from __future__ import annotations

import asyncio

from clocked_store import ClockedStores, settle
from master_rig import MasterRig
from sparkyard.clock import FakeClock
from sparkyard.master.store_outcomes import ScheduleEntry

DEADLINE_S = 10.0


async def test_a_start_cancelled_while_the_schedule_loads_is_stopped_with_what_it_began(
        clocked_stores: ClockedStores) -> None:
    clock = FakeClock()
    rig = MasterRig(clock, await clocked_stores.make(clock))
    master = rig.master
    loading, never = asyncio.Event(), asyncio.Event()

    async def slow_load(until_ms: int, limit: int = 0) -> list[ScheduleEntry]:
        loading.set()
        await never.wait()  # a load that outlasts the lease: the start is cancelled within it
        return []

    rig.store.due_schedule = slow_load  # type: ignore[method-assign]
    before = asyncio.all_tasks()
    try:
        starting = asyncio.ensure_future(master.lead(1))
        await asyncio.wait_for(loading.wait(), DEADLINE_S)  # the preloader's firing loops run by now
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await master.stop_leading()
        await settle(rig.store)
        left = [t.get_name() for t in asyncio.all_tasks() - before if not t.done() and t is not asyncio.current_task()]
        assert left == [], f"left running after the leadership stopped: {left}"
    finally:
        rig.timer.close()
