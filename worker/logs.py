"""Attempt logs on the worker, and the answers to the master's ``LogRequest`` for them.

Layout: one directory a UTC day under ``<work-dir>/logs``, so writing a log costs no directory creation
(thousands of short tasks a second) and old days are removed whole. In it:

* ``driver-<n>-<pid>.log``: the attempts a warm driver ran that day, one after another. An attempt's log
  is its byte range of that file, named ``<file>@<start>-<end>`` (``<file>@<start>`` while it runs): a
  driver running thousands of attempts a second makes no file per attempt. Creating a file costs far
  more than appending to one (an inode per attempt; on ext4 a search among recently freed inodes that
  took 0.1–0.8 ms of kernel time per file on the benchmark machine), and a day of short attempts would
  be millions of files to list and delete;
* ``<task id>.a<n>.log``: an attempt run in a process of its own (the submit runner), the whole file. A
  driver started for one job's conf writes a file of its own as a warm driver does.

Each begins with a first line saying where the attempt runs (its driver or spark-submit process); an
attempt still queued has none yet. A request names the path the master read from the attempt record
(or none: the attempt has not reported its start, and this worker knows where it is); offsets are the
attempt's own, from the start of its range. Only files inside this worker's log directory are served.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import stat
import time
from collections import OrderedDict
from collections.abc import Container, Iterable
from pathlib import Path
from typing import Callable

from sparkyard.clock import Clock
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Bytes per LogData message.
CHUNK_BYTES = 64 * 1024
# In follow mode a request with nothing new is held this long (a long poll), checking this often.
FOLLOW_HOLD_S = 1.0
FOLLOW_CHECK_S = 0.1
# The longest time between two sweeps of old attempt logs (a sweep runs every retention / 2 at most).
LOG_SWEEP_MAX_S = 3600.0
# How many ended warm-driver attempts' ranges a worker remembers (~4 MiB): a request naming an attempt's
# range as its start report gave it (``file@start``, no end yet) must not read on into the attempts after
# it, and one sent before the master had its result (no path yet) must find it. Past them, the end of an
# open range is found in the file: where the next attempt's first line begins (ATTEMPT_HEADER).
ENDED_KEPT = 16_384
# How every attempt's log begins (its first line says where it runs: worker/runner/driver_process.py).
ATTEMPT_HEADER = "sparkyard: attempt "


def attempt_range(path: str, start: int, end: int | None = None) -> str:
    """The log path of an attempt that is the bytes ``start``..``end`` of ``path`` (to its end: running)."""
    return f"{path}@{start}" if end is None else f"{path}@{start}-{end}"


def _number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_range(log_path: str) -> tuple[str, int, int | None]:
    """A log path's file and the attempt's range in it (a whole file: 0 and None)."""
    path, at, span = log_path.rpartition("@")
    start, _, end = span.partition("-")
    if not at or not _number(start) or not (_number(end) or not end):
        return log_path, 0, None
    return path, int(start), int(end) if end else None


def day_name(now: float) -> str:
    """The UTC day directory name for a wall-clock time."""
    return time.strftime("%Y%m%d", time.gmtime(now))


def remove_older_than(roots: Iterable[Path], cutoff: float, keep: Container[str]) -> int:
    """Delete what sits directly under each root and was last modified before ``cutoff`` (wall clock),
    except the names in ``keep``; returns how many entries went. Runs in a thread: a sweep of a big
    directory must not stall the worker's event loop."""
    removed = 0
    for root in roots:
        try:
            entries = list(root.iterdir())
        except OSError:  # not created yet, or gone
            continue
        for entry in entries:
            if entry.name in keep:
                continue
            try:
                if entry.stat().st_mtime >= cutoff:
                    continue
            except OSError:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


class Retention:
    """Attempt logs and scratch directories older than the retention go, for as long as the worker runs (a
    worker runs for months; a sweep only at start would let its disk fill) — never today's log directory
    nor the scratch of a running task (``running`` gives their ids), however old."""

    def __init__(self, logs: LogFiles, scratch: Path, retention_s: float, clock: Clock,
                 running: Callable[[], Iterable[str]]) -> None:
        self._logs, self._scratch, self._retention_s = logs, scratch, retention_s
        self._clock, self._running = clock, running

    async def sweep(self) -> None:
        now = self._clock.now()
        keep = {self._logs.current_day, day_name(now), *self._running()}
        removed = await asyncio.to_thread(remove_older_than, (self._logs.root, self._scratch),
                                          now - self._retention_s, keep)
        if removed:
            log.info("removed %d log/scratch directories older than %.0fs", removed, self._retention_s)

    async def run(self) -> None:
        interval = min(LOG_SWEEP_MAX_S, self._retention_s / 2)
        while True:
            await self._clock.sleep(interval)
            try:
                await self.sweep()
            except Exception:  # a disk problem must not end the sweeps, or the worker
                log.exception("sweeping old attempt logs failed")


