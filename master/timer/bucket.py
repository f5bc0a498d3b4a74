"""One bucket of a timing wheel: Kafka's ``TimerTaskList``.

A bucket holds every task whose expiration falls into one tick-wide slot of one wheel level. It is a
circular doubly linked list around a sentinel, so add (append at the tail), remove (unlink) and the
"is it empty" test are O(1) and need no branches for the first or last element.

All buckets of all levels of one timer share a :class:`TaskCounter`; its value is the number of tasks
pending in the timer (Kafka's shared ``AtomicInteger taskCounter``).
"""

from __future__ import annotations

from typing import Callable, Iterator

from sparkyard.master.timer.task import TimerTask, TimerTaskEntry


class TaskCounter:
    """A mutable count shared by every bucket of one timer (single-threaded, so a plain int)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class TimerTaskList:
    """A bucket: the tasks of one slot, with the slot's expiration.

    ``expiration_ms`` is the start of the slot this bucket currently stands for, or -1 while the bucket
    is not in the timer's delay queue. :meth:`set_expiration` tells the wheel whether the bucket must
    be (re-)queued, which happens once per revolution rather than once per task.
    """

    __slots__ = ("_root", "_counter", "_expiration_ms")

    def __init__(self, counter: TaskCounter) -> None:
        root = TimerTaskEntry()
        root._next = root
        root._prev = root
        self._root = root
        self._counter = counter
        self._expiration_ms = -1

    @property
    def expiration_ms(self) -> int:
        return self._expiration_ms

    def set_expiration(self, expiration_ms: int) -> bool:
        """Set the slot start; True if it changed (the bucket then needs a place in the delay queue)."""
        if self._expiration_ms == expiration_ms:
            return False
        self._expiration_ms = expiration_ms
        return True

    def add(self, task: TimerTask) -> None:
        """Append ``task``, first unlinking it from whichever bucket holds it (this moves a task)."""
        current = task._list
        if current is not None:
            current.remove(task)
        root = self._root
        tail = root._prev
        task._next = root
        task._prev = tail
        tail._next = task
        root._prev = task
        task._list = self
        self._counter.value += 1

    def remove(self, task: TimerTask) -> None:
        """Unlink ``task`` if it is in this bucket; O(1)."""
        if task._list is not self:
            return
        prev = task._prev
        nxt = task._next
        prev._next = nxt
        nxt._prev = prev
        del task._next, task._prev
        task._list = None
        self._counter.value -= 1

    def flush(self, reinsert: Callable[[TimerTask], None]) -> None:
        """Remove every task and hand each to ``reinsert`` (which re-adds it lower down or runs it).

        The head is re-read after every call, so ``reinsert`` may cancel, move or add any task, including
        ones still in this bucket; a task appended meanwhile is flushed too.
        """
        root = self._root
        head = root._next
        while head is not root:
            task: TimerTask = head
            self.remove(task)
            reinsert(task)
            head = root._next
        self._expiration_ms = -1

    def is_empty(self) -> bool:
        return self._root._next is self._root

    def __iter__(self) -> Iterator[TimerTask]:
        """The tasks in insertion order (for tests and debugging; do not mutate while iterating)."""
        root = self._root
        head = root._next
        while head is not root:
            task: TimerTask = head
            yield task
            head = head._next

    def __repr__(self) -> str:
        return f"<TimerTaskList expiration_ms={self._expiration_ms}>"
