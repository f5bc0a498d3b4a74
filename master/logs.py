"""Attempt logs, fetched from the worker that wrote them over its Connect stream.

Logs stay on the worker's disk (an attempt's file, or its byte range of its warm driver's file: the path the
worker reported is passed back to it as it is, worker/logs.py). ``StreamTaskLog`` pulls them chunk by chunk: the
master sends a ``LogRequest`` (offset, follow) on the worker's stream and waits for the matching
``LogData``; in follow mode the worker holds the request until new bytes appear or about a second passes
(a long poll), so a quiet log costs one message a second and a busy one streams at once. Pulling one
chunk at a time is the flow control: a slow client never makes the worker buffer a whole log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import AsyncIterator, Awaitable, Callable

from sparkyard.clock import Clock
from sparkyard.errors import InvalidArgument, NotFound, Unavailable
from sparkyard.master.records import TaskRecord
from sparkyard.master.registry import WorkerRegistry
from sparkyard.states import TASK_TERMINAL, AttemptState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# How long the master waits for one chunk before declaring the worker unresponsive.
CHUNK_TIMEOUT_S = 15.0
# How often a followed log of a task still queued, or waiting for its retry, looks whether an attempt started.
START_POLL_S = 0.5


class LogRelay:
    def __init__(self, registry: WorkerRegistry, tasks: Callable[[str], Awaitable[TaskRecord]], clock: Clock) -> None:
        """``tasks``: a task by id (NotFound naming it when there is none)."""
        self._registry = registry
        self._tasks = tasks
        self._clock = clock
        self._waiting: dict[str, asyncio.Future[pb.LogData]] = {}
        self._ids = itertools.count(1)

    async def task_log(self, task_id: str, attempt: int, offset: int, follow: bool,
                       retries: bool) -> AsyncIterator[pb.LogChunk]:
        """A task's log as ``StreamTaskLog`` sends it: one attempt's (0: the latest) from ``offset``; followed,
        from when the task has started until the attempt ends, and with ``retries`` on into the task's next
        attempts (its retries, a re-run after a lost lease) until the task has ended."""
        task = await (self.started_task if follow else self._tasks)(task_id)
        while True:
            async for chunk in self.attempt_log(task, attempt, offset, follow):
                attempt = chunk.attempt
                yield chunk
            if not (follow and retries):
                return
            following = await self.next_attempt(task_id, attempt or task.attempts[-1].number)
            if following is None:
                return
            (task, attempt), offset = following, 0

    async def started_task(self, task_id: str) -> TaskRecord:
        """The task once a worker has taken it (it has an attempt): a followed log (``logs -f``) waits for
        that, as ``tail -F`` waits for a file, where it failed while the task was still queued. An attempt
        handed back (RELEASED: a draining worker's, or one no worker could be given) is not what runs next:
        the follow waits for the task's next attempt. NotFound if it ends without one."""
        while True:
            task = await self._tasks(task_id)
            handed_back = bool(task.attempts) and task.attempts[-1].state is AttemptState.RELEASED
            if task.attempts and (not handed_back or task.state in TASK_TERMINAL):
                return task
            if task.state in TASK_TERMINAL:
                raise NotFound(f"task {task_id} ended {task.state.value} without starting: it has no log")
            await self._clock.sleep(START_POLL_S)

    async def next_attempt(self, task_id: str, after: int) -> tuple[TaskRecord, int] | None:
        """The task and the number of its first attempt after attempt ``after`` that ran (not one handed
        back), once there is one; None once the task has ended without one."""
        while True:
            task = await self._tasks(task_id)
            later = [a.number for a in task.attempts if a.number > after and a.state is not AttemptState.RELEASED]
            if later:
                return task, min(later)
            if task.state in TASK_TERMINAL:
                return None
            await self._clock.sleep(START_POLL_S)

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
                yield pb.LogChunk(data=data.data, offset=data.offset, eof=data.eof, attempt=attempt)
            offset = data.offset + len(data.data)
            if data.eof or (not follow and not data.data):
                return
