"""Reaper on a RedisStore timed by a FakeClock, and its own timer: expired leases, poison tasks, silent
workers; and the retries' sweep of due backoffs — no gRPC, no waiting."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Iterable

import pytest

from clocked_store import ClockedStores, settle
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.master import reaper as reaper_module
from sparkyard.master.events import Events, WorkReady
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.reaper import Reaper
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.registry import WorkerRegistry, WorkerSession
from sparkyard.master.retries import Retries
from sparkyard.master.store_values import NewJob, Reaped, Report
from sparkyard.master.timer import SystemTimer
from sparkyard.spec import normalize
from sparkyard.states import RunState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

LEASE_MS = 10_000
CFG = MasterConfig(lease_s=10, heartbeat_s=1, dead_after_heartbeats=3, reaper_interval_s=2, max_lost=2)
JOB = "j" + "0" * 20 + "1"


class RecordingOutcomes(Outcomes):
    """The master's outcomes, also keeping what the reaper handed them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.reaped: list[Reaped] = []

    def apply_reaped(self, reaped: Iterable[Reaped]) -> None:
        reaped = list(reaped)
        self.reaped.extend(reaped)
        super().apply_reaped(reaped)


class Spawned:
    """Background work the reaper's timer starts, kept to be awaited."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Future[None]] = []

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        self.tasks.append(asyncio.ensure_future(coro))


class Rig:
    def __init__(self, clock: FakeClock, store: RedisStore) -> None:
        self.clock = clock
        self.store = store
        self.events = Events()
        self.wakes: list[WorkReady] = []
        self.events.subscribe(WorkReady, self.wakes.append)
        self.events.seal()
        self.registry = WorkerRegistry(self.clock, self.events)
        self.timer = SystemTimer(self.clock)
        self.retries = Retries(self.store, self.timer, self.clock, self.events)
        self.outcomes = RecordingOutcomes(self.store, self.registry, self.retries, self.events, MasterMetrics())
        self.background = Spawned()
        self.reaper = Reaper(self.store, self.registry, self.outcomes, self.timer, self.background, CFG)

    @classmethod
    async def make(cls, stores: ClockedStores) -> Rig:
        clock = FakeClock()
        return cls(clock, await stores.make(clock))

    def advance_ms(self, ms: int) -> None:
        self.clock.advance(ms / 1000)

    async def leased(self, tasks: int = 1, retry: pb.RetryPolicy | None = None) -> list[str]:
        """One job fired at submit, its tasks leased to w1; returns the task ids."""
        spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", retry=retry))
        await self.store.submit_many([NewJob(JOB, spec, "abs", 1_000, fire_now=[()] * tasks)], 60_000)
        task_ids = [ids.task_id(ids.run_id(JOB, 1_000), i) for i in range(tasks)]
        await self.lease(task_ids)
        return task_ids

    async def lease(self, task_ids: list[str]) -> None:
        claims = await self.store.claim("default", [(t, "w1") for t in task_ids], lease_ms=LEASE_MS,
                                        timeout_grace_ms=0)
        assert len(claims) == len(task_ids)

    async def state(self, task_id: str) -> TaskState:
        task = await self.store.get_task(task_id)
        assert task is not None
        return task.state


async def test_a_sweep_requeues_a_lease_that_ran_out_and_leaves_live_ones_alone(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    (task_id,) = await rig.leased()
    rig.advance_ms(LEASE_MS - 1)
    await rig.reaper.sweep()
    assert rig.outcomes.reaped == [] and await rig.state(task_id) is TaskState.LEASED
    rig.advance_ms(2)
    await rig.reaper.sweep()
    assert [(r.task_id, r.what, r.task_state, r.worker) for r in rig.outcomes.reaped] == [(task_id, "lost", "READY", "w1")]
    assert await rig.state(task_id) is TaskState.READY and rig.reaper.sweeps == 2


async def test_a_task_whose_lease_keeps_running_out_is_dead_after_max_lost(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    (task_id,) = await rig.leased()
    for _ in range(CFG.max_lost):
        rig.advance_ms(LEASE_MS + 1)
        await rig.reaper.sweep()
        await rig.lease([task_id])
    rig.advance_ms(LEASE_MS + 1)
    await rig.reaper.sweep()
    assert [r.task_state for r in rig.outcomes.reaped] == ["READY"] * CFG.max_lost + ["DEAD"]
    assert rig.outcomes.reaped[-1].run_state == RunState.FAILED.value
    run = await rig.store.get_run(ids.run_id(JOB, 1_000), with_tasks=False)
    assert run is not None and run.state is RunState.FAILED


async def test_a_retry_sweep_releases_retries_whose_backoff_ended_and_wakes_the_scheduler(
        clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    policy = pb.RetryPolicy(max_attempts=2, multiplier=2.0)
    policy.initial_backoff.FromSeconds(5)
    policy.max_backoff.FromSeconds(60)
    (task_id,) = await rig.leased(retry=policy)
    task = await rig.store.get_task(task_id)
    assert task is not None
    await rig.store.report([Report(task_id, task.token, "FAILED", error="boom")])
    await rig.retries.sweep()
    assert rig.wakes == [] and await rig.state(task_id) is TaskState.FAILED
    rig.advance_ms(5_001)
    await rig.retries.sweep()
    assert len(rig.wakes) == 1 and await rig.state(task_id) is TaskState.READY


async def test_one_sweep_reaps_more_expired_leases_than_one_batch(monkeypatch: pytest.MonkeyPatch,
                                                                  clocked_stores: ClockedStores) -> None:
    monkeypatch.setattr(reaper_module, "REAP_BATCH", 2)
    rig = await Rig.make(clocked_stores)
    task_ids = await rig.leased(tasks=5)
    rig.advance_ms(LEASE_MS + 1)
    await rig.reaper.sweep()
    assert sorted(r.task_id for r in rig.outcomes.reaped) == task_ids
    assert [await rig.state(t) for t in task_ids] == [TaskState.READY] * 5


def connect(rig: Rig, worker_id: str) -> WorkerSession:
    session = WorkerSession(worker_id, "default", 1, "host", 1, {}, pb.RUNNER_UNSPECIFIED, rig.clock.now(),
                            rig.clock.monotonic(), asyncio.Queue())
    rig.registry.add(session)
    return session


async def test_a_worker_silent_for_too_many_heartbeats_is_closed_and_forgotten(
        clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    quiet, chatty = connect(rig, "quiet"), connect(rig, "chatty")
    silence_ms = int(CFG.heartbeat_s * CFG.dead_after_heartbeats * 1000)
    rig.advance_ms(silence_ms)
    rig.registry.touch(chatty)
    rig.advance_ms(1)
    await rig.reaper.sweep()
    # Its connection records it dead as its stream ends (master/connection.py, the one place).
    assert quiet.closed.is_set() and rig.registry.get("quiet") is None
    assert rig.registry.get("chatty") is chatty and not chatty.closed.is_set()


async def test_the_reaper_sweeps_every_interval_on_its_timer_until_stopped(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    rig.timer.start()
    await rig.reaper.start()
    interval_ms = int(CFG.reaper_interval_s * 1000)
    try:
        rig.advance_ms(interval_ms - 1)
        assert rig.background.tasks == []
        for expected in (1, 2):
            rig.advance_ms(interval_ms)
            await asyncio.gather(*rig.background.tasks)  # the sweep the timer started, and its re-arming
            assert rig.reaper.sweeps == expected
        await rig.reaper.stop()
        rig.advance_ms(10 * interval_ms)
        assert len(rig.background.tasks) == 2 and rig.reaper.sweeps == 2
    finally:
        await rig.reaper.stop()
        rig.timer.close()


async def test_a_backoff_whose_timer_expires_after_the_leadership_stopped_releases_nothing(
        clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    rig.timer.start()
    try:
        policy = pb.RetryPolicy(max_attempts=2)
        policy.initial_backoff.FromSeconds(5)
        (task_id,) = await rig.leased(retry=policy)
        task = await rig.store.get_task(task_id)
        assert task is not None
        await rig.store.report([Report(task_id, task.token, "FAILED", error="boom")])
        rig.retries.arm(task_id, round(rig.clock.now() * 1000) + 5_000)  # as the report's outcome arms it
        await rig.retries.stop()
        rig.advance_ms(5_001)
        await settle(rig.store)
        assert rig.wakes == [] and await rig.state(task_id) is TaskState.FAILED
        await rig.retries.start()  # the next leadership arms every backoff recorded in Redis
        rig.advance_ms(1)
        await settle(rig.store)
        assert len(rig.wakes) == 1 and await rig.state(task_id) is TaskState.READY
    finally:
        rig.timer.close()
