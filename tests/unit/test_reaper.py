"""Reaper on a RedisStore timed by a FakeClock, and its own timer: expired leases, poison tasks, missed
retries, silent workers — no gRPC, no waiting."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Awaitable, Iterable

import pytest

from clocked_store import ClockedStores
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.master import reaper as reaper_module
from sparkyard.master.reaper import Reaper
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.registry import WorkerRegistry, WorkerSession
from sparkyard.master.store import NewJob, Reaped, Report
from sparkyard.master.timer import SystemTimer
from sparkyard.spec import normalize
from sparkyard.states import RunState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

LEASE_MS = 10_000
CFG = MasterConfig(lease_s=10, heartbeat_s=1, dead_after_heartbeats=3, reaper_interval_s=2, max_lost=2)
JOB = "j" + "0" * 20 + "1"


@dataclass
class Host:
    """The parts of a master core the reaper uses; what it is told is recorded."""

    cfg: MasterConfig
    store: RedisStore
    registry: WorkerRegistry
    timer: SystemTimer
    reaped: list[Reaped] = field(default_factory=list)
    wakes: int = 0
    background: list[asyncio.Future[None]] = field(default_factory=list)

    def spawn(self, coro: Awaitable[None], name: str) -> None:
        self.background.append(asyncio.ensure_future(coro))

    def apply_reaped(self, reaped: Iterable[Reaped]) -> None:
        self.reaped.extend(reaped)

    def wake(self) -> None:
        self.wakes += 1


class Rig:
    def __init__(self, clock: FakeClock, store: RedisStore) -> None:
        self.clock = clock
        self.store = store
        self.registry = WorkerRegistry(self.clock, on_capacity=lambda: None)
        self.host = Host(CFG, self.store, self.registry, SystemTimer(self.clock))
        self.dead: list[str] = []

        async def on_worker_dead(worker_id: str) -> None:
            self.dead.append(worker_id)

        self.reaper = Reaper(self.host, on_worker_dead)

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
    assert rig.host.reaped == [] and await rig.state(task_id) is TaskState.LEASED
    rig.advance_ms(2)
    await rig.reaper.sweep()
    assert [(r.task_id, r.what, r.task_state, r.worker) for r in rig.host.reaped] == [(task_id, "lost", "READY", "w1")]
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
    assert [r.task_state for r in rig.host.reaped] == ["READY"] * CFG.max_lost + ["DEAD"]
    assert rig.host.reaped[-1].run_state == RunState.FAILED.value
    run = await rig.store.get_run(ids.run_id(JOB, 1_000), with_tasks=False)
    assert run is not None and run.state is RunState.FAILED


async def test_a_sweep_releases_retries_whose_backoff_ended_and_wakes_the_scheduler(
        clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    policy = pb.RetryPolicy(max_attempts=2, multiplier=2.0)
    policy.initial_backoff.FromSeconds(5)
    policy.max_backoff.FromSeconds(60)
    (task_id,) = await rig.leased(retry=policy)
    task = await rig.store.get_task(task_id)
    assert task is not None
    await rig.store.report([Report(task_id, task.token, "FAILED", error="boom")])
    await rig.reaper.sweep()
    assert rig.host.wakes == 0 and await rig.state(task_id) is TaskState.FAILED
    rig.advance_ms(5_001)
    await rig.reaper.sweep()
    assert rig.host.wakes == 1 and await rig.state(task_id) is TaskState.READY


async def test_one_sweep_reaps_more_expired_leases_than_one_batch(monkeypatch: pytest.MonkeyPatch,
                                                                  clocked_stores: ClockedStores) -> None:
    monkeypatch.setattr(reaper_module, "REAP_BATCH", 2)
    rig = await Rig.make(clocked_stores)
    task_ids = await rig.leased(tasks=5)
    rig.advance_ms(LEASE_MS + 1)
    await rig.reaper.sweep()
    assert sorted(r.task_id for r in rig.host.reaped) == task_ids
    assert [await rig.state(t) for t in task_ids] == [TaskState.READY] * 5


def connect(rig: Rig, worker_id: str) -> WorkerSession:
    session = WorkerSession(worker_id, "default", 1, "host", 1, {}, pb.RUNNER_UNSPECIFIED, rig.clock.now(),
                            rig.clock.monotonic(), asyncio.Queue())
    rig.registry.add(session)
    return session


async def test_a_worker_silent_for_too_many_heartbeats_is_closed_and_reported_dead(
        clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    quiet, chatty = connect(rig, "quiet"), connect(rig, "chatty")
    silence_ms = int(CFG.heartbeat_s * CFG.dead_after_heartbeats * 1000)
    rig.advance_ms(silence_ms)
    rig.registry.touch(chatty)
    rig.advance_ms(1)
    await rig.reaper.sweep()
    assert rig.dead == ["quiet"] and quiet.closed.is_set() and rig.registry.get("quiet") is None
    assert rig.registry.get("chatty") is chatty and not chatty.closed.is_set()


async def test_the_reaper_sweeps_every_interval_on_its_timer_until_stopped(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    rig.host.timer.start()
    rig.reaper.start()
    interval_ms = int(CFG.reaper_interval_s * 1000)
    try:
        rig.advance_ms(interval_ms - 1)
        assert rig.host.background == []
        for expected in (1, 2):
            rig.advance_ms(interval_ms)
            await asyncio.gather(*rig.host.background)  # the sweep the timer started, and its re-arming
            assert rig.reaper.sweeps == expected
        rig.reaper.stop()
        rig.advance_ms(10 * interval_ms)
        assert len(rig.host.background) == 2 and rig.reaper.sweeps == 2
    finally:
        rig.reaper.stop()
        rig.host.timer.close()
