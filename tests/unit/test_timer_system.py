"""SystemTimer on a FakeClock: firing times, cascades, cancel, moves, the single wake-up, errors, stop."""

from __future__ import annotations

import logging
import random
from typing import Callable

import pytest

from sparkyard.clock import FakeClock
from sparkyard.master.timer import SystemTimer, TimerTask

START = 1_000.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(monotonic_start=START)


@pytest.fixture
def timer(clock: FakeClock) -> SystemTimer:
    timer = SystemTimer(clock, tick_ms=1, wheel_size=4)
    timer.start()
    return timer


def recorder(clock: FakeClock, log: list[tuple[str, float]], name: str) -> Callable[[], None]:
    """A callback that logs its name and the fake time (relative to START) it ran at."""
    return lambda: log.append((name, round(clock.monotonic() - START, 6)))


def test_task_fires_at_its_deadline_and_never_before(clock: FakeClock, timer: SystemTimer) -> None:
    log: list[tuple[str, float]] = []
    timer.schedule(0.0105, recorder(clock, log, "a"))
    clock.advance(0.0104)
    assert log == []
    clock.advance(0.01)
    assert log == [("a", 0.011)]  # rounded up to the 1 ms tick, never early
    assert timer.size == 0


def test_cascade_across_three_levels_fires_each_task_at_its_millisecond(
    clock: FakeClock, timer: SystemTimer
) -> None:
    log: list[tuple[str, float]] = []
    for name, ms in (("level0", 2), ("level1", 9), ("level2", 40), ("level3", 100)):
        timer.schedule(ms / 1000, recorder(clock, log, name))
    assert timer.wheel.levels() == 4
    clock.advance(0.2)
    assert log == [("level0", 0.002), ("level1", 0.009), ("level2", 0.04), ("level3", 0.1)]


@pytest.mark.parametrize(
    ("delay_ms", "level"), [(3, 0), (9, 1), (40, 2)], ids=["level0", "overflow_level1", "overflow_level2"]
)
def test_cancel_in_each_level_unlinks_entry_and_it_never_fires(
    clock: FakeClock, timer: SystemTimer, delay_ms: int, level: int
) -> None:
    fired: list[str] = []
    keep = timer.schedule(delay_ms / 1000, lambda: fired.append("keep"))
    gone = timer.schedule(delay_ms / 1000, lambda: fired.append("gone"))
    location = timer.wheel.bucket_for(gone)
    assert location is not None and location[0] == level
    gone.cancel()
    assert gone.cancelled and not gone.pending
    assert timer.wheel.bucket_for(gone) is None and timer.wheel.bucket_for(keep) == location
    assert timer.size == 1
    clock.advance(1.0)
    assert fired == ["keep"]


def test_expiry_follows_deadline_order(clock: FakeClock) -> None:
    timer = SystemTimer(clock, wheel_size=8)
    timer.start()
    rnd = random.Random(3)
    deadlines_ms = [rnd.randrange(1, 5_000) for _ in range(2_000)]
    fired: list[int] = []
    for ms in deadlines_ms:
        timer.schedule_at(START + ms / 1000, lambda ms=ms: fired.append(ms))
    clock.advance(6.0)
    assert fired == sorted(deadlines_ms)


def test_rescheduling_a_pending_task_moves_it(clock: FakeClock, timer: SystemTimer) -> None:
    log: list[tuple[str, float]] = []
    task = timer.schedule(0.05, recorder(clock, log, "moved"))
    assert timer.add(task, START + 0.003)
    assert timer.size == 1 and task.deadline == START + 0.003
    clock.advance(0.1)
    assert log == [("moved", 0.003)]


def test_rescheduling_later_moves_task_up_a_level(clock: FakeClock, timer: SystemTimer) -> None:
    log: list[tuple[str, float]] = []
    task = timer.schedule(0.002, recorder(clock, log, "later"))
    timer.add(task, START + 0.04)
    location = timer.wheel.bucket_for(task)
    assert location is not None and location[0] == 2
    clock.advance(0.1)
    assert log == [("later", 0.04)]


def test_adding_a_cancelled_task_is_refused(clock: FakeClock, timer: SystemTimer) -> None:
    fired: list[int] = []
    task = TimerTask(START + 0.01, lambda: fired.append(1))
    task.cancel()
    assert timer.add(task) is False
    assert timer.size == 0
    clock.advance(1.0)
    assert fired == []


def test_adding_an_expired_task_runs_it_on_the_next_turn_not_inline(
    clock: FakeClock, timer: SystemTimer
) -> None:
    fired: list[int] = []
    task = TimerTask(START - 5.0, lambda: fired.append(1))
    assert timer.add(task) is False
    assert fired == [] and timer.size == 1
    clock.advance(0)
    assert fired == [1] and timer.size == 0


def test_zero_delay_callback_can_be_cancelled_before_the_next_turn(
    clock: FakeClock, timer: SystemTimer
) -> None:
    fired: list[int] = []
    task = timer.schedule(0, lambda: fired.append(1))
    task.cancel()
    clock.advance(0)
    assert fired == [] and timer.size == 0


