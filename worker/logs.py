"""Attempt log files on the worker, and the answers to the master's ``LogRequest`` for them.

Layout: ``<work-dir>/logs/<task id>/attempt-<n>.log``. A request names a path the master read from the
attempt record; only files inside this worker's log directory are served.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

from sparkyard.v1 import sparkyard_pb2 as pb

# Bytes per LogData message.
CHUNK_BYTES = 64 * 1024
# In follow mode a request with nothing new is held this long (a long poll), checking this often.
FOLLOW_HOLD_S = 1.0
FOLLOW_CHECK_S = 0.1


class LogFiles:
    def __init__(self, work_dir: Path) -> None:
        self.root = (work_dir / "logs").resolve()

    def path_for(self, task_id: str, attempt: int) -> Path:
        """The attempt's log file, created empty so it can be followed from the first moment."""
        directory = self.root / task_id
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"attempt-{attempt}.log"
        path.touch()
        return path

    def _resolve(self, request: pb.LogRequest) -> Path | None:
        path = Path(request.log_path).resolve() if request.log_path else self.root / request.task_id / f"attempt-{request.attempt}.log"
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
            try:
                size = path.stat().st_size
            except FileNotFoundError:
                return pb.LogData(request_id=request.request_id, error=f"no log file {path} on this worker")
            alive = running(request.task_id, request.attempt)
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
