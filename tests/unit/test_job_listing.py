"""The jobs listing at scale (issue 23 item 4): one request looks at a bounded number of index entries
whatever the number of jobs held, and answers the cursor the next request goes on from; paging through
covers every job once, newest first, also when the cursor's job was deleted in between (a bulk submit's
jobs share their millisecond)."""

from __future__ import annotations

import pytest

from master_rig import MasterRig
from sparkyard import errors
from sparkyard.master.records import JobRecord
from sparkyard.states import JobState
from sparkyard.v1 import sparkyard_pb2 as pb
from test_job_names import rig, spec  # noqa: F401 - the same rig fixture and job spec


async def submit(rig: MasterRig, n: int, group: str = "") -> list[str]:
    """``n`` jobs in one bulk submit (one millisecond: the index orders them by id), newest first."""
    made = await rig.master.jobs.submit_many([(spec(f"job-{i}", group), "") for i in range(n)])
    rig.clock.advance(0.01)
    return sorted((m.job.id for m in made), reverse=True)


async def test_paging_covers_every_job_once_newest_first_in_bounded_requests(rig: MasterRig) -> None:
    older = await submit(rig, 7)
    newer = await submit(rig, 6)
    seen, after, requests = [], "", 0
    while True:
        page = await rig.master.jobs.list_jobs(4, None, "", after=after, budget=4)
        assert page.scanned <= 4
        seen += [j.id for j in page.jobs]
        requests += 1
        after = page.next
        if not after:
            break
    assert seen == newer + older
    assert requests == 4


async def test_a_filter_that_matches_few_looks_at_its_budget_and_goes_on_from_its_cursor(rig: MasterRig) -> None:
    wanted = await submit(rig, 1, group="gpu")
    others = await submit(rig, 25)
    first = await rig.master.jobs.list_jobs(10, None, "gpu", budget=10)
    assert (first.jobs, first.scanned, first.next.split(":")[1]) == ([], 10, others[9])
    found: list[JobRecord] = []
    after = first.next
    while after:
        page = await rig.master.jobs.list_jobs(10, None, "gpu", after=after, budget=10)
        assert page.scanned <= 10
        found += page.jobs
        after = page.next
    assert [j.id for j in found] == wanted
    paused = await rig.master.jobs.list_jobs(10, JobState.PAUSED, "", budget=30)
    assert paused.jobs == [] and paused.next == ""  # the budget covered all 26 jobs: nothing more to look at


async def test_a_cursor_holds_its_place_when_its_job_is_deleted_and_a_bad_one_is_named(rig: MasterRig) -> None:
    older = await submit(rig, 3)
    newer = await submit(rig, 3)
    page = await rig.master.jobs.list_jobs(3, None, "", budget=3)
    assert [j.id for j in page.jobs] == newer and page.next.endswith(f":{newer[-1]}")
    await rig.master.jobs.delete(newer[-1])
    rest = await rig.master.jobs.list_jobs(10, None, "", after=page.next)
    assert [j.id for j in rest.jobs] == older
    with pytest.raises(errors.InvalidArgument, match="after: 'nonsense' is not a page cursor"):
        await rig.master.jobs.list_jobs(10, None, "", after="nonsense")


async def test_the_paused_jobs_among_many_are_one_request_away(rig: MasterRig) -> None:
    """Listing a state that few jobs are in read every job before (33 s at a million): paused jobs are
    read from their own index, with the same cursors."""
    older = await submit(rig, 3)
    await submit(rig, 30)
    newer = await submit(rig, 2)
    for job_id in (older[1], newer[0]):
        await rig.master.jobs.pause(job_id)
    first = await rig.master.jobs.list_jobs(1, JobState.PAUSED, "", budget=1)
    assert ([j.id for j in first.jobs], first.scanned) == ([newer[0]], 1)
    rest = await rig.master.jobs.list_jobs(10, JobState.PAUSED, "", after=first.next, budget=10)
    assert ([j.id for j in rest.jobs], rest.next) == ([older[1]], "")
    await rig.master.jobs.resume(newer[0])
    again = await rig.master.jobs.list_jobs(10, JobState.PAUSED, "", budget=10)
    assert [j.id for j in again.jobs] == [older[1]]


def pipeline(name: str) -> pb.JobSpec:
    out = pb.JobSpec(name=name, trigger=pb.Trigger(manual=True))
    out.steps.add(name="a", spec=pb.JobSpec(entrypoint="/jobs/a.py:main"))
    return out


async def test_pipelines_are_listed_from_their_own_index_whatever_the_number_of_other_jobs(rig: MasterRig) -> None:
    first = (await rig.master.jobs.submit(pipeline("first"))).job.id
    rig.clock.advance(0.01)
    await submit(rig, 30)
    second = (await rig.master.jobs.submit(pipeline("second"))).job.id
    page = await rig.master.jobs.list_jobs(10, None, "", pipelines=True, budget=2)
    assert ([j.id for j in page.jobs], page.scanned, page.next) == ([second, first], 2, "")  # no other job read
    named = await rig.master.jobs.list_jobs(10, None, "", "first", pipelines=True)
    assert [j.id for j in named.jobs] == [first]
    await rig.master.jobs.delete(first)
    assert [j.id for j in (await rig.master.jobs.list_jobs(10, None, "", pipelines=True)).jobs] == [second]



async def test_a_pipeline_an_earlier_version_left_out_of_the_index_joins_it_when_updated(rig: MasterRig) -> None:
    job = (await rig.master.jobs.submit(pipeline("etl"))).job.id
    await rig.store.redis.zrem(rig.store.keys.jobs_pipelines, job)
    assert (await rig.master.jobs.list_jobs(10, None, "", pipelines=True)).jobs == []
    await rig.master.jobs.update(job, pb.JobSpec(priority=5), ["priority"])
    assert [j.id for j in (await rig.master.jobs.list_jobs(10, None, "", pipelines=True)).jobs] == [job]