def test_callback_rescheduling_itself_with_zero_delay_does_not_recurse(
    clock: FakeClock, timer: SystemTimer
) -> None:
    runs: list[int] = []

    def again() -> None:
        runs.append(1)
        if len(runs) < 3:
            timer.schedule(0, again)

    timer.schedule(0, again)
    clock.advance(0)
    assert runs == [1, 1, 1]


def test_subclass_overriding_run_is_run_at_its_deadline(clock: FakeClock, timer: SystemTimer) -> None:
    runs: list[float] = []

    class Probe(TimerTask):
        def run(self) -> None:
            runs.append(round(clock.monotonic() - START, 6))

    timer.add(Probe(START + 0.007))
    clock.advance(0.01)
    assert runs == [0.007]


def test_single_wakeup_is_rearmed_earlier_when_an_earlier_bucket_appears(clock: FakeClock) -> None:
    timer = SystemTimer(clock, wheel_size=1024)
    timer.start()
    timer.schedule(0.5, lambda: None)
    assert (timer.arms, clock.pending, timer.armed_ms) == (1, 1, 1_000_500)
    timer.schedule(0.2, lambda: None)
    assert (timer.arms, clock.pending, timer.armed_ms) == (2, 1, 1_000_200)
    timer.schedule(0.002, lambda: None)
    assert (timer.arms, clock.pending, timer.armed_ms) == (3, 1, 1_000_002)


def test_adds_into_existing_or_later_buckets_do_not_touch_the_clock(clock: FakeClock) -> None:
    timer = SystemTimer(clock, wheel_size=1024)
    timer.start()
    timer.schedule(0.002, lambda: None)
    for delay in (0.002, 0.003, 0.3, 2.0, 0.0025):
        timer.schedule(delay, lambda: None)
    assert (timer.arms, clock.pending) == (1, 1)


def test_one_armed_wakeup_serves_many_timers(clock: FakeClock, timer: SystemTimer) -> None:
    fired: list[int] = []
    for i in range(1_000):
        timer.schedule((i % 97 + 1) / 1000, lambda: fired.append(1))
    assert clock.pending == 1
    clock.advance(0.1)
    assert len(fired) == 1_000 and clock.pending == 0 and timer.armed_ms is None


def test_callback_exception_is_logged_and_the_timer_goes_on(
    clock: FakeClock, timer: SystemTimer, caplog: pytest.LogCaptureFixture
) -> None:
    fired: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    timer.schedule(0.001, boom)
    timer.schedule(0.001, lambda: fired.append("same tick"))
    timer.schedule(0.05, lambda: fired.append("later"))
    with caplog.at_level(logging.ERROR, logger="sparkyard.master.timer.system_timer"):
        clock.advance(0.1)
    assert fired == ["same tick", "later"]
    assert any("boom" in (record.exc_text or "") for record in caplog.records)


async def test_stop_prevents_further_callbacks(clock: FakeClock, timer: SystemTimer) -> None:
    fired: list[int] = []
    timer.schedule(0.01, lambda: fired.append(1))
    timer.schedule(0, lambda: fired.append(0))
    await timer.stop()
    clock.advance(1.0)
    assert fired == [] and clock.pending == 0 and timer.closed


def test_close_inside_a_callback_stops_the_rest_of_the_tick(clock: FakeClock, timer: SystemTimer) -> None:
    fired: list[str] = []
    timer.schedule(0.001, lambda: (fired.append("first"), timer.close()))  # type: ignore[func-returns-value]
    timer.schedule(0.001, lambda: fired.append("second"))
    timer.schedule(0.002, lambda: fired.append("third"))
    clock.advance(0.1)
    assert fired == ["first"]
    with pytest.raises(RuntimeError):
        timer.schedule(0.1, lambda: None)


def test_cancel_by_an_earlier_callback_in_the_same_tick_prevents_the_run(
    clock: FakeClock, timer: SystemTimer
) -> None:
    fired: list[str] = []
    victim = TimerTask(START + 0.001, lambda: fired.append("victim"))
    timer.schedule(0.001, lambda: victim.cancel())
    timer.add(victim)
    clock.advance(0.01)
    assert fired == [] and timer.size == 0


def test_tasks_added_before_start_fire_after_start(clock: FakeClock) -> None:
    timer = SystemTimer(clock)
    fired: list[int] = []
    timer.schedule(0.01, lambda: fired.append(1))
    clock.advance(0.02)
    assert fired == [] and clock.pending == 0
    timer.start()
    clock.advance(0)
    assert fired == [1]


def test_schedule_at_wall_converts_wall_instant_to_monotonic_deadline(
    clock: FakeClock, timer: SystemTimer
) -> None:
    log: list[tuple[str, float]] = []
    task = timer.schedule_at_wall(clock.now() + 0.25, recorder(clock, log, "wall"))
    assert task.deadline == pytest.approx(START + 0.25)
    clock.advance(0.3)
    assert log == [("wall", 0.25)]


