"""The ready queue's order: priority first among tasks fired together, age wins in the long run, and a run
waits by when it was queued, not the date it is for."""

from __future__ import annotations

from clocked_store import ClockedStores
from master_rig import MasterRig
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.store_values import DEFAULT_PRIORITY_AGING_MS, Report, ready_score
from sparkyard.v1 import sparkyard_pb2 as pb

T = 1_790_000_000_000


def test_tasks_fired_in_the_same_second_run_strictly_by_priority() -> None:
    scores = {p: ready_score(p, T + 999) for p in (1, 2, 10)}
    scores[0] = ready_score(0, T)
    assert sorted(scores, key=scores.__getitem__) == [10, 2, 1, 0]


def test_equal_priorities_run_in_fire_time_order() -> None:
    assert ready_score(5, T) < ready_score(5, T + 1)


def test_a_waiting_low_priority_task_overtakes_newer_high_priority_ones() -> None:
    waited = 11 * DEFAULT_PRIORITY_AGING_MS
    old_low, new_high = ready_score(0, T), ready_score(10, T + waited)
    assert old_low < new_high  # waited longer than 10 priority points are worth


def test_priority_is_worth_no_more_than_its_aging_step() -> None:
    assert ready_score(10, T + 10 * DEFAULT_PRIORITY_AGING_MS) == ready_score(0, T)


async def test_a_rerun_of_a_past_run_queues_behind_current_work_of_its_priority(clocked_stores: ClockedStores) -> None:
    clock = FakeClock()
    rig = MasterRig(clock, await clocked_stores.make(clock))
    spec = pb.JobSpec(entrypoint="/jobs/a.py:main", trigger=pb.Trigger(manual=True))
    old_job = (await rig.master.jobs.submit(spec)).job
    old = await rig.master.jobs.trigger(old_job.id)
    (claim,) = await rig.store.claim("default", [(ids.task_id(old.id, 0), "w1")], lease_ms=60_000,
                                     timeout_grace_ms=0)
    rig.outcomes.apply_verdicts(await rig.store.report([Report(claim.task_id, claim.token, "SUCCEEDED", "")]))
    await rig.settle()
    clock.advance(3600)
    spec.entrypoint = "/jobs/b.py:main"
    current = await rig.master.jobs.trigger((await rig.master.jobs.submit(spec)).job.id)
    clock.advance(1)
    again = await rig.master.jobs.rerun(old.id, failed_only=False)
    assert again.scheduled_ms < current.scheduled_ms  # the rerun is for the past date
    queue = await rig.store.redis.zrange(rig.store.keys.ready("default"), 0, -1)
    assert queue == [ids.task_id(current.id, 0), ids.task_id(again.id, 0)]
