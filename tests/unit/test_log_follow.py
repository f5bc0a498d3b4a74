"""``sparkyard logs TASK -f`` on a task still queued waits for its first attempt (it failed with "has not
started yet"), and ends with one line if the task ends without ever starting; an attempt handed back
(RELEASED) makes it wait for the next one (it ended at once). After an attempt that failed, the follow
waits for the retry, and ends when the task has ended without one."""

from __future__ import annotations

import asyncio

import pytest

from master_rig import MasterRig
from sparkyard import errors, ids
from sparkyard.master.logs import START_POLL_S
from sparkyard.master.records import TaskRecord
from sparkyard.master.store_values import Report
from sparkyard.v1 import sparkyard_pb2 as pb
from test_job_names import rig  # noqa: F401 - the same rig fixture


async def queued_task(rig: MasterRig) -> str:
    made = await rig.master.jobs.submit(pb.JobSpec(name="q", entrypoint="/jobs/x.py:main", trigger=pb.Trigger(now=True)))
    return ids.task_id(made.job.last_run_id, 0)


async def polling(rig: MasterRig, waiter: asyncio.Task[object], before: int) -> None:
    """Until the waiter sleeps on the rig's clock between two looks (10 s of real time at most)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while rig.clock.pending <= before and not waiter.done():
        assert loop.time() < deadline, "the follow never waited for the task to start"
        await asyncio.sleep(0.005)


async def followed_until_claimed(rig: MasterRig, task_id: str, worker: str) -> TaskRecord:
    """Follow the task's log, see the follow wait, then let ``worker`` claim it: what the follow returns."""
    before = rig.clock.pending
    waiter = asyncio.create_task(rig.master.logs.started_task(task_id))
    await polling(rig, waiter, before)
    assert not waiter.done()
    await rig.store.claim("default", [(task_id, worker)], lease_ms=60_000, timeout_grace_ms=0)
    rig.clock.advance(START_POLL_S)
    return await asyncio.wait_for(waiter, 10)


async def test_a_followed_log_waits_for_the_first_attempt_of_a_queued_task(rig: MasterRig) -> None:
    task_id = await queued_task(rig)
    task = await followed_until_claimed(rig, task_id, "w1")
    assert task.id == task_id and [a.worker for a in task.attempts] == ["w1"]


async def test_a_followed_log_of_a_task_cancelled_before_it_started_ends_with_one_line(rig: MasterRig) -> None:
    task_id = await queued_task(rig)
    before = rig.clock.pending
    waiter = asyncio.create_task(rig.master.logs.started_task(task_id))
    await polling(rig, waiter, before)
    assert task_id in await rig.master.jobs.cancel(task_id)
    rig.clock.advance(START_POLL_S)
    with pytest.raises(errors.NotFound, match=f"task {task_id} ended CANCELLED without starting"):
        await asyncio.wait_for(waiter, 10)


async def test_a_followed_log_of_a_task_handed_back_waits_for_its_next_attempt(rig: MasterRig) -> None:
    task_id = await queued_task(rig)
    (first,) = await rig.store.claim("default", [(task_id, "w1")], lease_ms=60_000, timeout_grace_ms=0)
    await rig.store.report([Report(task_id, first.token, "RELEASED", error="draining")])
    task = await followed_until_claimed(rig, task_id, "w2")
    assert [a.worker for a in task.attempts][-1] == "w2" and task.attempts[-1].number == 2


async def retried_task(rig: MasterRig, max_attempts: int) -> tuple[str, int]:
    """A task whose first attempt failed: (its id, its first attempt's fencing token)."""
    spec = pb.JobSpec(name="r", entrypoint="/jobs/x.py:main", trigger=pb.Trigger(now=True))
    spec.retry.max_attempts = max_attempts
    spec.retry.initial_backoff.FromMilliseconds(1)
    made = await rig.master.jobs.submit(spec)
    task_id = ids.task_id(made.job.last_run_id, 0)
    (first,) = await rig.store.claim("default", [(task_id, "w1")], lease_ms=60_000, timeout_grace_ms=0)
    await rig.store.report([Report(task_id, first.token, "FAILED", error="boom")])
    return task_id, first.token


async def test_a_log_followed_across_retries_waits_for_the_next_attempt(rig: MasterRig) -> None:
    task_id, _ = await retried_task(rig, 2)
    before = rig.clock.pending
    waiter = asyncio.create_task(rig.master.logs.next_attempt(task_id, 1))
    await polling(rig, waiter, before)
    assert not waiter.done()  # the retry waits for its backoff
    rig.clock.advance(START_POLL_S)  # the backoff (1 ms) is over
    assert [r.task_id for r in await rig.store.release_due(task_ids=[task_id])] == [task_id]
    await rig.store.claim("default", [(task_id, "w2")], lease_ms=60_000, timeout_grace_ms=0)
    # Its next look may still be on its way (a loaded machine): the clock moves on until the waiter has looked.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while not waiter.done():
        assert loop.time() < deadline, "the follow never saw the second attempt"
        rig.clock.advance(START_POLL_S)
        await asyncio.sleep(0.01)
    task, number = waiter.result()  # type: ignore[misc]
    assert number == 2 and task.attempts[-1].worker == "w2"


async def test_a_log_followed_across_retries_ends_when_the_task_ended_without_one(rig: MasterRig) -> None:
    task_id, _ = await retried_task(rig, 1)  # no retry: the failed attempt was its last, the task is DEAD
    assert await asyncio.wait_for(rig.master.logs.next_attempt(task_id, 1), 10) is None
