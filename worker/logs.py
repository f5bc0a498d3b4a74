"""Attempt log files on the worker, and the answers to the master's ``LogRequest`` for them.

Layout: ``<work-dir>/logs/<UTC day>/<task id>.a<n>.log`` — one directory a day, so writing a log costs
no directory creation (thousands of short tasks a second) and old days are removed whole. A request
names the path the master read from the attempt record; only files inside this worker's log directory
are served. The file is made when the attempt starts, with a first line saying where it runs (its driver or
spark-submit process); an attempt still queued has none yet.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
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

    @property
    def current_day(self) -> str:
        """The day directory attempts are being written to ('' before the first attempt)."""
        return self._day

    def path_for(self, task_id: str, attempt: int, now: float) -> str:
        """Where the attempt's log goes (its day directory is created once a day); plain text, as it is
        built for every attempt."""
        day_number = int(now // 86400)
        if day_number != self._day_number:
            day = day_name(now)
            (self.root / day).mkdir(parents=True, exist_ok=True)
            self._day, self._day_number = day, day_number
        return f"{self._root_text}/{self._day}/{task_id}.a{attempt}.log"

    def _resolve(self, request: pb.LogRequest) -> Path | None:
        if request.log_path:
            path = Path(request.log_path).resolve()
        else:  # the attempt has not reported its start yet: find its file in the recent days
            found = sorted(self.root.glob(f"*/{request.task_id}.a{request.attempt}.log"))
            path = found[-1] if found else self.root / self._day / f"{request.task_id}.a{request.attempt}.log"
        if self.root not in path.parents:
            return None
        return path

    async def answer(self, request: pb.LogRequest, running: Callable[[str, int], bool]) -> pb.LogData:
        """Read the next chunk; in follow mode hold the request while the attempt runs and nothing is new."""
        path = self._resolve(request)
        if path is None:
            return pb.LogData(request_id=request.request_id, error="path is outside the worker's log directory")
        waited = 0.0
        while True:
            alive = running(request.task_id, request.attempt)
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                size = 0  # not started yet: its file is made when it starts
            if size > request.offset:
                data = await asyncio.to_thread(_read, path, request.offset, CHUNK_BYTES)
                end = request.offset + len(data)
                return pb.LogData(request_id=request.request_id, data=data, offset=request.offset,
                                  eof=not alive and end >= size)
            if not alive or not request.follow or waited >= FOLLOW_HOLD_S:
                return pb.LogData(request_id=request.request_id, offset=request.offset, eof=not alive)
            await asyncio.sleep(FOLLOW_CHECK_S)
            waited += FOLLOW_CHECK_S


def _read(path: Path, offset: int, size: int) -> bytes:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read(size)
