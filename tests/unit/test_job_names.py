"""Jobs found by name (issue 25 item 9): the name index that submit, update, delete and retention keep, the
master's listing by name, and the client's resolution of a name where a job id is asked for."""

from __future__ import annotations

import pytest

from clocked_store import ClockedStores
from master_rig import MasterRig
from sparkyard import errors
from sparkyard.clock import FakeClock
from sparkyard.job_names import resolve_after, resolve_job, resolve_target
from sparkyard.v1 import sparkyard_pb2 as pb


def spec(name: str, group: str = "") -> pb.JobSpec:
    return pb.JobSpec(name=name, group=group, entrypoint="/jobs/x.py:main", trigger=pb.Trigger(manual=True))


@pytest.fixture
async def rig(clocked_stores: ClockedStores) -> MasterRig:
    clock = FakeClock(1_700_000_000.0)
    return MasterRig(clock, await clocked_stores.make(clock))


async def named(rig: MasterRig, name: str, group: str = "") -> list[str]:
    return [j.id for j in (await rig.master.jobs.list_jobs(0, None, group, name)).jobs]


async def test_the_listing_by_name_follows_submit_update_and_delete(rig: MasterRig) -> None:
    jobs = rig.master.jobs
    first = (await jobs.submit(spec("extract"))).job.id
    rig.clock.advance(0.01)
    second = (await jobs.submit(spec("extract", group="gpu"))).job.id
    load = (await jobs.submit(spec("load"))).job.id
    assert await named(rig, "extract") == [second, first]  # newest first
    assert await named(rig, "extract", group="gpu") == [second]
    assert await named(rig, "load") == [load]
    assert await named(rig, "nothing") == []

    await jobs.update(first, pb.JobSpec(name="extract-v2"), ["name"])
    assert await named(rig, "extract") == [second]
    assert await named(rig, "extract-v2") == [first]

    await jobs.delete(second)
    assert await named(rig, "extract") == []
    assert await rig.store.job_ids_named("extract") == []


async def test_bulk_submits_index_every_job_and_step_jobs_are_not_indexed(rig: MasterRig) -> None:
    made = await rig.master.jobs.submit_many([(spec("nightly"), ""), (spec("nightly"), ""), (spec("other"), "")])
    assert sorted(await named(rig, "nightly")) == sorted(s.job.id for s in made[:2])
    pipeline = pb.JobSpec(name="etl", trigger=pb.Trigger(manual=True))
    pipeline.steps.add(name="extract", spec=pb.JobSpec(name="extract", entrypoint="/jobs/e.py:main"))
    etl = (await rig.master.jobs.submit(pipeline)).job.id
    assert await named(rig, "etl") == [etl]
    assert await named(rig, "extract") == []


async def test_jobs_of_one_name_list_newest_first_by_their_creation_time(rig: MasterRig) -> None:
    """The name index orders by creation time, not by id (ids sort by creation only as long as they are
    drawn, common/ids.py). So does a name given by an update."""
    jobs = rig.master.jobs
    made = []
    for key in ("zzz", "aaa", "mmm"):
        made.append((await jobs.submit(spec("nightly"), key)).job.id)
        rig.clock.advance(0.01)
    assert await named(rig, "nightly") == made[::-1]
    renamed = (await jobs.submit(spec("other"), "000")).job.id
    rig.clock.advance(0.01)
    await jobs.update(renamed, pb.JobSpec(name="nightly"), ["name"])
    assert await named(rig, "nightly") == [renamed, *made[::-1]]


async def test_a_name_index_is_a_compact_sorted_set_and_one_an_earlier_version_left_is_converted(
        rig: MasterRig) -> None:
    """Issue 23 item 4: a set of strings never takes Redis's compact encoding before 7.2 (240 bytes for a
    name's one job); a small sorted set does. An index kept as a set before is read, then converted when
    next written."""
    redis, keys, jobs = rig.store.redis, rig.store.keys, rig.master.jobs
    one = (await jobs.submit_many([(spec("compact"), "")]))[0].job.id
    assert await redis.type(keys.job_name("compact")) == "zset"
    assert await redis.object("encoding", keys.job_name("compact")) in ("ziplist", "listpack")
    older = (await jobs.submit_many([(spec("legacy"), "")]))[0].job.id
    await redis.delete(keys.job_name("legacy"))
    await redis.sadd(keys.job_name("legacy"), older)  # as the index was kept before
    assert await named(rig, "legacy") == [older]
    rig.clock.advance(0.01)
    newer = (await jobs.submit_many([(spec("legacy"), "")]))[0].job.id
    assert await redis.type(keys.job_name("legacy")) == "zset"
    assert await named(rig, "legacy") == [newer, older]
    await jobs.update(one, pb.JobSpec(name="legacy"), ["name"])
    await jobs.delete(older)
    assert sorted(await named(rig, "legacy")) == sorted([newer, one]) and await named(rig, "compact") == []


def lister(jobs: list[pb.Job]):  # type: ignore[no-untyped-def]
    def list_named(name: str, limit: int) -> list[pb.Job]:
        return [j for j in jobs if j.spec.name == name][:limit]
    return list_named


JOB_A, JOB_B, JOB_C = (f"j{n:021x}" for n in (1, 2, 3))
JOBS = [pb.Job(id=JOB_A, spec=pb.JobSpec(name="extract")), pb.Job(id=JOB_B, spec=pb.JobSpec(name="twice")),
        pb.Job(id=JOB_C, spec=pb.JobSpec(name="twice"))]


def test_a_name_resolves_to_its_one_job_and_an_id_stays_as_it_is() -> None:
    assert resolve_job("extract", lister(JOBS)) == JOB_A
    assert resolve_job(JOB_B, lister([])) == JOB_B
    run = f"{JOB_B}.1732262400000"
    assert resolve_target(run, lister([])) == run
    assert resolve_target("extract", lister(JOBS)) == JOB_A
    child = pb.JobSpec(trigger=pb.Trigger(after=pb.Trigger.After(job_id="extract")))
    resolve_after(child, lister(JOBS))
    assert child.trigger.after.job_id == JOB_A


def test_a_shared_or_unknown_name_gets_one_clear_line() -> None:
    with pytest.raises(errors.InvalidArgument, match=f"ambiguous: 2 jobs named 'twice' \\({JOB_B}, {JOB_C}\\)"):
        resolve_job("twice", lister(JOBS))
    with pytest.raises(errors.InvalidArgument, match="job_id: 'missing' is neither a job id nor the name of a job"):
        resolve_job("missing", lister(JOBS))
    with pytest.raises(errors.InvalidArgument, match="'missing' is not a job, run or task id .*, nor the name"):
        resolve_target("missing", lister(JOBS))
