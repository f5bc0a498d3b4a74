"""What RedisStore leaves in Redis: its key layout and indexes (the behaviour both stores share is in
tests/contract)."""

from __future__ import annotations

from typing import AsyncIterator

import pytest
from redis.asyncio import Redis

from sparkyard.master.bundles import BundleStore
from sparkyard.master.redis_bundles import RedisBundles
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store_values import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import RunState
from sparkyard.v1 import sparkyard_pb2 as pb

LEASE_MS = 60_000


@pytest.fixture
def store(redis_store: RedisStore) -> RedisStore:
    return redis_store


@pytest.fixture
async def bundles(store: RedisStore) -> AsyncIterator[RedisBundles]:
    """The store's door to bundles, with its own undecoding client as the master makes it."""
    blobs = Redis(port=store.redis.connection_pool.connection_kwargs["port"])
    yield RedisBundles(blobs, store.keys, store.scripts)
    await blobs.aclose()


def spec(**kw: object) -> pb.JobSpec:
    return normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", **kw))  # type: ignore[arg-type]


async def leased_task(store: RedisStore, job_id: str = "j0000000000100000000001", worker: str = "w1",
                      **kw: object) -> tuple[str, int, str]:
    """A job fired at submit, its one task claimed: (task id, token, run id)."""
    s = spec(**kw)
    (res,) = await store.submit_many([NewJob(job_id, s, "abs", 1_000, fire_now=[()])], 60_000)
    assert res.fired
    (ready,) = await store.peek_ready("default", 10)
    (claim,) = await store.claim("default", [(ready.task_id, worker)], lease_ms=LEASE_MS, timeout_grace_ms=0)
    return claim.task_id, claim.token, claim.run_id


async def test_cancel_of_a_leased_task_leaves_no_index_behind(store: RedisStore) -> None:
    task_id, token, run_id = await leased_task(store)
    result = await store.cancel("stop", run_ids=[run_id], task_ids=[task_id])
    assert result.leased == [(task_id, "w1", token)] and result.ended_runs == [(run_id, "CANCELLED", None)]
    k, r = store.keys, store.redis
    assert await r.zscore(k.leases, task_id) is None
    assert not await r.sismember(k.worker_leases("w1"), task_id)
    assert await r.zscore(k.ready("default"), task_id) is None
    (late,) = await store.report([Report(task_id, token, "SUCCEEDED")])
    assert late.verdict == "terminal"


