"""SlotScheduler on a RedisStore timed by a FakeClock: no gRPC, no waiting."""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Iterable, Sequence

import pytest

from clocked_store import ClockedStores, settle
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.events import Events
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.reports import ACK_DELAY_S, ReportSink
from sparkyard.master.retries import Retries
from sparkyard.master.registry import WorkerRegistry, WorkerSession
from sparkyard.master.routing import Routable
from sparkyard.master.scheduler import ERROR_BACKOFF_S, SlotScheduler
from sparkyard.master.store_values import Claim, NewJob
from sparkyard.master.timer import SystemTimer
from sparkyard.spec import normalize
from sparkyard.states import AttemptState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

LEASE_MS = 10_000
GROUP = "default"


def job_id(n: int) -> str:
    return f"j{n:021x}"


async def submit(store: RedisStore, n: int, tasks: int = 1, priority: int = 0, at: int = 1_000) -> list[str]:
    """Job ``n`` fired at submit with ``tasks`` tasks (inputs p0, p1, …); returns the task ids."""
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", priority=priority))
    inputs = [[pb.SplitInput(value=f"p{i}")] for i in range(tasks)]
    await store.submit_many([NewJob(job_id(n), spec, "abs", at, fire_now=inputs)], 60_000)
    return [ids.task_id(ids.run_id(job_id(n), at), i) for i in range(tasks)]


def connect(registry: WorkerRegistry, clock: FakeClock, worker_id: str, slots: int) -> WorkerSession:
    session = WorkerSession(worker_id, GROUP, slots, "host", 1, {}, pb.RUNNER_UNSPECIFIED, clock.now(),
                            clock.monotonic(), asyncio.Queue(maxsize=100))
    registry.add(session)
    return session


def sent(session: WorkerSession) -> list[pb.TaskAssignment]:
    """Every task assignment queued for the worker so far (one TaskBatch per dispatch)."""
    out = []
    while not session.outbound.empty():
        out.extend(session.outbound.get_nowait().batch.tasks)
    return out


def after_claims(act: Callable[[set[str]], None]) -> type[RedisStore]:
    """A store that calls ``act`` with the ids of the workers a claim was for once it is back, before the round
    builds and sends their batch (a worker's stream closing, a heartbeat read, a reconnect in between)."""

    class AfterClaims(RedisStore):
        async def claim(self, group: str, pairs: Sequence[tuple[str, str]], *, lease_ms: int,
                        timeout_grace_ms: int) -> list[Claim]:
            claims = await super().claim(group, pairs, lease_ms=lease_ms, timeout_grace_ms=timeout_grace_ms)
            act({worker for _, worker in pairs})
            return claims

    return AfterClaims


class Rig:
    """A scheduler over a store, a registry and a fake clock (:meth:`make`: ``store_class`` may wrap the store)."""

    def __init__(self, clock: FakeClock, store: RedisStore, *, batch: int = 64,
                 on_claimed: Callable[[list[Claim]], Awaitable[None]] | None = None,
                 start_after_max_ms: int = 0) -> None:
        self.clock = clock
        self.store = store
        events = Events()
        self.registry = WorkerRegistry(self.clock, events)
        outcomes = Outcomes(store, self.registry, Retries(store, SystemTimer(clock), clock, events), events,
                            MasterMetrics())
        # Undeliverable tasks go back through the report sink, the path every report takes.
        self.reports = ReportSink(store, self.registry, outcomes, MasterMetrics(), clock, 1 << 20)
        self.scheduler = SlotScheduler(self.store, self.registry, self.clock, lease_ms=LEASE_MS, timeout_grace_ms=0,
                                       dispatch_batch=batch, undelivered=self.reports.undelivered,
                                       on_claimed=on_claimed, start_after_max_ms=start_after_max_ms)

    @classmethod
    async def make(cls, stores: ClockedStores, *, store_class: type[RedisStore] = RedisStore, batch: int = 64,
                   on_claimed: Callable[[list[Claim]], Awaitable[None]] | None = None,
                   start_after_max_ms: int = 0) -> Rig:
        clock = FakeClock()
        return cls(clock, await stores.make(clock, store_class), batch=batch, on_claimed=on_claimed,
                   start_after_max_ms=start_after_max_ms)

    async def states(self, task_ids: Sequence[str]) -> list[TaskState]:
        return [t.state for t in await self.store.get_tasks(task_ids)]


