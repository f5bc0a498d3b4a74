"""Kafka's ``DelayedOperationPurgatory``: operations that complete when a condition holds or time runs out.

A :class:`DelayedOperation` is waiting for something (a run to finish, workers to drain). It is *watched*
under one or more keys; whoever changes the state behind a key calls :meth:`Purgatory.check_and_complete`
for it, which asks each watching operation to :meth:`~DelayedOperation.try_complete`. If nothing
completes an operation before its timeout, the timing wheel expires it. Either way it completes exactly
once: :meth:`~DelayedOperation.force_complete` is the single door, and only the first caller gets through.

``WaitRun`` is the canonical user::

    class RunFinished(DelayedOperation):
        def __init__(self, run_id, timeout_s, future, state_of):
            super().__init__(timeout_s)
            ...
        def try_complete(self) -> bool:
            return self.state_of(self.run_id).terminal and self.force_complete()
        def on_complete(self) -> None:
            self.future.set_result(self.state_of(self.run_id))   # ended, or still running at the deadline

    purgatory.try_complete_else_watch(RunFinished(...), [run_id])
    ...
    purgatory.check_and_complete(run_id)        # whenever the run changes state: every waiter wakes

Concurrency: everything here runs on the master's event loop thread, so the "race" between a condition
and an expiry is two callbacks in some order, and a plain ``_completed`` flag makes the second a no-op.
Kafka needs a lock per operation and atomics; this module needs none.

Memory under churn: an operation completed through one key (or by expiry) stays in its other keys'
watcher lists until those keys are checked. Kafka purges every list once the number of such completed
but still watched operations passes ``purge_interval``. A purge walks all lists, and on one thread that
walk is a stall, so here it also waits until the completed entries outnumber the live ones: the lists
then hold at most ``2 * delayed + purge_interval`` entries and each purge costs O(1) per entry it removes.
Keys whose lists become empty are dropped.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from sparkyard.master.timer import SystemTimer, TimerTask

DEFAULT_PURGE_INTERVAL = 1000
"""Completed-but-watched entries tolerated before a purge (Kafka's default for its purgatories)."""


class DelayedOperation(TimerTask):
    """An operation that completes once: by its condition (:meth:`try_complete`) or by expiry.

    Subclasses implement :meth:`try_complete` and :meth:`on_complete`, and may override
    :meth:`on_expiration` (called after ``on_complete`` when the timeout, not the condition, won).
    The operation is its own timer task, so its expiry costs no extra object and is cancelled in O(1)
    when it completes early.
    """

    __slots__ = ("timeout_s", "_completed", "_purgatory")

    def __init__(self, timeout_s: float) -> None:
        super().__init__()
        self.timeout_s = timeout_s
        self._completed = False
        self._purgatory: Purgatory | None = None

    @property
    def is_completed(self) -> bool:
        return self._completed

    def try_complete(self) -> bool:
        """Check the condition; if it holds, ``return self.force_complete()``. Otherwise return False."""
        raise NotImplementedError

    def force_complete(self) -> bool:
        """Complete now, whatever the condition. True only for the one call that completed it."""
        if self._completed:
            return False
        self._completed = True
        self.cancel()
        purgatory = self._purgatory
        if purgatory is not None:
            purgatory._delayed -= 1
        self.on_complete()
        return True

    def on_complete(self) -> None:
        """Deliver the outcome (for example, resolve a future). Runs exactly once."""

    def on_expiration(self) -> None:
        """Called after :meth:`on_complete` when the operation completed by timing out."""

    def run(self) -> None:
        """The timer's expiry path."""
        if self.force_complete():
            self.on_expiration()


class Purgatory:
    """Delayed operations of one kind, watched by key and expired through a shared :class:`SystemTimer`."""

    def __init__(self, timer: SystemTimer, name: str, purge_interval: int = DEFAULT_PURGE_INTERVAL) -> None:
        self.timer = timer
        self.name = name
        self.purge_interval = purge_interval
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._delayed = 0
        self._watched_entries = 0

    @property
    def delayed(self) -> int:
        """Operations watched here and not yet completed."""
        return self._delayed

    def watched(self, key: Hashable) -> int:
        """Entries in ``key``'s watcher list (completed ones may linger until the next check or purge)."""
        ops = self._watchers.get(key)
        return 0 if ops is None else len(ops)

    @property
    def watched_total(self) -> int:
        """Entries in all watcher lists."""
        return self._watched_entries

    @property
    def keys(self) -> int:
        """Keys with a watcher list."""
        return len(self._watchers)

    def try_complete_else_watch(self, op: DelayedOperation, keys: Iterable[Hashable]) -> bool:
        """Complete ``op`` now if its condition holds, else watch it on every key and arm its expiry.

        Kafka's order: try; watch on each key; try again; only then add the expiry to the timer. Kafka
        needs the second try because another thread may change the state between the first try and the
        watch. Here nothing can run in between (no ``await``), unless iterating ``keys`` has side
        effects, so the second try is cheap insurance that keeps the contract identical. Returns True
        if ``op`` completed during this call; False if it is now watched, or was already completed.
        """
        if op._purgatory is not None:
            raise ValueError(f"{op!r} is already watched by purgatory {op._purgatory.name!r}")
        if op._completed:
            return False
        if op.try_complete():
            return True
        op._purgatory = self
        self._delayed += 1
        watchers = self._watchers
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = [op]
            else:
                ops.append(op)
            self._watched_entries += 1
        if op.try_complete():
            return True
        self.timer.add(op, self.timer.clock.monotonic() + op.timeout_s)
        self._maybe_purge()
        return False

    def check_and_complete(self, key: Hashable) -> int:
        """Try every operation watching ``key``; drop completed ones. Returns how many completed now."""
        watchers = self._watchers
        ops = watchers.pop(key, None)
        if ops is None:
            return 0
        # The list is taken out while it is walked: a completion callback may watch new operations on
        # this key (or check it again), and whatever it leaves under the key is merged back afterwards.
        completed = 0
        kept: list[DelayedOperation] = []
        for op in ops:
            if op._completed:
                continue
            if op.try_complete():
                completed += 1
            elif not op._completed:
                kept.append(op)
        self._watched_entries -= len(ops) - len(kept)
        added_meanwhile = watchers.pop(key, None)
        if added_meanwhile:
            kept.extend(added_meanwhile)
        if kept:
            watchers[key] = kept
        return completed

    def complete_watchers(self, key: Hashable) -> int:
        """Complete every operation watching ``key`` now: for operations whose condition IS the event on
        their key (a run ended), the event needs no second check. Returns how many completed."""
        ops = self._watchers.pop(key, None)
        if ops is None:
            return 0
        self._watched_entries -= len(ops)
        return sum(1 for op in ops if op.force_complete())

    def purge_completed(self) -> int:
        """Drop completed operations from every watcher list, and empty lists; returns entries removed."""
        removed = 0
        for key in list(self._watchers):
            ops = self._watchers[key]
            live = [op for op in ops if not op._completed]
            removed += len(ops) - len(live)
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]
        self._watched_entries -= removed
        return removed

    def _maybe_purge(self) -> None:
        lingering = self._watched_entries - self._delayed
        if lingering > self.purge_interval and lingering > self._delayed:
            self.purge_completed()

    def cancel_all(self) -> int:
        """Complete every watched operation now (shutdown, or losing leadership); returns how many."""
        completed = 0
        for key in list(self._watchers):
            for op in self._watchers.pop(key, []):
                if op.force_complete():
                    completed += 1
        self._watched_entries = 0
        return completed

    def __repr__(self) -> str:
        return f"<Purgatory {self.name!r} delayed={self._delayed} watched={self._watched_entries}>"
