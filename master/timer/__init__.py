"""Sparkyard's timer: Kafka's hierarchical timing wheel, driven from asyncio by one armed wake-up.

``SystemTimer`` is the entry point; the other names are its parts (see ``docs/timer.md``)::

    timer = SystemTimer(clock)
    timer.start()
    task = timer.schedule(2.5, on_timeout)
    task.cancel()
"""

from __future__ import annotations

from sparkyard.master.timer.bucket import TaskCounter, TimerTaskList
from sparkyard.master.timer.system_timer import (
    DEFAULT_CASCADE_BATCH,
    DEFAULT_TICK_MS,
    DEFAULT_WHEEL_SIZE,
    SystemTimer,
)
from sparkyard.master.timer.task import TimerTask, TimerTaskEntry
from sparkyard.master.timer.wheel import TimingWheel

__all__ = [
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
