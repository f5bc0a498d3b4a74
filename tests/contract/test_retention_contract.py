"""The Store contract for deleting jobs and retention (delete_job.lua, retention.lua): run, like
test_store_contract.py whose fixtures it uses, on Redis time and on a fake clock."""

from __future__ import annotations

from test_store_contract import GROUP, TTL_MS, every, job_id, lease, spec, store, subject  # noqa: F401

from sparkyard import ids
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store import Store
from sparkyard.master.store_values import FireRequest, NewJob, PurgeResult, Report, RetentionBounds
from sparkyard.states import JobState

FAR_FUTURE_MS = 4_000_000_000_000
DAY_MS = 86_400_000


def bounds(keep_runs: int, budget: int = 500) -> RetentionBounds:
    return RetentionBounds(keep_runs=keep_runs, max_age_ms=DAY_MS, jobs_per_step=100, budget=budget)


async def recurring(store: Store, n: int) -> None:
    await store.submit_many([NewJob(job_id(n), spec(trigger=every(1)), "abs", FAR_FUTURE_MS)], TTL_MS)


async def fired(store: Store, n: int, at: int, tasks: int = 1) -> str:
    run_id, res = await store.fire(job_id(n), spec(trigger=every(1)), at, expected_ms=None, next_fire_ms=-1,
                                   overlap="allow", inputs=[()] * tasks)
    assert res.status == "created"
    return run_id


async def ended(store: Store, n: int, at: int, tasks: int = 1) -> str:
    run_id = await fired(store, n, at, tasks)
    claims = await lease(store, [ids.task_id(run_id, i) for i in range(tasks)])
    await store.report([Report(c.task_id, c.token, "SUCCEEDED") for c in claims])
    return run_id


async def purge_all(store: Store, b: RetentionBounds) -> list[PurgeResult]:
    steps, cursor = [], 0
    while True:
        step = await store.purge_history(cursor, b)
        steps.append(step)
        cursor = step.cursor
        if not step.more and cursor == 0:
            return steps
        assert len(steps) < 1000, "retention did not finish"


async def test_retention_keeps_the_newest_ended_runs_and_every_active_one(store: Store) -> None:
    await recurring(store, 1)
    active = await fired(store, 1, 500)
    done = [await ended(store, 1, 1_000 * i, tasks=2) for i in range(1, 6)]
    steps = await purge_all(store, bounds(keep_runs=2, budget=5))
    assert sum(s.runs_deleted for s in steps) == 3 and sum(s.keys_deleted for s in steps) == 9
    assert sorted(r.id for r in await store.list_runs(job_id(1), 100)) == sorted([active, *done[-2:]])
    assert await store.get_run(done[0]) is None and await store.get_task(ids.task_id(done[0], 1)) is None
    assert await store.active_runs(job_id(1)) == [active]


async def test_a_job_is_deleted_only_without_active_runs_and_then_purged(store: Store) -> None:
    await recurring(store, 1)
    await recurring(store, 2)
    old = await ended(store, 1, 1_000)
    running = await fired(store, 1, 2_000)
    assert await store.delete_job(job_id(1)) == ("active", [running])
    await store.cancel("stop", job_id=job_id(1), run_ids=[running], task_ids=[ids.task_id(running, 0)])
    assert await store.delete_job(job_id(1)) == ("ok", [])
    assert await store.delete_job(job_id(1)) == ("missing", [])
    assert await store.get_job(job_id(1)) is None
    assert [j.id for j in await store.list_jobs(10)] == [job_id(2)]
    assert await store.due_schedule(FAR_FUTURE_MS) == [(job_id(2), FAR_FUTURE_MS)]
    _, late = await store.fire(job_id(1), spec(trigger=every(1)), 3_000, expected_ms=None, next_fire_ms=-1,
                               overlap="allow", inputs=[()])
    assert late.status == "inactive"
    steps = await purge_all(store, bounds(keep_runs=100, budget=3))
    assert sum(s.runs_deleted for s in steps) == 2
    assert await store.get_run(old) is None and await store.get_run(running) is None
    assert await store.list_runs(job_id(1), 10) == [] and await store.ready_counts() == {GROUP: 0}


async def test_retention_drops_the_replaced_specs_no_remaining_run_was_made_from(store: Store) -> None:
    await recurring(store, 1)
    made: list[str] = []
    for version in (1, 2, 3):
        if version > 1:
            update = await store.update_spec(job_id(1), version - 1, spec(trigger=every(1), args=[str(version)]), -1)
            assert update.spec_version == version
        ((run_id, res),) = await store.fire_many([FireRequest(job_id(1), spec(trigger=every(1)), 1_000 * version,
                                                              None, -1, "allow", [()], spec_version=version)])
        assert res.status == "created"
        (claim,) = await lease(store, [ids.task_id(run_id, 0)])
        await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
        made.append(run_id)
    await purge_all(store, bounds(keep_runs=100))
    assert await stored_versions(store, job_id(1)) == {1, 2, 3}  # every version still has its run
    await purge_all(store, bounds(keep_runs=1))
    assert [r.id for r in await store.list_runs(job_id(1), 10)] == [made[-1]]
    assert await stored_versions(store, job_id(1)) == {3}


async def stored_versions(store: Store, job: str) -> set[int]:
    """The spec versions the store holds for a job (its cache of specs aside: these are what retention
    must shrink)."""
    assert isinstance(store, RedisStore)
    fields = await store.redis.hkeys(store.keys.job(job))
    current = int(await store.redis.hget(store.keys.job(job), "spec_v") or 1)
    return {current} | {int(f.split("@", 1)[1]) for f in fields if str(f).startswith("spec@")}


async def test_retention_puts_a_paused_job_missing_from_the_paused_index_back(store: Store) -> None:
    """A job paused by a version that kept no index of paused jobs is listed as paused after one pass."""
    assert isinstance(store, RedisStore)
    for n in (1, 2):
        await recurring(store, n)
    await store.set_job_state(job_id(2), JobState.PAUSED)
    paused = await store.scan_jobs("", 10, paused=True)
    assert [j.id for j, _ in paused[0]] == [job_id(2)]
    await store.redis.zrem(store.keys.jobs_paused, job_id(2))
    assert (await store.scan_jobs("", 10, paused=True))[0] == []
    await purge_all(store, bounds(keep_runs=100))
    assert [(j.id, j.state) for j, _ in (await store.scan_jobs("", 10, paused=True))[0]] == [(job_id(2), JobState.PAUSED)]


async def test_retention_puts_a_pipeline_missing_from_the_pipelines_index_back(store: Store) -> None:
    """A pipeline made by a version that kept no index of pipelines is found by `apply --prune` after one pass;
    a deleted one leaves the index."""
    assert isinstance(store, RedisStore)
    await recurring(store, 1)
    step = spec()
    pipeline = spec(trigger=every(1))
    pipeline.steps.add(name="a", spec=step)
    await store.submit_many([NewJob(job_id(2), pipeline, "abs", FAR_FUTURE_MS, steps=((job_id(3), step),))], TTL_MS)
    listed = await store.scan_jobs("", 10, pipelines=True)
    assert [j.id for j, _ in listed[0]] == [job_id(2)]
    await store.redis.zrem(store.keys.jobs_pipelines, job_id(2))
    await purge_all(store, bounds(keep_runs=100))
    assert [j.id for j, _ in (await store.scan_jobs("", 10, pipelines=True))[0]] == [job_id(2)]
    await store.delete_job(job_id(2))
    assert (await store.scan_jobs("", 10, pipelines=True))[0] == []
