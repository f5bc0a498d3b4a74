"""A backfill request over a long range is refused with its reason without stalling the leader: its fire times
are computed off the event loop (2 s of cron steps for 500 days of an hourly job, measured on a loaded CI
machine, stalled the shared master's lease renewal until it lost its leadership)."""

from __future__ import annotations

import asyncio

import pytest

from clocked_store import ClockedStores
from master_rig import MasterRig
from rich.console import Console

from sparkyard.cli.render import runs_table
from sparkyard.clock import FakeClock
from sparkyard.errors import InvalidArgument
from sparkyard.master.convert import run_to_proto
from sparkyard.master.records import JobRecord
from sparkyard.master.store_values import NewJob
from sparkyard.spec import normalize
from sparkyard.v1 import sparkyard_pb2 as pb

JOB = f"j{7:021x}"
DAY_MS = 86_400_000


async def _hourly_job(clocked_stores: ClockedStores) -> tuple[MasterRig, JobRecord]:
    clock = FakeClock(start=1_800_000_000)
    rig = MasterRig(clock, await clocked_stores.make(clock))
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="0 * * * *"))))
    await rig.store.submit_many([NewJob(JOB, spec, "abs", rig.now_ms() + 3_600_000)], 60_000)
    job = await rig.store.get_job(JOB)
    assert job is not None
    return rig, job


async def test_the_loop_runs_on_while_a_long_range_is_counted_and_refused(clocked_stores: ClockedStores) -> None:
    rig, job = await _hourly_job(clocked_stores)
    ticks = 0
    planning = asyncio.ensure_future(rig.master.backfiller.plan(job, rig.now_ms() - 500 * DAY_MS,
                                                                rig.now_ms() - 3_600_000, 1))
    while not planning.done():  # what the leader's lease renewal needs: the loop's turns, meanwhile
        ticks += 1
        await asyncio.sleep(0)
    with pytest.raises(InvalidArgument, match="start, end: the range has more than 10000 fire times"):
        await planning
    assert ticks > 10


async def test_a_backfills_runs_are_marked_and_not_shown_late(clocked_stores: ClockedStores) -> None:
    """A backfill's run has the past scheduled time it was asked for: `runs` showed days of lateness."""
    rig, job = await _hourly_job(clocked_stores)
    await rig.master.backfiller.plan(job, rig.now_ms() - 3 * 86_400_000, rig.now_ms() - 3 * 86_400_000 + 3_599_999, 1)
    await rig.settle()
    (run,) = await rig.store.list_runs(JOB, 10)
    assert run.backfill
    proto = run_to_proto(run)
    assert proto.backfill
    console = Console(width=200, record=True)
    runs_table(console, [proto])
    row = next(line for line in console.export_text().splitlines() if proto.id in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[3] == "-" and cells[6] == "backfill"  # late, reason
    run_id, _ = await rig.master.preloader.trigger_now(JOB, job.spec, job.spec_version)
    triggered = await rig.store.get_run(run_id)
    assert triggered is not None and not triggered.backfill  # a user's trigger is not a backfill
