"""A backfill request over a long range is refused with its reason without stalling the leader: its fire times
are computed off the event loop (2 s of cron steps for 500 days of an hourly job, measured on a loaded CI
machine, stalled the shared master's lease renewal until it lost its leadership)."""

from __future__ import annotations

import asyncio

import pytest

from clocked_store import ClockedStores
from master_rig import MasterRig
from sparkyard.clock import FakeClock
from sparkyard.errors import InvalidArgument
from sparkyard.master.store_values import NewJob
from sparkyard.spec import normalize
from sparkyard.v1 import sparkyard_pb2 as pb

JOB = f"j{7:021x}"
DAY_MS = 86_400_000


async def test_the_loop_runs_on_while_a_long_range_is_counted_and_refused(clocked_stores: ClockedStores) -> None:
    clock = FakeClock(start=1_800_000_000)
    rig = MasterRig(clock, await clocked_stores.make(clock))
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="0 * * * *"))))
    await rig.store.submit_many([NewJob(JOB, spec, "abs", rig.now_ms() + 3_600_000)], 60_000)
    job = await rig.store.get_job(JOB)
    assert job is not None
    ticks = 0
    planning = asyncio.ensure_future(rig.master.backfiller.plan(job, rig.now_ms() - 500 * DAY_MS,
                                                                rig.now_ms() - 3_600_000, 1))
    while not planning.done():  # what the leader's lease renewal needs: the loop's turns, meanwhile
        ticks += 1
        await asyncio.sleep(0)
    with pytest.raises(InvalidArgument, match="start, end: the range has more than 10000 fire times"):
        await planning
    assert ticks > 10
