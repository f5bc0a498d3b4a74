"""Whether the worker's work directory has room to start an attempt: the worker's disk.

Why the worker watches it: every attempt needs the work directory before its task's code runs — its log,
its scratch directory, the task file a ``spark-submit`` reads, the record of a new driver. On a full disk
each of those fails at once, so a worker that kept offering slots failed every task it was given within
milliseconds, each failure using up one of the task's attempts (a full disk burned the retries of every
job that reached it). So while the disk has less than ``min_free_bytes`` free the worker offers no slot
and says ``degraded`` with the reason, like an unreachable Spark master (worker/engine.py), the attempts
waiting for a slot are handed back, and an attempt that could not start for want of space is handed back
too (RELEASED: no attempt used up; the slots do both). Running attempts are left alone: they may finish.
The disk is probed every ``PROBE_S``, and once more right before each attempt starts; the worker offers
its slots again, by itself, as soon as there is room (after a refused write, ``REFUSED_HOLD_S`` at the
soonest).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import time
from pathlib import Path
from typing import Callable

from sparkyard.worker.readiness import Condition

log = logging.getLogger(__name__)

# How often the free space is probed.
PROBE_S = 1.0
# Before an attempt starts the room is measured again unless it was within this long (check_recent).
START_CHECK_S = 0.1
# Less free space than this in the work directory and no attempt is started: an attempt's log, scratch
# directory and task file, and a driver's record, are small, but a disk this close to full fails them.
MIN_FREE_BYTES = 8 * 2**20
# Fewer free inodes than this (on a file system that counts them) is full too: a file cannot be made.
MIN_FREE_INODES = 64
# After a write refused for want of space, the disk stays full this long even if a probe finds room (the
# refused write may be on a volume the probe does not measure, such as a separate ``logs`` mount): without
# it the worker would take a task, hand it back and take the next one every probe.
REFUSED_HOLD_S = 10.0
# The errors that say a write failed for want of space (a full disk, an exhausted quota).
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def free_space(path: Path) -> tuple[int, int]:
    """(bytes, inodes) free to an unprivileged writer on the file system holding ``path``; inodes -1 where
    the file system does not count them."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_favail if st.f_files else -1


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a write refused for want of space."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


class Disk(Condition):
    """The work directory's room: ``problem`` is '' while it has at least ``min_free_bytes`` free, else one
    line saying it is full. ``on_change`` is called on every change of ``problem``. ``free`` measures the
    free (bytes, inodes) of a path (see :func:`free_space`)."""

    def __init__(self, path: Path, min_free_bytes: int = MIN_FREE_BYTES,
                 free: Callable[[Path], tuple[int, int]] = free_space,
                 on_change: Callable[[str], None] | None = None) -> None:
        super().__init__(log, "no slot offered, queued tasks handed back, until there is room",
                         f"work directory {path} has room again", on_change)
        self.path = path
        self.min_free_bytes = min_free_bytes
        self._free = free
        self._held_until = 0.0  # monotonic time before which a refused write keeps the disk full
        self._measured_at = -START_CHECK_S  # monotonic time of the last check

    def measure(self) -> str:
        """The problem now ('' when there is room), without recording it (safe from any thread)."""
        try:
            free, inodes = self._free(self.path)
        except FileNotFoundError:  # not made yet: the worker makes it at its start
            return ""
        except OSError as exc:
            return f"work directory {self.path} cannot be measured ({exc})"
        if free < self.min_free_bytes:
            return (f"work directory {self.path} is full ({free / 2**20:.1f} MiB free, "
                    f"{self.min_free_bytes / 2**20:.0f} MiB needed to start an attempt)")
        if 0 <= inodes < MIN_FREE_INODES:
            return f"work directory {self.path} is full ({inodes} inodes free, {MIN_FREE_INODES} needed)"
        return ""

    def check(self) -> str:
        """Measure now and record it (on the event loop); returns the problem, '' when there is room."""
        self._measured_at = time.monotonic()
        self._set(self.measure())
        return self.problem

    def check_recent(self) -> str:
        """:meth:`check`, unless it measured within the last START_CHECK_S: before an attempt starts. A
        worker starts thousands of short attempts a second, and a ``statvfs`` for each was a few percent of
        its CPU; a disk filled within that moment refuses the attempt's first write, which hands it back
        just the same (:meth:`refused`)."""
        if time.monotonic() - self._measured_at < START_CHECK_S:
            return self.problem
        return self.check()

    def refused(self, exc: OSError) -> None:
        """A write for an attempt's start was refused for want of space: full now, whatever the last probe
        measured (another writer may have filled it since), for at least REFUSED_HOLD_S."""
        self._held_until = time.monotonic() + REFUSED_HOLD_S
        self._set(f"work directory {self.path} is full ({exc.strerror or exc})")

    def _set(self, problem: str) -> None:
        if not problem and time.monotonic() < self._held_until:  # a refused write holds it full a while yet
            return
        self._change(problem)

    async def run(self) -> None:
        """Probe until cancelled."""
        while True:
            self._set(await asyncio.to_thread(self.measure))
            await asyncio.sleep(PROBE_S)
