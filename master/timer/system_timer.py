"""The asyncio driver of the timing wheel: Kafka's ``SystemTimer`` with one armed wake-up.

Kafka's reaper thread polls a ``DelayQueue`` of buckets. Here the delay queue is a heap of buckets and the
timer keeps exactly one wake-up armed with the injected clock (``Clock.call_later``) for the earliest
bucket. Adding a task that opens an earlier bucket cancels that wake-up and arms an earlier one; adding
into an existing bucket costs no clock call at all. A wake-up pops every bucket that is due and advances
the wheel to each one's time in turn: a level-0 bucket's tasks run; an upper bucket joins the
*cascading* heap, and each wake-up then moves at most ``cascade_batch`` of its tasks one level down,
re-arming for the next loop turn while any remain. Upper buckets are queued one of their ticks before
they start (see ``wheel.py``), so the batches are spread over that tick and a cascade never holds the
loop for long; a cascade that fell behind (an overloaded loop) is finished in full before anything at
or after its start runs, so order and "never early" hold regardless.

Deadlines are monotonic seconds; the wheel works in integer milliseconds, and a deadline is rounded *up*
to the next tick. A task therefore never runs before its deadline (Kafka's rounding lets a task fire up to
one tick early, which for a cron trigger could compute the same fire time again and fire twice); the
price is up to one tick of lateness, 1 ms with the default tick.

Tasks that are already due when added (delay <= 0, a deadline in the past, or a deadline inside the
current tick) are not run inline: they go to a due list that the same single wake-up drains on the next
loop turn (armed with a zero delay). That keeps a callback that schedules another zero-delay callback
from recursing, and keeps "add" free of user code. The due list is itself a bucket, so a due task can
still be cancelled or moved in O(1) and counts in :attr:`SystemTimer.size`.

Everything runs on the event loop thread: no locks. A callback that raises is logged and the timer goes on.
"""

from __future__ import annotations

import logging
import math
from heapq import heappop, heappush
from typing import Callable

from sparkyard.clock import Cancellable, Clock
from sparkyard.master.timer.bucket import TaskCounter, TimerTaskList
from sparkyard.master.timer.task import TimerTask
from sparkyard.master.timer.wheel import DelayQueue, TimingWheel

logger = logging.getLogger(__name__)

DEFAULT_TICK_MS = 1
"""Lateness budget: the asyncio loop wakes at millisecond granularity (epoll), so a finer tick buys
nothing, and a coarser one adds its width to every timer's lateness (docs/timer.md)."""

DEFAULT_WHEEL_SIZE = 2048
"""Slots per level (plus as many again for early cascades). Cascades are spread out, so the size no longer
decides the stalls, only how often a task is re-inserted and how much memory the buckets take. Measured
in docs/timer.md: with 2048, delays up to 2 s (the benchmark's spread, and most retries and short waits)
never cascade and 1M of them expire at 2.4 M/s against 1.0 M/s with 256; two levels reach 70 minutes.
A level costs about 0.5 MB of buckets."""

DEFAULT_CASCADE_BATCH = 1000
"""Tasks moved down a level per loop turn while a cascade is spread out: about half a millisecond of
CPython work, so a cascade never holds the loop longer than a tick (docs/timer.md)."""

_NEVER = 1 << 62
"""``_armed_ms`` when no wake-up is armed: larger than any bucket expiration."""

_IMMEDIATE = -1
"""``_armed_ms`` when the wake-up is armed for the next loop turn (the due list is not empty)."""

_ROUNDING_SLACK = 1e-6
"""Ticks of floating-point noise forgiven when rounding a deadline up, so ``1000.001`` seconds becomes
1000001 ms rather than 1000002 when ``1000.001 * 1000`` comes out as ``1000001.0000000001``."""


