"""The Lua scripts' invariants, called through the Store against a real Redis (one namespace per test)."""

from __future__ import annotations

import itertools
from typing import AsyncIterator

import pytest
from redis.asyncio import Redis

from harness import RedisServer
from sparkyard import ids
from sparkyard.keys import Keys
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.v1 import sparkyard_pb2 as pb

_ns = itertools.count(1)
LEASE_MS = 60_000


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    redis = Redis(port=redis_server.port, decode_responses=True)
    yield RedisStore(redis, Keys(f"st{next(_ns)}"))
    await redis.aclose()


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


async def test_a_new_job_never_overwrites_one_with_the_same_id(store: RedisStore) -> None:
    first = NewJob("j0000000000100000000001", spec(name="first"), "delay", 0)
    second = NewJob("j0000000000100000000001", spec(name="second"), "delay", 0)
    (a,) = await store.submit_many([first], 60_000)
    (b,) = await store.submit_many([second], 60_000)
    assert not a.id_taken and b.id_taken
    job = await store.get_job(first.job_id)
    assert job is not None and job.spec.name == "first"


async def test_a_stale_token_cannot_complete_and_a_terminal_task_never_changes(store: RedisStore) -> None:
    task_id, token, run_id = await leased_task(store)
    (stale,) = await store.report([Report(task_id, token - 1, "SUCCEEDED", result_json='"old"')])
    assert stale.verdict == "stale"
    (ok,) = await store.report([Report(task_id, token, "SUCCEEDED", result_json='"new"')])
    assert ok.verdict == "accepted" and ok.run_state == "SUCCEEDED"
    (again,) = await store.report([Report(task_id, token, "FAILED", error="late")])
    assert again.verdict == "terminal"
    task = await store.get_task(task_id)
    assert task is not None and task.result == '"new"' and task.state.value == "SUCCEEDED"


@pytest.mark.parametrize("offset_ms, expect", [(-500, "worker"), (0, "redis"), (60_000, "redis")])
async def test_an_attempt_ends_at_the_workers_finish_time_within_its_start_and_now(
        store: RedisStore, offset_ms: int, expect: str) -> None:
    """The worker's finish time is recorded (its slot may be re-leased before the report is written), but
    never later than Redis' now or earlier than the attempt's start; offset 0 = the worker sent none."""
    task_id, token, _ = await leased_task(store)
    before = await store.time_ms()
    finished = before + offset_ms if offset_ms else 0
    (ok,) = await store.report([Report(task_id, token, "SUCCEEDED", started_ms=before - 1_000, finished_ms=finished)])
    after = await store.time_ms()
    task = await store.get_task(task_id)
    assert ok.verdict == "accepted" and task is not None
    recorded = task.attempts[-1].finished_ms
    if expect == "worker":
        assert recorded == finished
    else:
        assert before <= recorded <= after


async def test_a_finish_time_before_the_attempts_start_is_raised_to_the_start(store: RedisStore) -> None:
    task_id, token, _ = await leased_task(store)
    now = await store.time_ms()
    (ok,) = await store.report([Report(task_id, token, "FAILED", error="x", started_ms=now - 100,
                                       finished_ms=now - 5_000)])
    task = await store.get_task(task_id)
    assert ok.verdict == "accepted" and task is not None and task.attempts[-1].finished_ms == now - 100


async def test_renewal_needs_the_current_token_and_worker(store: RedisStore) -> None:
    task_id, token, _ = await leased_task(store)
    wrong_worker = await store.renew("w2", [(task_id, token)], LEASE_MS)
    assert wrong_worker.lost == [(task_id, token)] and not wrong_worker.renewed
    right = await store.renew("w1", [(task_id, token), (task_id, token + 1)], LEASE_MS)
    assert right.renewed == [(task_id, token)] and right.lost == [(task_id, token + 1)]


async def test_cancel_of_a_leased_task_leaves_no_index_behind(store: RedisStore) -> None:
    task_id, token, run_id = await leased_task(store)
    result = await store.cancel("stop", run_ids=[run_id], task_ids=[task_id])
    assert result.leased == [(task_id, "w1", token)] and result.ended_runs == [(run_id, "CANCELLED")]
    k, r = store.keys, store.redis
    assert await r.zscore(k.leases, task_id) is None
    assert not await r.sismember(k.worker_leases("w1"), task_id)
    assert await r.zscore(k.ready("default"), task_id) is None
    (late,) = await store.report([Report(task_id, token, "SUCCEEDED")])
    assert late.verdict == "terminal"


