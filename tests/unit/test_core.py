"""The master's outcomes (master/outcomes.py) on a RedisStore timed by a FakeClock: what a cancel, an expired
lease and a worker's result do to a worker's slots and to the tasks — no gRPC, no waiting."""

from __future__ import annotations

import asyncio

import pytest

from sparkyard import ids
from clocked_store import ClockedStores, settle
from master_rig import MasterRig
from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.registry import WorkerSession
from sparkyard.master.store_values import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

CFG = MasterConfig(lease_s=10, heartbeat_s=1, max_lost=3)
JOB = "j000000000000000000001"


class Rig(MasterRig):
    def __init__(self, clock: FakeClock, store: RedisStore) -> None:
        super().__init__(clock, store, CFG)
        self.reports = self.master.reports
        self.worker = WorkerSession("w1", "default", 1, "host", 1, {}, pb.RUNNER_UNSPECIFIED, self.clock.now(),
                                    self.clock.monotonic(), asyncio.Queue(maxsize=100))
        self.master.registry.add(self.worker)

    async def submit(self, **spec: object) -> str:
        """A job fired at submit with one task; returns the task id."""
        at = int(self.clock.now() * 1000)
        norm = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", **spec))  # type: ignore[arg-type]
        await self.store.submit_many([NewJob(JOB, norm, "abs", at, fire_now=[[]])], 60_000)
        self.run_id = ids.run_id(JOB, at)
        return ids.task_id(self.run_id, 0)

    async def dispatch(self) -> pb.TaskAssignment:
        await self.master.scheduler.dispatch_round()
        (assignment,) = self.messages("batch")[0].batch.tasks
        return assignment

    def messages(self, kind: str) -> list[pb.MasterMessage]:
        out = []
        while not self.worker.outbound.empty():
            message = self.worker.outbound.get_nowait()
            if message.WhichOneof("kind") == kind:
                out.append(message)
        return out

    def result(self, a: pb.TaskAssignment, outcome: int) -> None:
        """The worker reports the attempt's end (the slot is freed on receipt, before the write)."""
        self.reports.accept("w1", pb.Reports(results=[pb.TaskResult(task_id=a.task_id, fencing_token=a.fencing_token,
                                                                    outcome=outcome)]))

    async def state(self, task_id: str) -> TaskState:
        task = await self.store.get_task(task_id)
        assert task is not None
        return task.state


@pytest.fixture
async def rig(clocked_stores: ClockedStores) -> Rig:
    clock = FakeClock()
    return Rig(clock, await clocked_stores.make(clock))


async def test_a_cancelled_task_keeps_its_slot_until_the_worker_reports_its_end(rig: Rig) -> None:
    task_id = await rig.submit()
    a = await rig.dispatch()
    await rig.outcomes.cancel_runs([rig.run_id], "user")
    (cancel,) = rig.messages("cancel")
    assert cancel.cancel.task_id == task_id and cancel.cancel.fencing_token == a.fencing_token
    assert await rig.state(task_id) is TaskState.CANCELLED
    assert rig.worker.leased == {task_id: a.fencing_token} and rig.master.registry.idle_slots("default") == 0
    rig.result(a, pb.ATTEMPT_CANCELLED)
    assert rig.worker.leased == {} and rig.master.registry.idle_slots("default") == 1


async def test_an_expired_lease_is_requeued_but_its_slot_is_freed_only_by_the_worker(rig: Rig) -> None:
    task_id = await rig.submit()
    a = await rig.dispatch()
    rig.clock.advance(CFG.lease_s + 1)
    rig.outcomes.apply_reaped(await rig.store.reap_expired(CFG.max_lost))
    assert await rig.state(task_id) is TaskState.READY
    (cancel,) = rig.messages("cancel")
    assert cancel.cancel.fencing_token == a.fencing_token  # a hung worker is told to stop that attempt
    assert rig.master.registry.idle_slots("default") == 0
    assert not await rig.master.scheduler.dispatch_round()  # the slot is still taken: nothing is sent
    rig.result(a, pb.ATTEMPT_RELEASED)  # the killed attempt's end (refused as stale, the slot freed)
    b = await rig.dispatch()
    assert b.task_id == task_id and b.fencing_token > a.fencing_token


async def test_a_late_result_of_an_older_attempt_leaves_the_newer_attempts_slot_taken(rig: Rig) -> None:
    task_id = await rig.submit()
    a = await rig.dispatch()
    rig.clock.advance(CFG.lease_s + 1)
    rig.outcomes.apply_reaped(await rig.store.reap_expired(CFG.max_lost))
    rig.worker.leased.clear()  # the worker reconnected without the old attempt
    b = await rig.dispatch()
    rig.result(a, pb.ATTEMPT_SUCCEEDED)
    assert rig.worker.leased == {task_id: b.fencing_token}


async def test_a_failed_attempt_with_retries_left_is_released_after_its_backoff(rig: Rig) -> None:
    retry = pb.RetryPolicy(max_attempts=2, initial_backoff={"seconds": 5})
    task_id = await rig.submit(retry=retry)
    a = await rig.dispatch()
    rig.outcomes.apply_verdicts(await rig.store.report([Report(a.task_id, a.fencing_token, "FAILED", error="boom")]))
    assert await rig.state(task_id) is TaskState.FAILED
    rig.clock.advance(4.0)
    await settle(rig.store)
    assert await rig.state(task_id) is TaskState.FAILED
    rig.clock.advance(2.0)
    await settle(rig.store)  # the release is one store call on this loop
    assert await rig.state(task_id) is TaskState.READY
