"""Retention and job deletion against a real redis-server: retention.lua and delete_job.lua through
RedisStore (the bounds, what is never touched, what a purge leaves behind, fencing), then a real master
(its retention loop, DeleteJob through the client and the CLI)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
import redis

from harness import EXAMPLES, Cluster, wait_for
from orphans import references
from sparkyard import FailedPrecondition, NotFound
from sparkyard.client import first_run_id
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import Fenced
from sparkyard.master.store_values import NewJob, PurgeResult, Report, RetentionBounds
from sparkyard.spec import normalize
from sparkyard.v1 import sparkyard_pb2 as pb

LEASE_MS = 60_000
JOB = "j0000000000100000000001"
# Bounds that delete nothing by age (a day) and keep many runs, for tests of one bound at a time.
KEEP_ALL = RetentionBounds(keep_runs=1000, max_age_ms=86_400_000, jobs_per_step=100, budget=500)


@pytest.fixture
def store(redis_store: RedisStore) -> RedisStore:
    return redis_store


def every_second() -> pb.JobSpec:
    spec = pb.JobSpec(entrypoint="/jobs/x.py:main")
    spec.trigger.every.interval.FromSeconds(1)
    return normalize(spec)


async def recurring_job(store: RedisStore, job_id: str = JOB) -> pb.JobSpec:
    spec = every_second()
    await store.submit_many([NewJob(job_id, spec, "abs", 4_000_000_000_000)], 60_000)
    return spec


async def fire(store: RedisStore, job_id: str, spec: pb.JobSpec, scheduled_ms: int, tasks: int = 1) -> str:
    (run_id, res) = await store.fire(job_id, spec, scheduled_ms, expected_ms=None, next_fire_ms=-1,
                                     overlap="allow", inputs=[()] * tasks)
    assert res.status == "created", res
    return run_id


async def ended_run(store: RedisStore, job_id: str, spec: pb.JobSpec, scheduled_ms: int,
                    outcome: str = "SUCCEEDED") -> str:
    """A run fired by hand whose one task was claimed and reported with ``outcome``."""
    run_id = await fire(store, job_id, spec, scheduled_ms)
    (claim,) = await store.claim("default", [(f"{run_id}.00000", "w1")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    (verdict,) = await store.report([Report(claim.task_id, claim.token, outcome)])
    assert verdict.run_state is not None or outcome == "FAILED", verdict
    return run_id


async def run_ids(store: RedisStore, job_id: str = JOB) -> list[str]:
    return [r.id for r in await store.list_runs(job_id, 1000)]


async def purge_all(store: RedisStore, bounds: RetentionBounds) -> list[PurgeResult]:
    """Steps until one has nothing more to delete and its scan of jobs wrapped around."""
    steps, cursor = [], 0
    for _ in range(10_000):
        step = await store.purge_history(cursor, bounds)
        steps.append(step)
        cursor = step.cursor
        if not step.more and cursor == 0:
            return steps
    raise AssertionError("retention did not finish within 10,000 steps")


async def test_a_job_keeps_its_newest_ended_runs_and_its_active_ones(store: RedisStore) -> None:
    spec = await recurring_job(store)
    ended = [await ended_run(store, JOB, spec, 1_000 * i) for i in range(1, 7)]
    active = await fire(store, JOB, spec, 500)  # the oldest of all, still SCHEDULED
    await purge_all(store, RetentionBounds(keep_runs=2, max_age_ms=86_400_000, jobs_per_step=100, budget=500))
    assert sorted(await run_ids(store)) == sorted([active, *ended[-2:]])
    assert await store.get_task(f"{active}.00000") is not None
    gone = ended[0]
    assert await store.get_run(gone) is None and await store.get_task(f"{gone}.00000") is None


async def test_ended_runs_past_the_max_age_are_deleted_and_younger_ones_kept(store: RedisStore) -> None:
    spec = await recurring_job(store)
    old = [await ended_run(store, JOB, spec, 1_000 * i) for i in (1, 2)]
    ended_at = max(r.finished_ms for r in await store.list_runs(JOB, 10))
    await wait_time(store, ended_at + 200)
    young = [await ended_run(store, JOB, spec, 1_000 * i) for i in (3, 4)]
    # The cutoff (Redis TIME − max age) falls 100 ms after the old runs ended, 100 ms before the young ones.
    max_age = await store.time_ms() - (ended_at + 100)
    await purge_all(store, RetentionBounds(keep_runs=1000, max_age_ms=max_age, jobs_per_step=100, budget=500))
    assert sorted(await run_ids(store)) == sorted(young)
    assert [await store.get_run(r) for r in old] == [None, None]


async def wait_time(store: RedisStore, until_ms: int) -> None:
    """Until Redis TIME reaches ``until_ms`` (a few hundred ms at most here), polled."""
    deadline = time.monotonic() + 10
    while await store.time_ms() < until_ms:
        assert time.monotonic() < deadline, "Redis TIME did not advance"
        await asyncio.sleep(0.01)


async def test_active_runs_and_the_runs_a_job_names_are_never_deleted(store: RedisStore) -> None:
    spec = await recurring_job(store)
    leased = await fire(store, JOB, spec, 1_000)
    await store.claim("default", [(f"{leased}.00000", "w1")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    scheduled = await fire(store, JOB, spec, 2_000)
    last = await ended_run(store, JOB, spec, 3_000)  # the job's last_run_id
    await purge_all(store, RetentionBounds(keep_runs=0, max_age_ms=0, jobs_per_step=100, budget=500))
    assert sorted(await run_ids(store)) == sorted([leased, scheduled, last])
    assert (await store.get_job(JOB)).last_run_id == last  # type: ignore[union-attr]
    assert await store.redis.zscore(store.keys.leases, f"{leased}.00000") is not None


async def test_an_ended_one_shot_job_past_the_max_age_is_deleted_with_its_history(store: RedisStore) -> None:
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main"))
    await store.submit_many([NewJob(JOB, spec, "abs", 1_000, fire_now=[()])], 60_000)
    (claim,) = await store.claim("default", [(f"{JOB}.0000000001000.00000", "w1")], lease_ms=LEASE_MS,
                                 timeout_grace_ms=0)
    await store.purge_history(0, RetentionBounds(keep_runs=1, max_age_ms=0, jobs_per_step=100, budget=500))
    assert await store.get_job(JOB) is not None  # its run is still active
    await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    await purge_all(store, KEEP_ALL)
    assert await store.get_job(JOB) is not None  # younger than the max age
    await wait_time(store, (await store.time_ms()) + 5)
    steps = await purge_all(store, RetentionBounds(keep_runs=1000, max_age_ms=1, jobs_per_step=100, budget=500))
    assert sum(s.jobs_deleted for s in steps) == 1 and sum(s.runs_deleted for s in steps) == 1
    assert await store.get_job(JOB) is None
    assert references(sync_client(store), store.keys.namespace, [JOB]) == []


def sync_client(store: RedisStore) -> redis.Redis:
    kwargs = store.redis.connection_pool.connection_kwargs
    return redis.Redis(host=kwargs.get("host", "localhost"), port=kwargs["port"])


async def test_a_deleted_job_is_gone_at_once_and_purged_in_small_steps_leaving_nothing(store: RedisStore) -> None:
    retry = pb.RetryPolicy(max_attempts=2)
    retry.initial_backoff.FromMilliseconds(1)
    spec = every_second()
    spec.retry.CopyFrom(retry)
    spec.split.max_concurrent = 1
    await store.submit_many([NewJob(JOB, spec, "abs", 4_000_000_000_000)], 60_000)
    await store.redis.sadd(store.keys.bundle_jobs("d" * 64), JOB)
    other = "j0000000000200000000002"
    other_spec = await recurring_job(store, other)
    kept = await ended_run(store, other, other_spec, 1_000)
    await ended_run(store, JOB, spec, 1_000)
    failed = await ended_run(store, JOB, spec, 2_000, outcome="FAILED")  # a retry is due
    await wait_time(store, (await store.get_task(f"{failed}.00000")).not_before_ms + 1)  # type: ignore[union-attr]
    assert await store.release_due(10, [f"{failed}.00000"]) == [(f"{failed}.00000", "default")]
    await store.claim("default", [(f"{failed}.00000", "w2")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    assert await store.redis.exists(store.keys.attempts(f"{failed}.00000"))  # its first attempt, archived
    split = await fire(store, JOB, spec, 3_000, tasks=3)  # capped: two tasks wait in its gate
    status, active = await store.delete_job(JOB)
    assert (status, active) == ("active", sorted([failed, split]))
    await store.cancel("stop", job_id=JOB, run_ids=[failed, split],
                       task_ids=[f"{failed}.00000", *(f"{split}.{i:05d}" for i in range(3))])
    assert await store.delete_job(JOB, ["d" * 64]) == ("ok", [])
    assert await store.get_job(JOB) is None
    assert [j.id for j in await store.list_jobs(10)] == [other]
    assert await store.delete_job(JOB) == ("missing", [])
    assert references(sync_client(store), store.keys.namespace, [JOB])  # its runs, tasks, attempts, runs index
    steps = await purge_all(store, RetentionBounds(keep_runs=1000, max_age_ms=86_400_000, jobs_per_step=100,
                                                   budget=3))
    assert len(steps) >= 3 and sum(s.runs_deleted for s in steps) == 3
    assert all(s.keys_deleted <= 4 for s in steps)  # the budget, and at most one run's last step beyond it
    assert references(sync_client(store), store.keys.namespace, [JOB]) == []
    assert await run_ids(store, other) == [kept]


async def test_a_deposed_masters_retention_and_delete_calls_are_fenced(store: RedisStore) -> None:
    spec = await recurring_job(store)
    await ended_run(store, JOB, spec, 1_000)
    await ended_run(store, JOB, spec, 2_000)
    await store.redis.incr(store.keys.epoch)  # another master took over
    with pytest.raises(Fenced):
        await store.purge_history(0, RetentionBounds(keep_runs=1, max_age_ms=0, jobs_per_step=100, budget=500))
    with pytest.raises(Fenced):
        await store.delete_job(JOB)
    assert len(await run_ids(store)) == 2 and await store.get_job(JOB) is not None


# ---- a real master ------------------------------------------------------------------------------------------

TASKS = EXAMPLES / "tasks.py"


def master_with(cluster: Cluster, root: Path, retention_interval: str, *flags: str) -> None:
    """Start the cluster's master with this retention interval (a config file setting) and ``flags``."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "master.toml"
    config.write_text(f'[master]\nretention_interval_s = "{retention_interval}"\n')
    cluster.start_master("--config", str(config), *flags)


def cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKYARD_")}
    return subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address, *args],
                          capture_output=True, text=True, env=env, timeout=60)


def test_a_deleted_job_is_not_found_and_its_preloaded_firing_never_happens(
        make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = make_cluster()
    # Retention rests an hour after its first pass: a run the deleted job's timer created would stay visible.
    master_with(cluster, tmp_path, "1h")
    client = cluster.client()
    job = client.submit(f"{TASKS}:noop", delay="2s")  # due within the preload horizon: armed in the wheel
    due = job.next_fire_at.ToMilliseconds() / 1000
    assert client.delete(job.id) == []
    with pytest.raises(NotFound):
        client.job(job.id)
    assert job.id not in [j.id for j in client.jobs()]
    with pytest.raises(NotFound):
        client.delete(job.id)
    wait_for(lambda: time.time() > due + 1.5, 30, "the deleted job's fire time to pass")
    r = redis.Redis.from_url(cluster.redis_url, decode_responses=True)
    assert list(r.scan_iter(match=f"{cluster.namespace}:run:{job.id}*")) == []
    assert not r.exists(f"{cluster.namespace}:job:{job.id}:runs")


def test_a_job_with_an_active_run_is_deleted_only_with_force_which_cancels_it(
        make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = make_cluster()
    master_with(cluster, tmp_path, "0.2s")
    client = cluster.client()
    job = client.submit(f"{TASKS}:noop")  # no worker: its run stays SCHEDULED
    run_id = first_run_id(job)
    with pytest.raises(FailedPrecondition, match=f"active run {run_id}"):
        client.delete(job.id)
    refused = cli(cluster, "delete", job.id)
    assert refused.returncode == 1 and run_id in refused.stderr and "--force" in refused.stderr
    forced = cli(cluster, "delete", job.id, "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert run_id in json.loads(forced.stdout)["cancelled"]
    with pytest.raises(NotFound):
        client.job(job.id)
    gone = cli(cluster, "delete", job.id)
    assert gone.returncode == 1 and "not found" in gone.stderr
    r = redis.Redis.from_url(cluster.redis_url)
    wait_for(lambda: not references(r, cluster.namespace, [job.id]), 30, "the deleted job's history to be purged")


def test_the_masters_retention_loop_keeps_a_1s_jobs_newest_runs_and_its_active_one(
        make_cluster: Callable[..., Cluster], tmp_path: Path) -> None:
    cluster = make_cluster()
    master_with(cluster, tmp_path, "0.2s", "--keep-runs", "3")
    client = cluster.client()
    # No worker: the first run stays active, and with overlap forbid every later firing is a SKIPPED run.
    job = client.submit(f"{TASKS}:noop", every="1s", overlap="forbid")

    first_ms = job.next_fire_at.ToMilliseconds()

    def trimmed() -> bool:
        last = client.job(job.id).last_run_id  # job id + scheduled ms: how far the 1 s firings got
        fired = (int(last.rsplit(".", 1)[1]) - first_ms) // 1000 + 1 if last else 0
        return fired >= 7 and len(client.runs(job.id, limit=1000)) <= 4

    wait_for(trimmed, 60, "retention to trim the job to 3 ended runs and its active one")
    runs = client.runs(job.id, limit=1000)
    active = [r for r in runs if r.state == pb.RUN_SCHEDULED]
    assert len(active) == 1 and active[0].scheduled_at.ToMilliseconds() == min(r.scheduled_at.ToMilliseconds()
                                                                                 for r in runs)
    client.delete(job.id, force=True)
