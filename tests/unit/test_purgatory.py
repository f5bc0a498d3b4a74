"""Purgatory: completion by condition or expiry exactly once, many waiters per key, bounded watcher lists."""

from __future__ import annotations

import asyncio

import pytest

from sparkyard.clock import FakeClock
from sparkyard.master.purgatory import DelayedOperation, Purgatory
from sparkyard.master.timer import SystemTimer


class RunState:
    """Stand-in for the run table: which runs have ended."""

    def __init__(self) -> None:
        self.ended: set[str] = set()


class WaitRun(DelayedOperation):
    """What the WaitRun servicer does: complete when the run ends, or at the deadline."""

    def __init__(self, runs: RunState, run_id: str, timeout_s: float) -> None:
        super().__init__(timeout_s)
        self.runs = runs
        self.run_id = run_id
        self.completions = 0
        self.expirations = 0
        self.outcome: bool | None = None

    def try_complete(self) -> bool:
        if self.run_id in self.runs.ended:
            return self.force_complete()
        return False

    def on_complete(self) -> None:
        self.completions += 1
        self.outcome = self.run_id in self.runs.ended

    def on_expiration(self) -> None:
        self.expirations += 1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def timer(clock: FakeClock) -> SystemTimer:
    timer = SystemTimer(clock)
    timer.start()
    return timer


@pytest.fixture
def purgatory(timer: SystemTimer) -> Purgatory:
    return Purgatory(timer, "wait-run", purge_interval=10)


@pytest.fixture
def runs() -> RunState:
    return RunState()


def test_operation_whose_condition_already_holds_completes_without_being_watched(
    purgatory: Purgatory, runs: RunState, timer: SystemTimer
) -> None:
    runs.ended.add("r1")
    op = WaitRun(runs, "r1", 5.0)
    assert purgatory.try_complete_else_watch(op, ["r1"]) is True
    assert op.completions == 1 and purgatory.watched("r1") == 0 and timer.size == 0 and purgatory.delayed == 0


def test_check_and_complete_completes_a_waiter_and_cancels_its_expiry(
    purgatory: Purgatory, runs: RunState, timer: SystemTimer, clock: FakeClock
) -> None:
    op = WaitRun(runs, "r1", 5.0)
    assert purgatory.try_complete_else_watch(op, ["r1"]) is False
    assert (purgatory.delayed, purgatory.watched("r1"), timer.size) == (1, 1, 1)
    assert purgatory.check_and_complete("r1") == 0
    runs.ended.add("r1")
    assert purgatory.check_and_complete("r1") == 1
    assert op.outcome is True and op.completions == 1
    assert (purgatory.delayed, purgatory.watched("r1"), purgatory.keys, timer.size) == (0, 0, 0, 0)
    clock.advance(10.0)
    assert op.expirations == 0


def test_many_waiters_on_one_run_all_complete(purgatory: Purgatory, runs: RunState) -> None:
    ops = [WaitRun(runs, "r1", 30.0) for _ in range(500)]
    for op in ops:
        purgatory.try_complete_else_watch(op, ["r1"])
    runs.ended.add("r1")
    assert purgatory.check_and_complete("r1") == 500
    assert all(op.completions == 1 and op.outcome for op in ops)
    assert purgatory.delayed == 0


def test_expired_operation_calls_on_expiration_exactly_once(
    purgatory: Purgatory, runs: RunState, clock: FakeClock
) -> None:
    op = WaitRun(runs, "r1", 2.0)
    purgatory.try_complete_else_watch(op, ["r1"])
    clock.advance(1.999)
    assert op.completions == 0
    clock.advance(0.001)
    assert (op.completions, op.expirations, op.outcome) == (1, 1, False)
    runs.ended.add("r1")
    assert purgatory.check_and_complete("r1") == 0
    clock.advance(60.0)
    assert (op.completions, op.expirations) == (1, 1)
    assert purgatory.delayed == 0 and purgatory.watched("r1") == 0