async def test_a_round_fills_exactly_the_idle_slots_and_leaves_the_rest_ready(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    tasks = await submit(rig.store, 1, tasks=5)
    w1, w2 = connect(rig.registry, rig.clock, "w1", 2), connect(rig.registry, rig.clock, "w2", 1)
    await rig.scheduler.dispatch_round()
    to_w1, to_w2 = sent(w1), sent(w2)
    assert (len(to_w1), len(to_w2)) == (2, 1) and rig.registry.idle_slots(GROUP) == 0
    assert sorted(a.task_id for a in to_w1 + to_w2) == tasks[:3]  # queue order: index order within a run
    assert await rig.states(tasks) == [TaskState.LEASED] * 3 + [TaskState.READY] * 2
    assert not await rig.scheduler.dispatch_round() and sent(w1) == [] and rig.scheduler.dispatched == 3


async def test_the_highest_priority_task_takes_the_only_idle_slot(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    (low,) = await submit(rig.store, 1, priority=0, at=1_000)
    (high,) = await submit(rig.store, 2, priority=10, at=2_000)
    w1 = connect(rig.registry, rig.clock, "w1", 1)
    await rig.scheduler.dispatch_round()
    assert [a.task_id for a in sent(w1)] == [high]
    assert await rig.states([low, high]) == [TaskState.READY, TaskState.LEASED]


async def test_an_assignment_carries_the_claims_token_attempt_spec_and_inputs(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    (task_id,) = await submit(rig.store, 1, at=5_000)
    w1 = connect(rig.registry, rig.clock, "w1", 1)
    await rig.scheduler.dispatch_round()
    (a,) = sent(w1)
    task = await rig.store.get_task(task_id)
    assert task is not None and (a.fencing_token, a.attempt) == (task.token, 1)
    assert (a.run_id, a.job_id, a.index, a.task_count) == (task.run_id, job_id(1), 0, 1)
    assert [i.value for i in a.inputs] == ["p0"] and a.spec.entrypoint == "/jobs/x.py:main"
    assert a.scheduled_at.ToMilliseconds() == 5_000 and a.lease.ToMilliseconds() == LEASE_MS
    assert w1.leased == {task_id: task.token}


async def test_a_task_of_a_run_fired_ahead_of_its_time_is_sent_to_start_at_it(clocked_stores: ClockedStores) -> None:
    """``start_after``: the time left until the run's scheduled time by the master's clock, at most the
    fire-ahead; none for a run whose time has come (a retry, a backfill, a rerun, a trigger)."""
    rig = await Rig.make(clocked_stores, start_after_max_ms=250)
    now = int(rig.clock.now() * 1000)
    soon, far, past = [await submit(rig.store, n, at=at) for n, at in ((1, now + 180), (2, now + 5_000),
                                                                            (3, now - 40))]
    w1 = connect(rig.registry, rig.clock, "w1", 3)
    await rig.scheduler.dispatch_round()
    waits = {a.task_id: (a.HasField("start_after"), a.start_after.ToMilliseconds()) for a in sent(w1)}
    assert waits == {soon[0]: (True, 180), far[0]: (True, 250), past[0]: (False, 0)}
    # Its run begins at its time (claim.lua), not at the lease: what `sparkyard runs` counts lateness from.
    began = {n: (await rig.store.get_run(ids.run_id(job_id(n), at), with_tasks=False)).started_ms  # type: ignore[union-attr]
             for n, at in ((1, now + 180), (3, now - 40))}
    assert began == {1: now + 180, 3: now}


async def test_an_assignment_carries_its_own_inputs_not_the_splits_whole_list(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", split=pb.SplitSpec(
        inputs=[pb.SplitInput(value=f"/in/{i}") for i in range(3)], max_concurrent=5)))
    inputs = [[pb.SplitInput(value=f"/in/{i}")] for i in range(3)]
    await rig.store.submit_many([NewJob(job_id(1), spec, "abs", 1_000, fire_now=inputs)], 60_000)
    w1 = connect(rig.registry, rig.clock, "w1", 3)
    await rig.scheduler.dispatch_round()
    assignments = sent(w1)
    assert [[i.value for i in a.inputs] for a in assignments] == [["/in/0"], ["/in/1"], ["/in/2"]]
    assert all(not a.spec.split.inputs and a.spec.split.max_concurrent == 5 for a in assignments)
    assert all(a.spec.entrypoint == "/jobs/x.py:main" for a in assignments)
    stored = (await rig.store.get_specs([(job_id(1), 1)]))[(job_id(1), 1)]
    assert len(stored.split.inputs) == 3  # what the job holds is left whole


async def test_a_round_says_more_may_be_placed_when_it_filled_a_whole_batch(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores, batch=2)
    tasks = await submit(rig.store, 1, tasks=7)
    w1 = connect(rig.registry, rig.clock, "w1", 6)
    assert await rig.scheduler.dispatch_round()  # 2 of 6 idle slots filled: go again
    # Its tasks hold their slots, and the next round sends them while it claims its own.
    assert sent(w1) == [] and rig.registry.idle_slots(GROUP) == 4
    assert await rig.scheduler.dispatch_round()
    assert [a.task_id for a in sent(w1)] == tasks[:2]
    assert not await rig.scheduler.dispatch_round()  # the last idle slots filled: nothing more, all sent
    assert [a.task_id for a in sent(w1)] == tasks[2:6] and await rig.states(tasks[6:]) == [TaskState.READY]
    assert not await rig.scheduler.dispatch_round() and sent(w1) == []


async def test_a_round_whose_store_fails_frees_the_slots_of_what_it_had_not_sent(clocked_stores: ClockedStores) -> None:
    failures: list[Exception] = []

    class FailingSpecs(RedisStore):
        async def get_specs(self, versions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], pb.JobSpec]:
            if failures:
                raise failures.pop()
            return await super().get_specs(versions)

    rig = await Rig.make(clocked_stores, store_class=FailingSpecs, batch=2)
    tasks = await submit(rig.store, 1, tasks=5)
    w1 = connect(rig.registry, rig.clock, "w1", 4)
    assert await rig.scheduler.dispatch_round()
    failures.append(RuntimeError("store down"))
    with pytest.raises(RuntimeError, match="store down"):
        await rig.scheduler.dispatch_round()
    # Nothing was sent, no slot stays taken; the claimed tasks wait in Redis for their leases to expire.
    assert sent(w1) == [] and w1.leased == {} and rig.registry.idle_slots(GROUP) == 4
    assert (await rig.states(tasks))[:2] == [TaskState.LEASED] * 2


