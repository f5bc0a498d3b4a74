"""Processes a worker starts are processes it owns: recorded on disk, ended with their process group.

Every driver process and ``spark-submit`` of a worker is started in its own process group (its session)
and recorded in ``<work_dir>/children/<pid>.json`` (pid, process group, start time) before it is given
any work. A worker that was killed with -9 leaves its children to the mechanisms that end them on their
own (``PR_SET_PDEATHSIG`` in a driver, the bootstrap's watchdog under spark-submit, a JVM's end of its
gateway pipe); whatever survived is ended by the next worker started on the same work directory, before
it registers (:meth:`Children.end_leftovers`). The start time tells a leftover from an unrelated process
that got the same pid since.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the worker dies (and at once if it already has). The setting survives
    ``exec``, so it also holds for a program started through :func:`exec_tied`."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        log.warning("PR_SET_PDEATHSIG unavailable; relying on the worker to end this process")
    if os.getppid() != parent_pid:
        os._exit(1)


def tied_command(*cmd: str) -> list[str]:
    """``cmd`` run so that it dies with this process: a program that is not Python (a JVM) cannot set the
    parent-death signal itself, so a small Python step sets it and then execs the program in its place."""
    return [sys.executable, "-m", "sparkyard.worker.children", str(os.getpid()), *cmd]


def start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def _group_members(pgid: int, not_before: int) -> list[int]:
    """Pids of processes in group ``pgid`` that started at or after ``not_before``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and int(fields[19]) >= not_before:
            members.append(int(entry))
    return members


def tree_rss(pid: int) -> int:
    """Resident memory of a process and all its descendants (a driver, its JVM, Python workers)."""
    try:
        root = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
    except psutil.Error:
        return 0


class Children:
    def __init__(self, work_dir: Path) -> None:
        self._dir = work_dir / "children"

    def end_leftovers(self) -> int:
        """End every process group a previous worker on this work directory recorded and left behind."""
        if not self._dir.is_dir():
            return 0
        ended = 0
        for record_path in self._dir.glob("*.json"):
            try:
                record = json.loads(record_path.read_text())
                members = _group_members(int(record["pgid"]), int(record["start"]))
            except (OSError, ValueError, KeyError):
                members = []
            for pid in members:
                try:
                    os.kill(pid, signal.SIGKILL)
                    ended += 1
                except ProcessLookupError:
                    pass
            record_path.unlink(missing_ok=True)
        if ended:
            log.warning("ended %d processes left behind by a previous worker on this work directory", ended)
        return ended

    async def spawn(self, *cmd: str, what: str, **kwargs: Any) -> asyncio.subprocess.Process:
        """Start ``cmd`` in a new session (its own process group) and record it."""
        proc = await asyncio.create_subprocess_exec(*cmd, start_new_session=True, **kwargs)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
            record = {"pid": proc.pid, "pgid": proc.pid, "start": start_time(proc.pid), "what": what}
            (self._dir / f"{proc.pid}.json").write_text(json.dumps(record))
        except OSError:
            # Unrecorded (a full disk), the caller never gets the process: end it rather than leave it running.
            self.kill_group(proc.pid)
            await proc.wait()
            raise
        return proc

    def forget(self, pid: int) -> None:
        """The process and its group have ended."""
        (self._dir / f"{pid}.json").unlink(missing_ok=True)

    @staticmethod
    def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":  # python -m sparkyard.worker.children WORKER_PID PROGRAM [ARGS…] (tied_command)
    die_with_parent(int(sys.argv[1]))
    os.execvp(sys.argv[2], sys.argv[2:])