class LogFiles:
    def __init__(self, work_dir: Path) -> None:
        self.root = (work_dir / "logs").resolve()
        self._root_text = str(self.root)
        self._day = ""
        self._day_number = -1  # days since the epoch of ``_day``
        self._ended: OrderedDict[tuple[str, int], str] = OrderedDict()  # (task id, attempt) -> its log path

    @property
    def current_day(self) -> str:
        """The day directory attempts are being written to ('' before the first attempt)."""
        return self._day

    def _today(self, now: float) -> str:
        """The day's directory (created once a day); plain text, as it is built for every attempt."""
        day_number = int(now // 86400)
        if day_number != self._day_number:
            day = day_name(now)
            (self.root / day).mkdir(parents=True, exist_ok=True)
            self._day, self._day_number = day, day_number
        return f"{self._root_text}/{self._day}"

    def path_for(self, task_id: str, attempt: int, now: float) -> str:
        """Where the log of an attempt run in a process of its own goes."""
        return f"{self._today(now)}/{task_id}.a{attempt}.log"

    def driver_file(self, name: str, now: float) -> str:
        """The file a warm driver writes its attempts' logs to today."""
        return f"{self._today(now)}/{name}.log"

    def ended(self, task_id: str, attempt: int, log_path: str) -> None:
        """An attempt ended; its log is ``log_path`` (kept when it is a range: a file of its own is found)."""
        if log_path.endswith(".log"):
            return
        self._ended[task_id, attempt] = log_path
        if len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)

    def _resolve(self, request: pb.LogRequest, current: str | None) -> tuple[Path, int, int | None, bool] | None:
        """The attempt's file, its range in it, and whether that range is open though the attempt ended here."""
        log_path = current or self._ended.get((request.task_id, request.attempt)) or request.log_path
        if log_path:
            name, start, end = parse_range(log_path)
            path = Path(name).resolve()
            open_ended = current is None and end is None and name != log_path
        else:  # an attempt this worker no longer has, which never reported its start: its file, if any
            found = sorted(self.root.glob(f"*/{request.task_id}.a{request.attempt}.log"))
            path = found[-1] if found else self.root / self._day / f"{request.task_id}.a{request.attempt}.log"
            start, end, open_ended = 0, None, False
        if self.root not in path.parents:
            return None
        return path, start, end, open_ended

    async def answer(self, request: pb.LogRequest, current: Callable[[str, int], str | None]) -> pb.LogData:
        """Read the next chunk; in follow mode hold the request while the attempt runs and nothing is new.
        ``current``: the log path of an attempt this worker has (queued or running), else None."""
        if request.offset < 0:
            return pb.LogData(request_id=request.request_id, error=f"offset {request.offset} is negative")
        waited = 0.0
        while True:
            log_path = current(request.task_id, request.attempt)
            alive = log_path is not None
            where = self._resolve(request, log_path)
            if where is None:
                return pb.LogData(request_id=request.request_id, error="path is outside the worker's log directory")
            path, start, end, open_ended = where
            if open_ended:  # not remembered: up to the next attempt's first line (remembered from now on)
                end, found = await asyncio.to_thread(_range_end, path, start)
                if found:
                    self.ended(request.task_id, request.attempt, attempt_range(str(path), start, end))
            try:
                info = path.stat()
                size = info.st_size if stat.S_ISREG(info.st_mode) else 0  # a directory: no log
            except OSError:
                size = 0  # not started yet: its file is made when it starts
            size = max(0, (size if end is None else min(size, end)) - start)
            if size > request.offset:
                data = await asyncio.to_thread(_read, path, start + request.offset,
                                               min(CHUNK_BYTES, size - request.offset))
                end_at = request.offset + len(data)
                return pb.LogData(request_id=request.request_id, data=data, offset=request.offset,
                                  eof=not alive and end_at >= size)
            if not alive or not request.follow or waited >= FOLLOW_HOLD_S:
                return pb.LogData(request_id=request.request_id, offset=request.offset, eof=not alive)
            await asyncio.sleep(FOLLOW_CHECK_S)
            waited += FOLLOW_CHECK_S


def _range_end(path: Path, start: int) -> tuple[int, bool]:
    """Where the attempt whose range of ``path`` begins at ``start`` ends: where the next attempt's first line
    begins (True), else the end of what was read (False: none had begun; one that begins after the read is not
    taken in). Output of its own that looks like such a line ends it early: never later, into another's."""
    marker = ATTEMPT_HEADER.encode()
    try:
        with path.open("rb") as f:
            f.seek(start + 1)  # past its own first line's beginning
            base, data = start + 1, b""
            while chunk := f.read(CHUNK_BYTES):
                data += chunk
                found = data.find(marker)
                if found >= 0:
                    return base + found, True
                keep = min(len(marker) - 1, len(data))
                base, data = base + len(data) - keep, data[len(data) - keep:]
            return base + len(data), False
    except (OSError, OverflowError, ValueError):  # gone, or a start past any file
        return start, False


def _read(path: Path, offset: int, size: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(size)
