"""Child jobs (--after): which run ends fire which children, once, and what a new leader fires that its
predecessor did not get to — over a RedisStore timed by a fake clock."""

from __future__ import annotations


import pytest

from clocked_store import ClockedStores
from master_rig import MasterRig
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.children import RECOVERY_WINDOW_MS
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store_values import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import JobState, RunState
from sparkyard.v1 import sparkyard_pb2 as pb

PARENT = f"j{1:021x}"


def child_id(n: int) -> str:
    return f"j{100 + n:021x}"


class Rig(MasterRig):
    def __init__(self, clock: FakeClock, store: RedisStore) -> None:
        super().__init__(clock, store)
        self.preloader = self.master.preloader
        self.children = self.master.children

    async def parent(self) -> pb.JobSpec:
        """The parent job, a daily cron job (submitted the first time)."""
        if await self.store.get_job(PARENT) is None:
            spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(cron=pb.Trigger.Cron(
                expr="0 3 * * *"))))
            await self.store.submit_many([NewJob(PARENT, spec, "abs", self.now_ms() + 86_400_000)], 60_000)
        job = await self.store.get_job(PARENT)
        assert job is not None
        return job.spec

    async def parent_run(self, outcome: str = "SUCCEEDED") -> str:
        """A manual run of the parent job, ended with ``outcome`` (SUCCEEDED or FAILED)."""
        await self.parent()
        job = await self.store.get_job(PARENT)
        assert job is not None
        run_id, status = await self.preloader.trigger_now(PARENT, job.spec, job.spec_version)
        assert status == "created"
        (claim,) = await self.store.claim("default", [(ids.task_id(run_id, 0), "w1")], lease_ms=60_000,
                                          timeout_grace_ms=0)
        self.clock.advance(1)
        self.outcomes.apply_verdicts(await self.store.report([Report(claim.task_id, claim.token, outcome)]))
        return run_id

    async def child(self, n: int, when: int = pb.AFTER_SUCCEEDED) -> str:
        await self.parent()
        self.clock.advance(0.001)
        spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main",
                                    trigger=pb.Trigger(after=pb.Trigger.After(job_id=PARENT, when=when))))
        (res,) = await self.store.submit_many([NewJob(child_id(n), spec, "after", -1, after=PARENT)], 60_000)
        assert not res.parent_missing
        return child_id(n)

    async def runs(self, job_id: str) -> list[tuple[str, int, str]]:
        """(parent run, scheduled ms, state) of the job's runs."""
        return sorted((r.after_run, r.scheduled_ms, r.state.value) for r in await self.store.list_runs(job_id, 100))


@pytest.fixture
async def rig(clocked_stores: ClockedStores) -> Rig:
    clock = FakeClock()
    return Rig(clock, await clocked_stores.make(clock))


async def test_a_run_end_fires_the_children_whose_condition_it_meets_with_the_parent_run_s_time(rig: Rig) -> None:
    ok, failed, always = await rig.child(1), await rig.child(2, pb.AFTER_FAILED), await rig.child(3, pb.AFTER_ALWAYS)
    await rig.children.start()
    await rig.settle()
    succeeded = await rig.parent_run("SUCCEEDED")
    await rig.settle()
    run = await rig.store.get_run(succeeded, with_tasks=False)
    assert run is not None and run.state is RunState.SUCCEEDED
    assert await rig.runs(ok) == [(succeeded, run.scheduled_ms, "SCHEDULED")]
    assert await rig.runs(failed) == []
    assert await rig.runs(always) == [(succeeded, run.scheduled_ms, "SCHEDULED")]
    (child_run,) = await rig.store.list_runs(ok, 10)
    assert ids.parse_run_ms(child_run.id) == ids.parse_run_ms(succeeded)
    broken = await rig.parent_run("FAILED")
    await rig.settle()
    assert [r[0] for r in await rig.runs(failed)] == [broken]
    assert len(await rig.runs(ok)) == 1 and len(await rig.runs(always)) == 2
    await rig.children.stop()


async def test_a_new_leader_fires_what_was_missed_once_and_not_for_runs_before_a_child_existed(rig: Rig) -> None:
    before = await rig.parent_run()
    child = await rig.child(1)
    missed = await rig.parent_run()  # no leader was listening
    await rig.children.start()
    await rig.settle()
    assert [r[0] for r in await rig.runs(child)] == [missed]
    await rig.children.stop()
    await rig.children.start()  # another change of leader: nothing twice
    await rig.settle()
    assert [r[0] for r in await rig.runs(child)] == [missed]
    assert before != missed
    await rig.children.stop()


async def test_a_paused_child_skips_and_a_new_leader_leaves_run_ends_older_than_the_window(rig: Rig) -> None:
    child = await rig.child(1)
    await rig.children.start()
    await rig.settle()
    await rig.store.set_job_state(child, JobState.PAUSED)
    await rig.parent_run()
    await rig.settle()
    assert await rig.runs(child) == []
    await rig.children.stop()
    await rig.store.set_job_state(child, JobState.ACTIVE)
    await rig.parent_run()
    rig.clock.advance(RECOVERY_WINDOW_MS / 1000 + 1)
    await rig.children.start()
    await rig.settle()
    assert await rig.runs(child) == []
    await rig.children.stop()