class SystemTimer:
    """Runs callbacks at deadlines, driven by one wake-up armed on the injected clock.

    Call :meth:`start` on the event loop before anything can fire; tasks added earlier wait. After
    :meth:`close` (or ``await stop()``) no callback runs and adding raises ``RuntimeError``.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        cascade_batch: int = DEFAULT_CASCADE_BATCH,
    ) -> None:
        self._clock = clock
        self._monotonic = clock.monotonic
        self._tick_ms = tick_ms
        self._ticks_per_s = 1000.0 / tick_ms
        self._counter = TaskCounter()
        self._queue: DelayQueue = []
        self._wheel = TimingWheel(tick_ms, wheel_size, self._now_ms(), self._counter, self._queue)
        self._due = TimerTaskList(self._counter)
        self._cascading: list[tuple[int, int, TimerTaskList]] = []
        self._cascade_batch_size = cascade_batch
        self._handle: Cancellable | None = None
        self._armed_ms = _NEVER
        self._started = False
        self._closed = False
        self.arms = 0
        """How many times a wake-up was armed with ``clock.call_later`` (a counter for tests and metrics)."""

    # -- scheduling ---------------------------------------------------------------------------------

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> TimerTask:
        """Run ``callback`` once, ``delay_s`` seconds from now (on the next loop turn if ``delay_s <= 0``)."""
        task = TimerTask(self._monotonic() + delay_s, callback)
        if delay_s <= 0.0:
            self._make_due(task)
        else:
            self._insert(task)
        return task

    def schedule_at(self, monotonic_deadline_s: float, callback: Callable[[], None]) -> TimerTask:
        """Run ``callback`` once at a deadline on the clock's :meth:`~sparkyard.clock.Clock.monotonic`."""
        task = TimerTask(monotonic_deadline_s, callback)
        if monotonic_deadline_s <= self._monotonic():
            self._make_due(task)
        else:
            self._insert(task)
        return task

    def schedule_at_wall(self, wall_ts_s: float, callback: Callable[[], None]) -> TimerTask:
        """Run ``callback`` once at a wall-clock instant (epoch seconds).

        The instant is converted to a monotonic deadline *now*; a later wall-clock step (NTP) does not
        move it. Callers that must follow the wall clock (cron) re-compute and re-schedule on firing.
        """
        clock = self._clock
        return self.schedule_at(clock.monotonic() + (wall_ts_s - clock.now()), callback)

    def add(self, task: TimerTask, deadline: float | None = None) -> bool:
        """Schedule ``task`` (typically a subclass overriding ``run``) at ``deadline`` or ``task.deadline``.

        A task that is already pending is *moved*. Returns True if the task now waits in the wheel; False
        if it was refused (cancelled) or is already due, in which case it runs on the next loop turn (Kafka's
        ``addTimerTaskEntry``).
        """
        if deadline is not None:
            task._deadline = deadline
        if task._cancelled:
            return False
        if not math.isfinite(task._deadline):
            raise ValueError(f"a timer task needs a finite deadline, got {task._deadline}")
        if task._deadline <= self._monotonic():
            self._make_due(task)
            return False
        return self._insert(task)

    def _insert(self, task: TimerTask) -> bool:
        if self._closed:
            raise RuntimeError("the timer is closed")
        tick = self._tick_ms
        task._expiration_ms = math.ceil(task._deadline * self._ticks_per_s - _ROUNDING_SLACK) * tick
        if self._wheel.add(task):
            if self._queue[0][0] < self._armed_ms:
                self._arm()
            return True
        self._make_due(task)
        return False

    def _make_due(self, task: TimerTask) -> None:
        if self._closed:
            raise RuntimeError("the timer is closed")
        self._due.add(task)
        if self._armed_ms != _IMMEDIATE:
            self._arm()

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> None:
        """Arm the wake-up; call on the event loop (``SystemClock.call_later`` needs the running loop)."""
        if self._closed:
            raise RuntimeError("the timer is closed")
        self._started = True
        self._arm()

    def close(self) -> None:
        """Disarm: nothing runs after this returns, not even the rest of a tick being processed."""
        self._closed = True
        handle = self._handle
        self._handle = None
        self._armed_ms = _NEVER
        if handle is not None:
            handle.cancel()

    async def stop(self) -> None:
        """``close()`` for ``async`` shutdown sequences."""
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- introspection ------------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Tasks pending: in the wheel or due and waiting for the next loop turn."""
        return self._counter.value

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def tick_ms(self) -> int:
        return self._tick_ms

    @property
    def wheel(self) -> TimingWheel:
        """The level-0 wheel (for tests and metrics)."""
        return self._wheel

    @property
    def armed_ms(self) -> int | None:
        """The bucket expiration the wake-up is armed for (-1: next loop turn), or None if disarmed."""
        return None if self._armed_ms == _NEVER else self._armed_ms

    # -- the wake-up --------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._monotonic() * 1000.0)

    def _arm(self) -> None:
        """Make sure a wake-up is armed no later than the earliest due list or bucket."""
        if not self._started or self._closed:
            return
        due_root = self._due._root
        if due_root._next is not due_root or self._cascading:
            target = _IMMEDIATE
        elif self._queue:
            target = self._queue[0][0]
        else:
            return
        if target >= self._armed_ms:
            return
        if self._handle is not None:
            self._handle.cancel()
        delay = 0.0 if target == _IMMEDIATE else target / 1000.0 - self._monotonic()
        self._armed_ms = target
        self.arms += 1
        self._handle = self._clock.call_later(max(0.0, delay), self._wake)

    def _wake(self) -> None:
        """Run the due list, run due level-0 buckets, and move cascading buckets down a batch at a time."""
        armed = self._armed_ms
        self._handle = None
        self._armed_ms = _NEVER
        if self._closed:
            return
        # The clock promised to call us no earlier than the armed expiration; trusting that (instead of
        # re-reading a float that may round to the millisecond before) guarantees progress.
        now_ms = max(self._now_ms(), armed)
        try:
            due = self._due
            if due._root._next is not due._root:
                self._due = TimerTaskList(self._counter)
                due.flush(self._run)
            queue = self._queue
            cascading = self._cascading
            wheel = self._wheel
            while queue and queue[0][0] <= now_ms and not self._closed:
                due_ms = queue[0][0]
                if cascading and cascading[0][0] <= due_ms:
                    # A cascade that fell behind must finish before anything at or after its start runs.
                    self._cascade_until(due_ms)
                    continue
                _, level, bucket = heappop(queue)
                wheel.advance_clock(due_ms)
                if level == 0:
                    self._expire(bucket)
                else:
                    heappush(cascading, (bucket._expiration_ms, level, bucket))
            if cascading and not self._closed:
                self._cascade_until(now_ms)
                self._cascade_batch(self._cascade_batch_size)
        finally:
            self._arm()

    def _cascade_until(self, time_ms: int) -> None:
        """Finish every cascade whose bucket starts at or before ``time_ms``, whatever it costs."""
        cascading = self._cascading
        reinsert = self._reinsert_cascading
        while cascading and cascading[0][0] <= time_ms and not self._closed:
            heappop(cascading)[2].flush(reinsert)

    def _cascade_batch(self, budget: int) -> None:
        """Move up to ``budget`` tasks from the earliest cascading buckets one level down (or run them)."""
        cascading = self._cascading
        reinsert = self._reinsert_cascading
        while cascading and budget > 0 and not self._closed:
            bucket = cascading[0][2]
            root = bucket._root
            head = root._next
            while head is not root and budget > 0:
                task: TimerTask = head
                bucket.remove(task)
                reinsert(task)
                budget -= 1
                head = root._next
            if head is root:
                heappop(cascading)
                bucket._expiration_ms = -1

    def _expire(self, bucket: TimerTaskList) -> None:
        """Run every task of a due level-0 bucket.

        The same as ``bucket.flush(self._reinsert_cascading)`` (a level-0 bucket holds only tasks of the
        tick that is due, so the wheel would refuse each one), minus two calls per task: expiry is the
        hot path at 1M timers. The head is re-read after each callback, which may cancel or move later tasks.
        """
        root = bucket._root
        counter = self._counter
        head = root._next
        while head is not root:
            task: TimerTask = head
            nxt = task._next
            root._next = nxt
            nxt._prev = root
            del task._next, task._prev
            task._list = None
            counter.value -= 1
            if self._closed:
                return
            try:
                task.run()
            except Exception:
                logger.exception("timer task %r raised; the timer goes on", task)
            head = root._next
        bucket._expiration_ms = -1

    def _reinsert_cascading(self, task: TimerTask) -> None:
        """Kafka's ``addTimerTaskEntry`` for cascaded tasks: into a lower level, or run if already due."""
        if not self._wheel.add(task, True) and not task._cancelled:
            self._run(task)

    def _run(self, task: TimerTask) -> None:
        if self._closed:
            return
        try:
            task.run()
        except Exception:
            logger.exception("timer task %r raised; the timer goes on", task)
