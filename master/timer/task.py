"""Timer tasks: what the timing wheel stores.

Kafka keeps two objects per timer: the ``TimerTask`` the caller holds and a ``TimerTaskEntry`` that the
task is wrapped in each time it is added, so that a re-added task's stale entry can be told apart from the
current one across threads. Sparkyard's timer runs on one asyncio thread, and in CPython every extra
object per timer is paid twice: once to allocate it and again in every cyclic-GC pass over the live set.
Measured on this machine (``docs/timer.md``), allocating one million two-object timers with the GC on runs
at 0.84 M/s against 1.50 M/s for one object. So here the entry is the task's *base class*: the link fields
(``TimerTaskEntry``) and the task fields live in the same object, and moving a task re-links that object
instead of allocating a new entry. Everything Kafka's entry did is still done: an add first unlinks the
task from any bucket it is in (Kafka's ``setTimerTaskEntry`` removing the old entry), and a cancel
unlinks it in O(1).

Unlinked tasks hold no references to their neighbours (the link slots are emptied, not pointed at
themselves), so a fired or cancelled task that nobody else holds is freed at once by reference counting:
the timer never leaves cyclic garbage for the GC to find.
"""

from __future__ import annotations

import math
from typing import Callable, Protocol


class Holder(Protocol):
    """What holds a pending task (a bucket, :class:`~sparkyard.master.timer.bucket.TimerTaskList`).

    Named by what a task needs of it, so that this module does not import the bucket's, which imports it.
    """

    def remove(self, task: TimerTask) -> None: ...


class TimerTaskEntry:
    """A link in a bucket's doubly linked list.

    A bucket's sentinel is a bare ``TimerTaskEntry``; every other link is a :class:`TimerTask`. The slots
    are *empty* (not ``None``) while a task is outside any bucket, which keeps them typed as non-optional
    and leaves no self-reference behind.
    """

    __slots__ = ("_next", "_prev")

    _next: TimerTaskEntry
    _prev: TimerTaskEntry


class TimerTask(TimerTaskEntry):
    """Something to run at a monotonic deadline.

    Use it directly with a ``callback``, or subclass it and override :meth:`run` (as
    :class:`~sparkyard.master.purgatory.DelayedOperation` does) and hand it to ``SystemTimer.add``.

    States: *pending* (in a bucket, or due and waiting for the next loop turn), *fired* (``run`` was
    called; the task may be added again) and *cancelled* (terminal: adding it again is refused).
    """

    __slots__ = ("_expiration_ms", "_list", "_deadline", "_callback", "_cancelled")

    def __init__(self, deadline: float = math.inf, callback: Callable[[], None] | None = None) -> None:
        self._deadline = deadline
        self._callback = callback
        self._expiration_ms = 0
        self._list: Holder | None = None
        self._cancelled = False

    @property
    def deadline(self) -> float:
        """When the task is due, in seconds of the timer clock's :meth:`~sparkyard.clock.Clock.monotonic`."""
        return self._deadline

    @property
    def expiration_ms(self) -> int:
        """The deadline rounded *up* to the timer's tick, in integer milliseconds (set when added)."""
        return self._expiration_ms

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def pending(self) -> bool:
        """True while the task sits in a bucket of the wheel or in the timer's due list."""
        return self._list is not None

    def cancel(self) -> None:
        """Stop the task from running: O(1), it unlinks the task from its bucket and frees the callback.

        Cancelling is final. It is safe at any time: before the task was added, after it fired, or from
        inside another task's callback in the same tick.
        """
        self._cancelled = True
        self._callback = None
        bucket = self._list
        if bucket is not None:
            bucket.remove(self)

    def run(self) -> None:
        """Called on the event loop thread when the deadline has passed. Override in subclasses."""
        callback = self._callback
        if callback is not None:
            callback()

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else ("pending" if self._list is not None else "idle")
        return f"<{type(self).__name__} deadline={self._deadline:.3f} {state}>"