async def test_a_batch_names_the_workers_last_message_read_before_its_tasks_were_leased(
        clocked_stores: ClockedStores) -> None:
    """The worker counts a task's first lease from the send time the batch names (TaskBatch.asked_us): it must be
    one the master had read before the claim, never one read while the claim ran or before the batch left."""
    def heard_during_claim(workers: set[str]) -> None:
        """A heartbeat of each worker is read while its claim is on its way to Redis."""
        for worker in workers:
            session = rig.registry.get(worker)
            assert session is not None
            session.heard_us += 1_000_000

    rig = await Rig.make(clocked_stores, store_class=after_claims(heard_during_claim), batch=2)
    await submit(rig.store, 1, tasks=4)
    w1 = connect(rig.registry, rig.clock, "w1", 4)
    w1.heard_us = 5_000_000
    # A burst: the first round claims 2 and leaves them to the next round to send, which claims the other 2.
    assert await rig.scheduler.dispatch_round()
    assert w1.outbound.empty()
    assert not await rig.scheduler.dispatch_round()
    batches = [w1.outbound.get_nowait().batch for _ in range(w1.outbound.qsize())]
    assert [(len(b.tasks), b.asked_us) for b in batches] == [(2, 5_000_000), (2, 6_000_000)]


async def test_claims_of_a_worker_that_connected_again_meanwhile_go_back_to_the_ready_queue(
        clocked_stores: ClockedStores) -> None:
    """The send time a batch names was read on the worker's connection of the claim: a new connection of the same
    worker id (perhaps a process on another host, another clock) must not be told it."""
    def reconnected(workers: set[str]) -> None:
        for worker in workers:
            connect(rig.registry, rig.clock, worker, 2).heard_us = 1  # its new connection, another clock

    rig = await Rig.make(clocked_stores, store_class=after_claims(reconnected))
    tasks = await submit(rig.store, 1, tasks=2)
    connect(rig.registry, rig.clock, "w1", 2).heard_us = 5_000_000
    await rig.reports.start()
    await rig.scheduler.dispatch_round()
    now = rig.registry.get("w1")
    assert now is not None and sent(now) == [] and rig.scheduler.dispatched == 0
    await rig.reports.close(10.0)  # what it was handed is written
    assert await rig.states(tasks) == [TaskState.READY, TaskState.READY]
    for task in await rig.store.get_tasks(tasks):
        assert [(a.state, a.error) for a in task.attempts] == [(AttemptState.RELEASED, "undeliverable")]


async def test_claims_the_worker_cannot_receive_go_straight_back_to_the_ready_queue(
        clocked_stores: ClockedStores) -> None:
    def vanish(workers: set[str]) -> None:
        """The worker's stream closes while the claim is on its way (between routing and sending)."""
        for worker in workers:
            session = rig.registry.get(worker)
            assert session is not None
            session.close("gone")

    rig = await Rig.make(clocked_stores, store_class=after_claims(vanish))
    tasks = await submit(rig.store, 1, tasks=2)
    w1 = connect(rig.registry, rig.clock, "w1", 2)
    await rig.reports.start()
    await rig.scheduler.dispatch_round()
    assert sent(w1) == [] and w1.leased == {} and rig.scheduler.dispatched == 0
    await rig.reports.close(10.0)  # what it was handed is written
    assert await rig.states(tasks) == [TaskState.READY, TaskState.READY]
    for task in await rig.store.get_tasks(tasks):
        assert [(a.state, a.error) for a in task.attempts] == [(AttemptState.RELEASED, "undeliverable")]
        assert task.failures == 0
    assert [r.task_id for r in await rig.store.peek_ready(GROUP, 10)] == tasks


