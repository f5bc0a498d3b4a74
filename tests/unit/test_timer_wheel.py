"""TimingWheel and TimerTaskList on their own: placement, overflow levels, O(1) links, the shared counter."""

from __future__ import annotations

from sparkyard.master.timer import TaskCounter, TimerTask, TimerTaskList, TimingWheel
from sparkyard.master.timer.wheel import DelayQueue


def make_wheel(tick_ms: int = 1, wheel_size: int = 4, start_ms: int = 0) -> tuple[TimingWheel, DelayQueue]:
    queue: DelayQueue = []
    return TimingWheel(tick_ms, wheel_size, start_ms, TaskCounter(), queue), queue


def task_expiring_at(expiration_ms: int) -> TimerTask:
    task = TimerTask(expiration_ms / 1000.0)
    task._expiration_ms = expiration_ms
    return task


def test_bucket_add_appends_in_insertion_order() -> None:
    bucket = TimerTaskList(TaskCounter())
    tasks = [TimerTask() for _ in range(3)]
    for task in tasks:
        bucket.add(task)
    assert list(bucket) == tasks


def test_bucket_add_moves_task_out_of_its_previous_bucket() -> None:
    counter = TaskCounter()
    first, second = TimerTaskList(counter), TimerTaskList(counter)
    task = TimerTask()
    first.add(task)
    second.add(task)
    assert list(first) == [] and list(second) == [task]
    assert counter.value == 1


def test_bucket_remove_unlinks_middle_task_and_frees_its_links() -> None:
    counter = TaskCounter()
    bucket = TimerTaskList(counter)
    a, b, c = TimerTask(), TimerTask(), TimerTask()
    for task in (a, b, c):
        bucket.add(task)
    bucket.remove(b)
    assert list(bucket) == [a, c]
    assert not hasattr(b, "_next") and not hasattr(b, "_prev") and not b.pending
    assert counter.value == 2


def test_bucket_remove_ignores_task_of_another_bucket() -> None:
    counter = TaskCounter()
    mine, other = TimerTaskList(counter), TimerTaskList(counter)
    task = TimerTask()
    other.add(task)
    mine.remove(task)
    assert list(other) == [task] and counter.value == 1


def test_bucket_flush_hands_every_task_over_and_resets_expiration() -> None:
    bucket = TimerTaskList(TaskCounter())
    tasks = [TimerTask() for _ in range(3)]
    for task in tasks:
        bucket.add(task)
    bucket.set_expiration(5)
    seen: list[TimerTask] = []
    bucket.flush(seen.append)
    assert seen == tasks and bucket.is_empty() and bucket.expiration_ms == -1


def test_bucket_flush_skips_task_cancelled_by_an_earlier_one() -> None:
    bucket = TimerTaskList(TaskCounter())
    a, b = TimerTask(), TimerTask()
    bucket.add(a)
    bucket.add(b)
    seen: list[TimerTask] = []

    def reinsert(task: TimerTask) -> None:
        seen.append(task)
        b.cancel()

    bucket.flush(reinsert)
    assert seen == [a]


def test_wheel_places_task_within_interval_in_level_zero_slot() -> None:
    wheel, queue = make_wheel()
    task = task_expiring_at(2)
    assert wheel.add(task)
    assert wheel.bucket_for(task) == (0, 2)
    assert queue[0][:2] == (2, 0)
    assert wheel.overflow_wheel is None


def test_wheel_creates_overflow_wheels_only_when_needed() -> None:
    wheel, queue = make_wheel()
    near, middle, far = task_expiring_at(2), task_expiring_at(9), task_expiring_at(40)
    wheel.add(near)
    assert wheel.levels() == 1
    wheel.add(middle)
    wheel.add(far)
    assert wheel.levels() == 3
    assert wheel.bucket_for(middle) == (1, 8)
    assert wheel.bucket_for(far) == (2, 32)


def test_upper_buckets_are_queued_one_of_their_ticks_before_their_start() -> None:
    """Level L's bucket at B may cascade from B - tick_L on: it then fits level L-1's doubled span."""
    wheel, queue = make_wheel()
    for ms in (2, 9, 40):
        wheel.add(task_expiring_at(ms))
    assert sorted(entry[:2] for entry in queue) == [(2, 0), (4, 1), (16, 2)]


def test_cascading_add_uses_the_second_revolution_of_slots() -> None:
    wheel, _ = make_wheel()
    plain, cascaded = task_expiring_at(6), task_expiring_at(6)
    wheel.add(plain)
    wheel.add(cascaded, cascading=True)
    assert wheel.bucket_for(plain) == (1, 4)
    assert wheel.bucket_for(cascaded) == (0, 6)
    assert wheel.span_ms == 2 * wheel.interval_ms == 8


def test_overflow_wheel_tick_is_the_interval_of_the_level_below() -> None:
    wheel, _ = make_wheel(tick_ms=2, wheel_size=8)
    wheel.add(task_expiring_at(1_000))
    overflow = wheel.overflow_wheel
    assert overflow is not None
    assert overflow.tick_ms == wheel.interval_ms == 16
    assert overflow.overflow_wheel is not None and overflow.overflow_wheel.tick_ms == 128


def test_wheel_refuses_task_due_within_the_current_tick() -> None:
    wheel, queue = make_wheel(start_ms=100)
    assert not wheel.add(task_expiring_at(100))
    assert not wheel.add(task_expiring_at(50))
    assert queue == []


def test_wheel_refuses_cancelled_task() -> None:
    wheel, _ = make_wheel()
    task = task_expiring_at(3)
    task.cancel()
    assert not wheel.add(task)
    assert not task.pending


def test_shared_counter_counts_tasks_in_every_level() -> None:
    counter = TaskCounter()
    wheel = TimingWheel(1, 4, 0, counter, [])
    tasks = [task_expiring_at(ms) for ms in (1, 2, 9, 40, 300)]
    for task in tasks:
        wheel.add(task)
    assert counter.value == 5
    tasks[3].cancel()
    tasks[4].cancel()
    assert counter.value == 3


def test_bucket_enters_delay_queue_once_per_expiration() -> None:
    wheel, queue = make_wheel(tick_ms=1, wheel_size=4)
    for _ in range(10):
        wheel.add(task_expiring_at(9))
    assert len(queue) == 1


def test_advance_clock_rounds_down_to_tick_and_moves_upper_levels() -> None:
    wheel, _ = make_wheel(tick_ms=1, wheel_size=4)
    wheel.add(task_expiring_at(40))
    wheel.advance_clock(37)
    overflow = wheel.overflow_wheel
    assert overflow is not None and overflow.overflow_wheel is not None
    assert (wheel.current_time_ms, overflow.current_time_ms, overflow.overflow_wheel.current_time_ms) == (
        37,
        36,
        32,
    )


def test_moving_task_between_levels_leaves_no_trace_in_the_old_bucket() -> None:
    counter = TaskCounter()
    wheel = TimingWheel(1, 4, 0, counter, [])
    task = task_expiring_at(40)
    wheel.add(task)
    task._expiration_ms = 2
    wheel.add(task)
    assert wheel.bucket_for(task) == (0, 2)
    assert counter.value == 1
