"""Child jobs (--after): which run ends fire which children, in the script that ended the parent's run, once,
with the parent run's time — over a RedisStore timed by a fake clock. No master needs to be listening: the
firing is part of the run's end."""

from __future__ import annotations

import pytest

from clocked_store import ClockedStores
from master_rig import MasterRig
from sparkyard import ids
from sparkyard.clock import FakeClock
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

    async def parent(self) -> pb.JobSpec:
        """The parent job, a daily cron job (submitted the first time)."""
        if await self.store.get_job(PARENT) is None:
            spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(cron=pb.Trigger.Cron(
                expr="0 3 * * *"))))
            await self.store.submit_many([NewJob(PARENT, spec, "abs", self.now_ms() + 86_400_000)], 60_000)
        job = await self.store.get_job(PARENT)
        assert job is not None
        return job.spec

    async def finish(self, run_id: str, outcome: str = "SUCCEEDED") -> None:
        """Run the run's first task to ``outcome`` as a worker would."""
        (claim,) = await self.store.claim("default", [(ids.task_id(run_id, 0), "w1")], lease_ms=60_000,
                                          timeout_grace_ms=0)
        self.clock.advance(1)
        self.outcomes.apply_verdicts(await self.store.report([Report(claim.task_id, claim.token, outcome)]))

    async def parent_run(self, outcome: str = "SUCCEEDED") -> str:
        """A manual run of the parent job, ended with ``outcome`` (SUCCEEDED or FAILED)."""
        spec = await self.parent()
        self.clock.advance(1)
        run_id, status = await self.preloader.trigger_now(PARENT, spec, 1)
        assert status == "created"
        await self.finish(run_id, outcome)
        return run_id

    async def child(self, n: int, when: int = pb.AFTER_SUCCEEDED, overlap: int = pb.OVERLAP_UNSPECIFIED) -> str:
        await self.parent()
        self.clock.advance(0.001)
        spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", overlap=overlap,
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
    succeeded = await rig.parent_run("SUCCEEDED")
    run = await rig.store.get_run(succeeded, with_tasks=False)
    assert run is not None and run.state is RunState.SUCCEEDED
    assert await rig.runs(ok) == [(succeeded, run.scheduled_ms, "SCHEDULED")]
    assert await rig.runs(failed) == []
    assert await rig.runs(always) == [(succeeded, run.scheduled_ms, "SCHEDULED")]
    (child_run,) = await rig.store.list_runs(ok, 10)
    assert ids.parse_run_ms(child_run.id) == ids.parse_run_ms(succeeded)
    broken = await rig.parent_run("FAILED")
    assert [r[0] for r in await rig.runs(failed)] == [broken]
    assert len(await rig.runs(ok)) == 1 and len(await rig.runs(always)) == 2


async def test_a_chain_fires_all_the_way_down_with_the_first_run_s_time(rig: Rig) -> None:
    first = await rig.child(1)
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=pb.Trigger(after=pb.Trigger.After(job_id=first))))
    await rig.store.submit_many([NewJob(child_id(2), spec, "after", -1, after=first)], 60_000)
    parent_run = await rig.parent_run()
    (middle,) = await rig.store.list_runs(first, 10)
    await rig.finish(middle.id)
    (last,) = await rig.store.list_runs(child_id(2), 10)
    assert last.after_run == middle.id and last.scheduled_ms == middle.scheduled_ms
    assert ids.parse_run_ms(last.id) == ids.parse_run_ms(parent_run)


async def test_a_paused_child_skips_the_parent_runs_that_end_while_it_is_paused(rig: Rig) -> None:
    child = await rig.child(1)
    await rig.store.set_job_state(child, JobState.PAUSED)
    await rig.parent_run()
    assert await rig.runs(child) == []
    await rig.store.set_job_state(child, JobState.ACTIVE)
    later = await rig.parent_run()
    assert [r[0] for r in await rig.runs(child)] == [later]


async def test_a_child_fires_from_its_latest_version_and_forbid_skips_while_one_of_its_runs_is_active(
        rig: Rig) -> None:
    child = await rig.child(1, overlap=pb.OVERLAP_FORBID)
    first = await rig.parent_run()
    job = await rig.store.get_job(child)
    assert job is not None
    changed = pb.JobSpec()
    changed.CopyFrom(job.spec)
    changed.priority = 5
    assert (await rig.store.update_spec(child, 1, changed, -1)).spec_version == 2
    second = await rig.parent_run()
    runs = {r.after_run: r for r in await rig.store.list_runs(child, 10)}
    assert runs[first].state is RunState.SCHEDULED and runs[first].spec_version == 1
    assert runs[second].state is RunState.SKIPPED and "overlap forbidden" in runs[second].reason
    await rig.finish(runs[first].id)
    third = await rig.parent_run()
    runs = {r.after_run: r for r in await rig.store.list_runs(child, 10)}
    assert runs[third].state is RunState.SCHEDULED and runs[third].spec_version == 2