def test_condition_met_at_the_deadline_then_expiry_completes_exactly_once(
    purgatory: Purgatory, runs: RunState, clock: FakeClock
) -> None:
    op = WaitRun(runs, "r1", 1.0)
    purgatory.try_complete_else_watch(op, ["r1"])

    def run_ends() -> None:
        runs.ended.add("r1")
        purgatory.check_and_complete("r1")

    # Both due at the same instant; the condition's callback was scheduled later, so expiry runs first.
    purgatory.timer.schedule(1.0, run_ends)
    clock.advance(1.0)
    assert (op.completions, op.expirations) == (1, 1)
    assert op.force_complete() is False


def test_condition_met_before_the_expiry_callback_wins_and_no_expiration_follows(
    purgatory: Purgatory, runs: RunState, clock: FakeClock
) -> None:
    op = WaitRun(runs, "r1", 1.0)
    purgatory.try_complete_else_watch(op, ["r1"])
    clock.advance(0.999)
    runs.ended.add("r1")
    assert purgatory.check_and_complete("r1") == 1
    clock.advance(1.0)
    assert (op.completions, op.expirations, op.outcome) == (1, 0, True)


def test_force_complete_returns_true_only_for_the_first_caller(purgatory: Purgatory, runs: RunState) -> None:
    op = WaitRun(runs, "r1", 1.0)
    purgatory.try_complete_else_watch(op, ["r1"])
    results = [op.force_complete(), op.force_complete(), op.try_complete()]
    assert results == [True, False, False] and op.completions == 1 and op.is_completed


def test_operation_watched_on_several_keys_completes_once(purgatory: Purgatory, runs: RunState) -> None:
    class Either(WaitRun):
        def try_complete(self) -> bool:
            return bool(runs.ended & {"a", "b"}) and self.force_complete()

    op = Either(runs, "a", 5.0)
    purgatory.try_complete_else_watch(op, ["a", "b"])
    runs.ended.update({"a", "b"})
    assert purgatory.check_and_complete("a") == 1
    assert purgatory.check_and_complete("b") == 0
    assert op.completions == 1 and purgatory.keys == 0


def test_purge_keeps_watcher_lists_bounded_under_churn(purgatory: Purgatory, runs: RunState) -> None:
    """Each waiter also watches a shared "drain" key that is never checked: only the purge trims it."""
    live: list[WaitRun] = []
    peak = 0
    for i in range(5_000):
        op = WaitRun(runs, f"r{i}", 60.0)
        purgatory.try_complete_else_watch(op, [op.run_id, "drain"])
        live.append(op)
        if len(live) > 20:
            done = live.pop(0)
            runs.ended.add(done.run_id)
            assert purgatory.check_and_complete(done.run_id) == 1
        peak = max(peak, purgatory.watched("drain"))
    assert purgatory.delayed == 20
    assert peak <= 2 * purgatory.delayed + purgatory.purge_interval + 1
    assert purgatory.keys == 20 + 1  # completed runs' keys were removed
    assert purgatory.watched_total <= 20 + peak


def test_purge_completed_drops_empty_keys(purgatory: Purgatory, runs: RunState, clock: FakeClock) -> None:
    for i in range(5):
        purgatory.try_complete_else_watch(WaitRun(runs, f"r{i}", 1.0), [f"r{i}"])
    clock.advance(2.0)
    assert purgatory.keys == 5
    assert purgatory.purge_completed() == 5
    assert purgatory.keys == 0 and purgatory.watched_total == 0


