"""What only the memory store checks: arguments the Lua scripts would take without a word."""

from __future__ import annotations

import pytest

from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.memory_store import MemoryStore
from sparkyard.master.sorted_set import SortedSet
from sparkyard.master.store import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import JobState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

JOB = "j" + "0" * 20 + "1"


async def leased(store: MemoryStore) -> tuple[str, int]:
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main"))
    await store.submit_many([NewJob(JOB, spec, "abs", 1_000, fire_now=[()])], 60_000)
    task_id = ids.task_id(ids.run_id(JOB, 1_000), 0)
    (claim,) = await store.claim("default", [(task_id, "w1")], lease_ms=10_000, timeout_grace_ms=0)
    return task_id, claim.token


async def test_an_unknown_report_outcome_is_refused_before_any_report_is_applied() -> None:
    store = MemoryStore(FakeClock())
    task_id, token = await leased(store)
    with pytest.raises(ValueError, match="'DONE' is not one of"):
        await store.report([Report(task_id, token, "SUCCEEDED"), Report(task_id, token, "DONE")])
    task = await store.get_task(task_id)
    assert task is not None and task.state is TaskState.LEASED


@pytest.mark.parametrize("target", [JobState.COMPLETED, JobState.CANCELLED])
async def test_a_job_state_change_other_than_pause_or_resume_is_refused(target: JobState) -> None:
    store = MemoryStore(FakeClock())
    with pytest.raises(ValueError, match=f"not {target.value}"):
        await store.set_job_state(JOB, target)


async def test_an_idempotency_key_needs_a_positive_ttl() -> None:
    store = MemoryStore(FakeClock())
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main"))
    with pytest.raises(ValueError, match="TTL must be positive"):
        await store.submit_many([NewJob(JOB, spec, "delay", 0, idempotency_key="k")], 0)
    assert await store.get_job(JOB) is None


def test_a_sorted_set_orders_by_score_then_member_like_a_redis_zset() -> None:
    zset = SortedSet()
    for member, score in [("b", 2), ("a", 2), ("c", 1), ("d", 5)]:
        zset.add(member, score)
    zset.add("d", 0)  # moves
    assert zset.items() == [("d", 0), ("c", 1), ("a", 2), ("b", 2)]
    assert zset.upto(2, 10) == [("d", 0), ("c", 1), ("a", 2), ("b", 2)] and zset.upto(1, 1) == [("d", 0)]
    assert zset.first(2) == ["d", "c"] and zset.items(reverse=True)[0] == ("b", 2)
    assert zset.pop_first() == "d" and zset.remove("a") and not zset.remove("a")
    assert len(zset) == 2 and "b" in zset and zset.score("c") == 1