async def test_only_an_ended_attempt_followed_by_a_retry_is_archived_in_its_own_key(store: RedisStore) -> None:
    retry = pb.RetryPolicy(max_attempts=3)
    retry.initial_backoff.FromMilliseconds(1)
    timeout = pb.JobSpec().timeout
    timeout.FromSeconds(30)
    task_id, token, _ = await leased_task(store, retry=retry, timeout=timeout)
    k, r = store.keys, store.redis
    assert await r.zscore(k.timeouts, task_id) is not None  # the run's timeout is watched by the master
    (failed,) = await store.report([Report(task_id, token, "FAILED", error="boom")])
    assert failed.task_state == "FAILED"
    assert await r.zscore(k.timeouts, task_id) is None and not await r.exists(k.attempts(task_id))
    await r.zadd(k.delayed, {task_id: await store.time_ms() - 1})
    assert await store.release_due(10, [task_id]) == [(task_id, "default")]
    (second,) = await store.claim("default", [(task_id, "w2")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    await store.report([Report(second.task_id, second.token, "SUCCEEDED", result_json='{"rows": 3}')])
    assert await r.hlen(k.attempts(task_id)) == 1  # the latest attempt stays in the task hash


async def test_a_one_shot_job_without_options_stores_no_default_settings(store: RedisStore) -> None:
    task_id, token, run_id = await leased_task(store)
    run_fields = set(await store.redis.hkeys(store.keys.run(run_id)))
    assert not run_fields & {"max_attempts", "backoff_ms", "timeout_ms", "max_concurrent"}
    assert not await store.redis.hexists(store.keys.task(task_id), "inputs")
    (failed,) = await store.report([Report(task_id, token, "FAILED", error="boom")])
    assert failed.task_state == "DEAD" and failed.run_state == "FAILED"  # absent max_attempts = 1


async def test_a_fixed_delay_job_that_joined_awaiting_before_the_awaits_field_awaits_its_last_run(
        store: RedisStore) -> None:
    """Data written by a version without the job field `awaits`: reschedule.lua falls back to last_run_id."""
    every = pb.Trigger(every=pb.Trigger.Every(fixed_delay=True))
    every.every.interval.FromSeconds(60)
    s, job_id = spec(trigger=every), "j0000000000100000000002"
    await store.submit_many([NewJob(job_id, s, "abs", 5_000)], 60_000)
    run_id, _ = await store.fire(job_id, s, 5_000, expected_ms=5_000, next_fire_ms=-2, overlap="allow", inputs=[()])
    assert await store.redis.hget(store.keys.job(job_id), "awaits") == run_id
    await store.redis.hdel(store.keys.job(job_id), "awaits")
    assert await store.reschedule_after_run(job_id, run_id, 90_000) == ("ok", 90_000)
    assert await store.due_schedule(10**13) == [(job_id, 90_000)]


async def test_a_job_and_its_bundle_reference_are_stored_in_one_step_only_while_the_bundle_exists(
        store: RedisStore) -> None:
    """bundle_gc.lua can run between any two scripts: submit.lua and update.lua write a job's reference in
    the step that stores the job, and refuse a bundle collected since the master checked it."""
    k, r = store.keys, store.redis
    first, second = "a" * 64, "b" * 64
    job_id = "j0000000000100000000001"
    named = normalize(pb.JobSpec(entrypoint="x.py:main", bundle=pb.BundleRef(digest=first, size=1)))
    (refused,) = await store.submit_many([NewJob(job_id, named, "delay", 60_000)], 60_000)
    assert refused.bundle_missing and not await r.exists(k.job(job_id), k.bundle_jobs(first))
    await r.hset(k.bundle(first), "chunks", 0)
    (stored,) = await store.submit_many([NewJob(job_id, named, "delay", 60_000)], 60_000)
    assert not stored.bundle_missing and await r.smembers(k.bundle_jobs(first)) == {job_id}
    renamed = normalize(pb.JobSpec(entrypoint="x.py:main", bundle=pb.BundleRef(digest=second, size=1)))
    missing = await store.update_spec(job_id, 1, renamed, -1)
    assert missing.status == "bundle_missing" and missing.spec_version == 1
    await r.hset(k.bundle(second), "chunks", 0)
    assert (await store.update_spec(job_id, 1, renamed, -1)).status == "ok"
    assert await r.smembers(k.bundle_jobs(second)) == {job_id}


async def test_a_bundle_shared_by_many_jobs_is_kept_while_any_needs_it_and_its_references_are_read_in_pages(
        store: RedisStore, bundles: RedisBundles) -> None:
    """bundle_gc.lua reads a bundle's references a page at a time (a million jobs sharing one bundle held
    Redis ~0.8 s a look while it read them whole): the one job that still needs it is found on any page,
    and deleted jobs' references go on the way."""
    k, r = store.keys, store.redis
    digest = "c" * 64
    await r.hset(k.bundle(digest), mapping={"chunks": 0, "created_ms": 0})
    await r.zadd(k.bundles, {digest: 0})
    spec = normalize(pb.JobSpec(entrypoint="x.py:main", bundle=pb.BundleRef(digest=digest, size=1)))
    jobs = [f"j{n:021x}" for n in range(1, 351)]
    await store.submit_many([NewJob(job_id, spec, "delay", 3_600_000) for job_id in jobs], 60_000)
    collector = BundleStore(bundles, 1)
    for job_id in jobs[:-1]:
        await store.cancel("done", job_id=job_id)
    for job_id in jobs[:100]:
        assert (await store.delete_job(job_id))[0] == "ok"  # no digest given: a reference left behind
    assert await collector.collect() == []  # the last job may still fire
    assert await r.exists(k.bundle(digest))
    await store.cancel("done", job_id=jobs[-1])
    assert await collector.collect() == [digest]
    assert not await r.exists(k.bundle(digest), k.bundle_jobs(digest))


async def test_a_completed_job_keeps_its_bundle_until_it_is_deleted_and_a_cancelled_one_does_not(
        store: RedisStore, bundles: RedisBundles) -> None:
    """A COMPLETED job (a one-shot that fired) can still be triggered, rerun or backfilled, and its new run
    needs the bundle on any worker that has not cached it: the collector took it once the run ended, and a
    rerun of a failed one-shot on another worker found no bundle. Only a CANCELLED job (nothing runs it
    again) or a deleted one lets its bundle go."""
    k, r = store.keys, store.redis
    completed_digest, cancelled_digest = "f" * 64, "0" * 64
    completed, cancelled = "j0000000000100000000008", "j0000000000100000000009"
    for digest, job_id in ((completed_digest, completed), (cancelled_digest, cancelled)):
        await r.hset(k.bundle(digest), mapping={"chunks": 0, "created_ms": 0})
        await r.zadd(k.bundles, {digest: 0})
        named = normalize(pb.JobSpec(entrypoint="x.py:main", bundle=pb.BundleRef(digest=digest, size=1)))
        await store.submit_many([NewJob(job_id, named, "delay", 3_600_000)], 60_000)
    await store.cancel("done", job_id=cancelled)
    await r.hset(k.job(completed), "state", "COMPLETED")  # as fire.lua leaves a one-shot job whose run ended
    assert await bundles.collect(0, 100) == [cancelled_digest]
    assert await r.exists(k.bundle(completed_digest))
    assert (await store.delete_job(completed))[0] == "ok"
    assert await bundles.collect(0, 100) == [completed_digest]


async def test_a_bundle_a_client_was_told_is_here_is_kept_for_the_grace_though_its_jobs_have_ended(
        store: RedisStore, bundles: RedisBundles) -> None:
    """A client asks whether a bundle is here (HasBundle) and, told yes, submits without uploading it. If
    every job naming it had ended, the collector could delete it between the answer and the submit, and the
    submit was refused (CI saw it on a shared cluster): the answer now holds the bundle for the grace."""
    k, r = store.keys, store.redis
    digest, absent = "d" * 64, "e" * 64
    await r.hset(k.bundle(digest), mapping={"chunks": 0, "created_ms": 0})
    await r.zadd(k.bundles, {digest: 0})
    job_id = "j0000000000100000000007"
    named = normalize(pb.JobSpec(entrypoint="x.py:main", bundle=pb.BundleRef(digest=digest, size=1)))
    await store.submit_many([NewJob(job_id, named, "delay", 3_600_000)], 60_000)
    await store.cancel("done", job_id=job_id)
    assert await bundles.hold(digest) and not await bundles.hold(absent)
    assert not await r.exists(k.bundle(absent))  # holding what is not there writes nothing
    assert await bundles.collect(60_000, 100) == []  # told it is here: kept
    assert await bundles.collect(0, 100) == [digest]  # past the grace, with no job needing it: deleted
    assert not await r.exists(k.bundle(digest), k.bundle_jobs(digest))


async def test_run_states_reads_each_run_s_state_in_one_round_trip_and_none_for_no_run(store: RedisStore) -> None:
    task_id, token, run_id = await leased_task(store)
    assert await store.run_states([run_id, "", "j0000000000100000000009.r1"]) == [RunState.RUNNING, None, None]
    await store.report([Report(task_id, token, "FAILED", error="boom")])
    assert await store.run_states([run_id]) == [RunState.FAILED]