async def test_a_round_that_fails_after_sending_keeps_the_slots_of_what_it_sent(clocked_stores: ClockedStores) -> None:
    async def on_claimed(claims: list[Claim]) -> None:
        raise RuntimeError("after the send")

    rig = await Rig.make(clocked_stores, on_claimed=on_claimed)
    tasks = await submit(rig.store, 1, tasks=2)
    w1 = connect(rig.registry, rig.clock, "w1", 3)
    with pytest.raises(RuntimeError, match="after the send"):
        await rig.scheduler.dispatch_round()
    assert [a.task_id for a in sent(w1)] == tasks and sorted(w1.leased) == tasks  # the worker runs them


async def test_every_claim_is_handed_to_on_claimed(clocked_stores: ClockedStores) -> None:
    seen: list[list[str]] = []

    async def on_claimed(claims: list[Claim]) -> None:
        seen.append([c.task_id for c in claims])

    rig = await Rig.make(clocked_stores, on_claimed=on_claimed)
    tasks = await submit(rig.store, 1, tasks=2)
    connect(rig.registry, rig.clock, "w1", 2)
    await rig.scheduler.dispatch_round()
    assert seen == [tasks]


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    """Let the event loop run until ``condition`` holds (a deadline, never a fixed sleep)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0)


async def test_the_loop_dispatches_on_wake_and_retries_after_a_store_error_on_its_clock(
        clocked_stores: ClockedStores) -> None:
    failures = [RuntimeError("store down")]

    class FlakyStore(RedisStore):
        async def peek_ready(self, group: str, n: int) -> list[Routable]:
            if failures:
                raise failures.pop()
            return await super().peek_ready(group, n)

    rig = await Rig.make(clocked_stores, store_class=FlakyStore)
    clock = rig.clock
    (task_id,) = await submit(rig.store, 1)
    w1 = connect(rig.registry, clock, "w1", 1)
    await rig.scheduler.start()
    try:
        await until(lambda: clock.pending == 1, "the loop to back off after the error")
        assert w1.outbound.empty()
        clock.advance(ERROR_BACKOFF_S)
        batch = await asyncio.wait_for(w1.outbound.get(), timeout=5)
        assert [a.task_id for a in batch.batch.tasks] == [task_id]
    finally:
        await rig.scheduler.stop()


@pytest.mark.parametrize("draining", [True, False])
async def test_a_draining_worker_gets_nothing(draining: bool, clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    await submit(rig.store, 1)
    w1 = connect(rig.registry, rig.clock, "w1", 1)
    w1.draining = draining
    await rig.scheduler.dispatch_round()
    assert len(sent(w1)) == (0 if draining else 1)


def _succeeded(a: pb.TaskAssignment) -> pb.Reports:
    return pb.Reports(results=[pb.TaskResult(task_id=a.task_id, fencing_token=a.fencing_token,
                                             outcome=pb.ATTEMPT_SUCCEEDED)])


async def test_results_written_apart_are_acknowledged_together_after_the_ack_delay(
        clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    tasks = await submit(rig.store, 1, tasks=2)
    w1 = connect(rig.registry, rig.clock, "w1", 2)
    await rig.reports.start()
    await rig.scheduler.dispatch_round()
    for assignment in sent(w1):  # two Reports messages, each written by its own report.lua call
        rig.reports.accept("w1", _succeeded(assignment))
        await settle(rig.store)
    assert await rig.states(tasks) == [TaskState.SUCCEEDED, TaskState.SUCCEEDED]
    assert w1.outbound.empty()  # written, their slots free, the acknowledgements waiting for company
    rig.clock.advance(ACK_DELAY_S)
    acks = w1.outbound.get_nowait().acks.acks
    assert sorted(a.task_id for a in acks) == tasks and all(a.accepted for a in acks)
    assert w1.outbound.empty()
    await rig.reports.close(10.0)


async def test_a_closing_sink_sends_the_acknowledgements_it_holds(clocked_stores: ClockedStores) -> None:
    rig = await Rig.make(clocked_stores)
    tasks = await submit(rig.store, 1, tasks=1)
    w1 = connect(rig.registry, rig.clock, "w1", 1)
    await rig.reports.start()
    await rig.scheduler.dispatch_round()
    rig.reports.accept("w1", _succeeded(sent(w1)[0]))
    await rig.reports.close(10.0)
    assert [a.task_id for a in w1.outbound.get_nowait().acks.acks] == tasks