def test_completion_callback_may_watch_a_new_operation_on_the_same_key(
    purgatory: Purgatory, runs: RunState
) -> None:
    follow_up = WaitRun(runs, "r1", 5.0)

    class Chained(WaitRun):
        def on_complete(self) -> None:
            super().on_complete()
            runs.ended.discard("r1")
            purgatory.try_complete_else_watch(follow_up, ["r1"])

    purgatory.try_complete_else_watch(Chained(runs, "r1", 5.0), ["r1"])
    runs.ended.add("r1")
    assert purgatory.check_and_complete("r1") == 1
    assert purgatory.watched("r1") == 1 and not follow_up.is_completed
    runs.ended.add("r1")
    assert purgatory.check_and_complete("r1") == 1 and follow_up.completions == 1


def test_operation_cannot_be_watched_twice(purgatory: Purgatory, runs: RunState) -> None:
    op = WaitRun(runs, "r1", 5.0)
    purgatory.try_complete_else_watch(op, ["r1"])
    with pytest.raises(ValueError):
        purgatory.try_complete_else_watch(op, ["r1"])


async def test_waiter_future_resolves_when_the_run_ends(purgatory: Purgatory, runs: RunState) -> None:
    loop = asyncio.get_running_loop()

    class FutureWait(WaitRun):
        def __init__(self) -> None:
            super().__init__(runs, "r1", 30.0)
            self.future: asyncio.Future[bool] = loop.create_future()

        def on_complete(self) -> None:
            self.future.set_result(self.run_id in runs.ended)

    waiters = [FutureWait() for _ in range(3)]
    for waiter in waiters:
        purgatory.try_complete_else_watch(waiter, ["r1"])
    runs.ended.add("r1")
    purgatory.check_and_complete("r1")
    results = await asyncio.wait_for(asyncio.gather(*(w.future for w in waiters)), timeout=1.0)
    assert results == [True, True, True]


def test_cancel_all_completes_every_waiter(purgatory: Purgatory, runs: RunState, timer: SystemTimer) -> None:
    ops = [WaitRun(runs, f"r{i % 3}", 5.0) for i in range(9)]
    for op in ops:
        purgatory.try_complete_else_watch(op, [op.run_id])
    assert purgatory.cancel_all() == 9
    assert all(op.completions == 1 for op in ops)
    assert (purgatory.delayed, purgatory.keys, timer.size) == (0, 0, 0)


def test_operation_with_zero_timeout_expires_on_the_next_turn(
    purgatory: Purgatory, runs: RunState, clock: FakeClock
) -> None:
    op = WaitRun(runs, "r1", 0.0)
    assert purgatory.try_complete_else_watch(op, ["r1"]) is False
    assert op.completions == 0
    clock.advance(0)
    assert (op.completions, op.expirations) == (1, 1)


def test_completed_operation_is_not_watched_again(purgatory: Purgatory, runs: RunState) -> None:
    op = WaitRun(runs, "r1", 5.0)
    op.force_complete()
    assert purgatory.try_complete_else_watch(op, ["r1"]) is False
    assert (purgatory.delayed, purgatory.watched("r1")) == (0, 0) and op.completions == 1


def test_complete_watchers_completes_every_waiter_of_a_key_without_asking_them(
        purgatory: Purgatory, runs: RunState, timer: SystemTimer) -> None:
    """The run-ended event is itself the condition: a WaitRun watched on its run and its job id completes
    when either key fires, once, and leaves nothing behind on the other key."""
    on_run = [WaitRun(runs, "r1", 60.0) for _ in range(3)]
    other = WaitRun(runs, "r2", 60.0)
    for op in on_run:
        purgatory.try_complete_else_watch(op, ["r1", "job1"])
    purgatory.try_complete_else_watch(other, ["r2", "job2"])
    assert purgatory.complete_watchers("r1") == 3  # runs.ended was never set: nobody was asked
    assert all(op.completions == 1 and op.expirations == 0 for op in on_run)
    assert purgatory.complete_watchers("job1") == 0  # already completed through their run id
    assert purgatory.complete_watchers("nobody") == 0
    assert other.completions == 0 and purgatory.delayed == 1
    purgatory.purge_completed()
    assert purgatory.keys == 2  # r2 and job2 only