async def test_a_retry_waits_for_its_backoff_and_gets_a_higher_token(store: RedisStore) -> None:
    retry = pb.RetryPolicy(max_attempts=2)
    retry.initial_backoff.FromMilliseconds(300)
    task_id, token, _ = await leased_task(store, retry=retry)
    (failed,) = await store.report([Report(task_id, token, "FAILED", error="boom")])
    assert failed.task_state == "FAILED" and failed.not_before_ms > 0
    assert await store.release_due(10, [task_id]) == []  # backoff not over (Redis TIME decides)
    now = await store.time_ms()
    await store.redis.zadd(store.keys.delayed, {task_id: now - 1})  # move the due time into the past
    assert await store.release_due(10, [task_id]) == [(task_id, "default")]
    (claim,) = await store.claim("default", [(task_id, "w2")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    assert claim.token > token and claim.attempt == 2


async def test_an_expired_lease_is_requeued_once_and_lost_attempts_are_recorded(store: RedisStore) -> None:
    task_id, token, _ = await leased_task(store)
    now = await store.time_ms()
    await store.redis.zadd(store.keys.leases, {task_id: now - 1})  # the lease has run out
    first = await store.reap_expired(max_lost=3)
    second = await store.reap_expired(max_lost=3)
    assert [r.task_state for r in first] == ["READY"] and second == []
    task = await store.get_task(task_id)
    assert task is not None and [a.state.value for a in task.attempts] == ["LOST"]
    assert task.prev_worker == "w1"


async def test_a_task_lost_more_than_max_lost_times_is_dead(store: RedisStore) -> None:
    task_id, _, run_id = await leased_task(store)
    for _ in range(2):
        now = await store.time_ms()
        await store.redis.zadd(store.keys.leases, {task_id: now - 1})
        reaped = await store.reap_expired(max_lost=1)
        if reaped[0].task_state == "READY":
            await store.claim("default", [(task_id, "w1")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    assert reaped[0].task_state == "DEAD" and reaped[0].run_state == "FAILED"


async def test_attempt_history_keeps_every_attempt_when_the_latest_lives_in_the_task_hash(store: RedisStore) -> None:
    retry = pb.RetryPolicy(max_attempts=3)
    retry.initial_backoff.FromMilliseconds(1)
    timeout = pb.JobSpec().timeout
    timeout.FromSeconds(30)
    task_id, token, _ = await leased_task(store, retry=retry, timeout=timeout)
    k, r = store.keys, store.redis
    assert await r.zscore(k.timeouts, task_id) is not None  # the run's timeout is watched by the master
    (failed,) = await store.report([Report(task_id, token, "FAILED", error="boom", traceback="Traceback: boom",
                                           started_ms=5, log_path="/logs/a1.log")])
    assert failed.task_state == "FAILED"
    assert await r.zscore(k.timeouts, task_id) is None and not await r.exists(k.attempts(task_id))
    await r.zadd(k.delayed, {task_id: await store.time_ms() - 1})
    assert await store.release_due(10, [task_id]) == [(task_id, "default")]
    (second,) = await store.claim("default", [(task_id, "w2")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    running = await store.get_task(task_id)
    assert running is not None
    assert [(a.number, a.state.value, a.worker, a.token) for a in running.attempts] == [
        (1, "FAILED", "w1", token), (2, "RUNNING", "w2", second.token)]
    assert running.attempts[0].error == "boom" and running.attempts[0].traceback == "Traceback: boom"
    assert running.attempts[0].log_path == "/logs/a1.log" and running.attempts[0].started_ms == 5
    assert running.attempts[1].error == "" and running.attempts[1].log_path == ""  # nothing carried over
    (ok,) = await store.report([Report(second.task_id, second.token, "SUCCEEDED", result_json='{"rows": 3}')])
    assert ok.run_state == "SUCCEEDED"
    done = await store.get_task(task_id)
    assert done is not None
    assert [(a.number, a.state.value, a.worker, a.result) for a in done.attempts] == [
        (1, "FAILED", "w1", ""), (2, "SUCCEEDED", "w2", '{"rows": 3}')]
    assert done.attempts[1].finished_ms >= done.attempts[1].leased_ms > 0
    assert await r.hlen(k.attempts(task_id)) == 1  # only the earlier attempt was archived


async def test_a_one_shot_job_without_options_stores_no_default_settings(store: RedisStore) -> None:
    task_id, token, run_id = await leased_task(store)
    run_fields = set(await store.redis.hkeys(store.keys.run(run_id)))
    assert not run_fields & {"max_attempts", "backoff_ms", "timeout_ms", "max_concurrent"}
    assert not await store.redis.hexists(store.keys.task(task_id), "inputs")
    (failed,) = await store.report([Report(task_id, token, "FAILED", error="boom")])
    assert failed.task_state == "DEAD" and failed.run_state == "FAILED"  # absent max_attempts = 1


async def test_runs_sharing_one_block_get_task_ids_built_like_ids_task_id(store: RedisStore) -> None:
    s = spec()
    inputs = [[pb.SplitInput(value=v, mark=m)] for v, m in [("a", ""), ("b", "m"), ("c", "")]]
    jobs = [NewJob(f"j00000000001000000000{n}", s, "abs", 1_000, fire_now=inputs) for n in range(2)]
    results = await store.submit_many(jobs, 60_000)  # one spec, one block: sent once for both jobs
    assert [r.fired for r in results] == [True, True]
    for job in jobs:
        run = await store.get_run(ids.run_id(job.job_id, 1_000))
        assert run is not None and run.task_count == 3
        assert [t.id for t in run.tasks] == [ids.task_id(run.id, i) for i in range(3)]
        assert [[(i.value, i.mark) for i in t.inputs] for t in run.tasks] == [[("a", "")], [("b", "m")], [("c", "")]]


async def test_awaiting_among_names_only_jobs_in_the_awaiting_set(store: RedisStore) -> None:
    await store.redis.sadd(store.keys.awaiting, "j0000000000100000000001", "j0000000000100000000003")
    found = await store.awaiting_among(["j0000000000100000000001", "j0000000000100000000002",
                                        "j0000000000100000000003"])
    assert found == ["j0000000000100000000001", "j0000000000100000000003"]
    assert await store.awaiting_among([]) == []