def test_deadline_on_a_millisecond_boundary_is_not_pushed_a_tick_late(
    clock: FakeClock, timer: SystemTimer
) -> None:
    task = timer.schedule_at(1000.001, lambda: None)
    assert task.expiration_ms == 1_000_001


def test_coarser_tick_rounds_deadline_up_to_the_tick(clock: FakeClock) -> None:
    timer = SystemTimer(clock, tick_ms=5, wheel_size=8)
    timer.start()
    log: list[tuple[str, float]] = []
    timer.schedule(0.011, recorder(clock, log, "coarse"))
    clock.advance(0.1)
    assert log == [("coarse", 0.015)]


def test_add_rejects_a_task_without_a_finite_deadline(timer: SystemTimer) -> None:
    with pytest.raises(ValueError):
        timer.add(TimerTask())


def test_large_cascade_is_spread_over_wakeups_of_at_most_one_batch(clock: FakeClock) -> None:
    timer = SystemTimer(clock, tick_ms=1, wheel_size=4, cascade_batch=50)
    moved_per_wake: list[int] = []
    moved = [0]
    reinsert, wake = timer._reinsert_cascading, timer._wake

    def counting_reinsert(task: TimerTask) -> None:
        moved[0] += 1
        reinsert(task)

    def counting_wake() -> None:
        moved[0] = 0
        wake()
        moved_per_wake.append(moved[0])

    timer._reinsert_cascading = counting_reinsert
    timer._wake = counting_wake
    timer.start()
    fired: list[float] = []
    for _ in range(1_000):  # all in one level-2 bucket [32, 48) ms, queued for cascading at 16 ms
        timer.schedule(0.040, lambda: fired.append(round(clock.monotonic() - START, 6)))
    clock.advance(0.039)
    assert fired == [] and max(moved_per_wake) <= 50 and sum(moved_per_wake) >= 1_000
    clock.advance(0.001)
    assert fired == [0.04] * 1_000


def test_random_adds_cancels_and_moves_fire_each_live_task_once_at_its_tick(clock: FakeClock) -> None:
    """A model check: a tiny wheel (many levels, many cascades) and tiny batches, against a plain dict."""
    timer = SystemTimer(clock, tick_ms=1, wheel_size=4, cascade_batch=3)
    timer.start()
    rnd = random.Random(42)
    expected: dict[int, int] = {}
    tasks: dict[int, TimerTask] = {}
    fired: list[tuple[int, int]] = []

    def fire(key: int) -> Callable[[], None]:
        return lambda: fired.append((key, round((clock.monotonic() - START) * 1000)))

    for key in range(3_000):
        now_ms = round((clock.monotonic() - START) * 1000)
        action = rnd.random()
        if action < 0.6 or not expected:
            delay_ms = rnd.choice((1, 2, 3, 7, 15, 40, 100, 300, 1_200, 5_000))
            tasks[key] = timer.schedule(delay_ms / 1000, fire(key))
            expected[key] = now_ms + delay_ms
        elif action < 0.8:
            victim = rnd.choice(list(expected))
            tasks[victim].cancel()
            del expected[victim]
        else:
            moved = rnd.choice(list(expected))
            delay_ms = rnd.randrange(1, 2_000)
            timer.add(tasks[moved], START + (now_ms + delay_ms) / 1000)
            expected[moved] = now_ms + delay_ms
        clock.advance(rnd.choice((0, 0, 0.001, 0.003, 0.02)))
        for key_fired, at in fired:
            assert expected.pop(key_fired) == at
        fired.clear()
    clock.advance(10.0)
    for key_fired, at in fired:
        assert expected.pop(key_fired) == at
    assert expected == {} and timer.size == 0


def test_public_names_are_pinned() -> None:
    import sparkyard.master.timer as timer_package

    assert sorted(timer_package.__all__) == [
        "DEFAULT_CASCADE_BATCH",
        "DEFAULT_TICK_MS",
        "DEFAULT_WHEEL_SIZE",
        "SystemTimer",
        "TaskCounter",
        "TimerTask",
        "TimerTaskEntry",
        "TimerTaskList",
        "TimingWheel",
    ]


def test_schedule_at_a_past_deadline_runs_on_the_next_turn(clock: FakeClock, timer: SystemTimer) -> None:
    fired: list[int] = []
    task = timer.schedule_at(START - 1.0, lambda: fired.append(1))
    assert task.pending and fired == []
    clock.advance(0)
    assert fired == [1] and not task.pending


def test_fired_task_can_be_added_again(clock: FakeClock, timer: SystemTimer) -> None:
    log: list[tuple[str, float]] = []
    task = timer.schedule(0.002, recorder(clock, log, "again"))
    clock.advance(0.002)
    assert timer.add(task, START + 0.005)
    clock.advance(0.01)
    assert log == [("again", 0.002), ("again", 0.005)]
