"""Attempt logs, fetched from the worker that wrote them over its Connect stream.

Logs stay on the worker's disk (one file per attempt). ``StreamTaskLog`` pulls them chunk by chunk: the
master sends a ``LogRequest`` (offset, follow) on the worker's stream and waits for the matching
``LogData``; in follow mode the worker holds the request until new bytes appear or about a second passes
(a long poll), so a quiet log costs one message a second and a busy one streams at once. Pulling one
chunk at a time is the flow control: a slow client never makes the worker buffer a whole log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import AsyncIterator

from sparkyard.errors import InvalidArgument, NotFound, Unavailable
from sparkyard.master.records import TaskRecord
from sparkyard.master.registry import WorkerRegistry
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# How long the master waits for one chunk before declaring the worker unresponsive.
CHUNK_TIMEOUT_S = 15.0


class LogRelay:
    def __init__(self, registry: WorkerRegistry) -> None:
        self._registry = registry
        self._waiting: dict[str, asyncio.Future[pb.LogData]] = {}
        self._ids = itertools.count(1)

    def deliver(self, data: pb.LogData) -> None:
        """A LogData arrived on some worker's stream."""
        future = self._waiting.pop(data.request_id, None)
        if future is not None and not future.done():
            future.set_result(data)

    def attempt_log(self, task: TaskRecord, attempt: int, offset: int, follow: bool) -> AsyncIterator[pb.LogChunk]:
        """The log of one of a task's attempts (0: its latest), from ``offset``; checks both."""
        if not task.attempts:
            raise NotFound(f"task {task.id} has not started yet (state {task.state.value})")
        number = attempt or task.attempts[-1].number
        record = next((a for a in task.attempts if a.number == number), None)
        if record is None:
            raise NotFound(f"task {task.id} has no attempt {number} (it has {len(task.attempts)})")
        if offset < 0:
            raise InvalidArgument("offset: must not be negative")
        return self.stream(record.worker, task.id, number, record.log_path, offset, follow)

    async def stream(self, worker_id: str, task_id: str, attempt: int, log_path: str, offset: int,
                     follow: bool) -> AsyncIterator[pb.LogChunk]:
        """Chunks of one attempt's log from ``offset``; in follow mode until the attempt has ended."""
        while True:
            request_id = f"log-{next(self._ids)}"
            future: asyncio.Future[pb.LogData] = asyncio.get_running_loop().create_future()
            self._waiting[request_id] = future
            request = pb.LogRequest(request_id=request_id, task_id=task_id, attempt=attempt, log_path=log_path,
                                    offset=offset, follow=follow)
            if not self._registry.send(worker_id, pb.MasterMessage(log_request=request)):
                self._waiting.pop(request_id, None)
                raise Unavailable(f"worker {worker_id} that ran attempt {attempt} of task {task_id} is not connected")
            try:
                data = await asyncio.wait_for(future, CHUNK_TIMEOUT_S)
            except asyncio.TimeoutError:
                raise Unavailable(f"worker {worker_id} did not answer a log request in {CHUNK_TIMEOUT_S:.0f}s") from None
            finally:
                self._waiting.pop(request_id, None)
            if data.error:
                raise NotFound(f"log of task {task_id} attempt {attempt} on worker {worker_id}: {data.error}")
            if data.data or data.eof:
                yield pb.LogChunk(data=data.data, offset=data.offset, eof=data.eof)
            offset = data.offset + len(data.data)
            if data.eof or (not follow and not data.data):
                return
