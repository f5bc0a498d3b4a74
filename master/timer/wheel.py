"""Kafka's hierarchical timing wheel, with room for early cascades.

A :class:`TimingWheel` level has ``wheel_size`` tick-wide slots covering ``interval_ms = tick_ms *
wheel_size`` from its ``current_time_ms``. A task whose expiration lies beyond that window goes to the
*overflow wheel*, a level whose tick is this level's whole interval; overflow wheels are created only
when a task needs one, so a timer holding only short delays has a single level.

Worked example (tick 1 ms, wheel size 4, so level 0 spans 4 ms, level 1 16 ms, level 2 64 ms), with the
wheel's clock at 0:

* A task expiring at 2 ms lands in level 0, slot 2 (bucket start 2).
* A task expiring at 9 ms is past level 0 (0 + 4); level 1 (tick 4) takes it: virtual slot ``9 // 4 = 2``,
  bucket start 8.
* A task expiring at 40 ms is past level 1 (0 + 16); level 2 (tick 16) puts it in virtual slot
  ``40 // 16 = 2``, bucket start 32.

Each bucket enters the timer's delay queue (a heap) once, when its start is set. At 2 ms the timer pops
the level-0 bucket, advances every level's clock to 2 and runs its tasks. A bucket of level 1 or higher
is *cascaded*: each task is offered to the wheel again and lands one level (or more) lower. In Kafka
that happens when the clock reaches the bucket's start (the 9 ms task moves into level 0 at 8 ms and
runs at 9; the 40 ms task moves into level 1 at 32 ms, into level 0 at 40 ms, and runs). A task is
re-inserted once per level it descends, and adding or cancelling touches one bucket: O(1) whatever the
number of pending tasks.

The one change from Kafka is *when* a cascade happens. In CPython re-inserting a task costs about half a
microsecond, and one upper bucket holds every task expiring within its tick (4.096 s at level 2 with the
default 64 slots): cascading a million of them at once would hold the event loop for half a second.
So every level keeps a second revolution of slots (``2 * wheel_size`` buckets, ``span_ms = 2 *
interval_ms``), used only by cascades: a bucket of level L starting at B may be cascaded as soon as the
clock reaches ``B - tick_L``, because everything in it then fits level L-1's doubled span. The bucket is
queued at that earlier instant, and the timer moves its tasks down in small batches spread over the
whole tick before B (``SystemTimer``). In the example, the 40 ms bucket is queued at 32 - 16 = 16 ms,
and the 8 ms bucket at 8 - 4 = 4 ms. Plain adds still use ``interval_ms`` (Kafka's rule), so the
second revolution is always free when a cascade needs it.
"""

from __future__ import annotations

from heapq import heappush

from sparkyard.master.timer.bucket import TaskCounter, TimerTaskList
from sparkyard.master.timer.task import TimerTask

DelayQueue = list[tuple[int, int, TimerTaskList]]
"""The heap of ``(due_ms, level, bucket)`` shared by all levels of one timer.

``due_ms`` is the bucket's start for level 0 (its tasks run then) and ``start - tick_ms`` for higher
levels (its cascade may begin then). A level has one bucket per start, so ``(due_ms, level)`` is unique
and the heap never compares buckets; the level tells the timer whether to run or to cascade.
"""


class TimingWheel:
    """One level of the hierarchy; see the module docstring for how levels cooperate."""

    __slots__ = (
        "tick_ms",
        "wheel_size",
        "interval_ms",
        "span_ms",
        "current_time_ms",
        "level",
        "_slots",
        "_lead_ms",
        "_buckets",
        "_counter",
        "_queue",
        "_overflow",
    )

    def __init__(
        self,
        tick_ms: int,
        wheel_size: int,
        start_ms: int,
        counter: TaskCounter,
        queue: DelayQueue,
        level: int = 0,
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"tick_ms must be >= 1 and wheel_size >= 2 (got {tick_ms}, {wheel_size})")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.span_ms = 2 * self.interval_ms
        self.current_time_ms = start_ms - start_ms % tick_ms
        self.level = level
        self._slots = 2 * wheel_size
        self._lead_ms = 0 if level == 0 else tick_ms
        self._buckets = [TimerTaskList(counter) for _ in range(self._slots)]
        self._counter = counter
        self._queue = queue
        self._overflow: TimingWheel | None = None

    @property
    def overflow_wheel(self) -> TimingWheel | None:
        """The next level up, or None until a task needed it."""
        return self._overflow

    def add(self, task: TimerTask, cascading: bool = False) -> bool:
        """Put ``task`` into the bucket for its expiration; False if it is cancelled or already due.

        "Due" means the expiration falls within the current tick; the caller then runs it (Kafka's
        ``SystemTimer.addTimerTaskEntry``). A task already in a bucket is moved. ``cascading`` lets the
        task use the second revolution of slots (only for tasks moved down from an upper bucket early).
        """
        if task._cancelled:
            return False
        expiration = task._expiration_ms
        current = self.current_time_ms
        tick = self.tick_ms
        if expiration < current + tick:
            return False
        if expiration < current + (self.span_ms if cascading else self.interval_ms):
            virtual_id = expiration // tick
            bucket = self._buckets[virtual_id % self._slots]
            if task._list is None:
                # TimerTaskList.add, inlined: this is the hot path of every add and every cascade.
                root = bucket._root
                tail = root._prev
                task._next = root
                task._prev = tail
                tail._next = task
                root._prev = task
                task._list = bucket
                self._counter.value += 1
            else:
                bucket.add(task)
            start = virtual_id * tick
            if bucket._expiration_ms != start:
                bucket._expiration_ms = start
                heappush(self._queue, (start - self._lead_ms, self.level, bucket))
            return True
        overflow = self._overflow
        if overflow is None:
            overflow = self._overflow = TimingWheel(
                self.interval_ms, self.wheel_size, current, self._counter, self._queue, self.level + 1
            )
        return overflow.add(task, cascading)

    def advance_clock(self, time_ms: int) -> None:
        """Move this level's clock (and every level above) to the tick containing ``time_ms``."""
        if time_ms >= self.current_time_ms + self.tick_ms:
            self.current_time_ms = time_ms - time_ms % self.tick_ms
            overflow = self._overflow
            if overflow is not None:
                overflow.advance_clock(self.current_time_ms)

    def levels(self) -> int:
        """How many levels exist now (1 + overflow wheels created so far)."""
        wheel: TimingWheel | None = self
        count = 0
        while wheel is not None:
            count += 1
            wheel = wheel._overflow
        return count

    def bucket_for(self, task: TimerTask) -> tuple[int, int] | None:
        """``(level, bucket start ms)`` of the bucket holding ``task``, or None (tests and debugging)."""
        wheel: TimingWheel | None = self
        while wheel is not None:
            for bucket in wheel._buckets:
                if task._list is bucket:
                    return wheel.level, bucket._expiration_ms
            wheel = wheel._overflow
        return None
