"""Protocol-level workers for the scale benchmarks: they speak the worker protocol and finish every task
the moment it arrives (no Spark, no driver), so what is measured is the master and Redis, not the runner.

A worker follows a change of leader as a real worker does: when its stream ends it connects to the next
master of its list (a standby refuses the stream until it leads) and registers again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import AsyncIterator

import grpc

from sparkyard.channel import open_channel
from sparkyard.config import ClientConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

# A worker's heartbeat until the master says its own (the master marks it dead after three missed ones).
HEARTBEAT_S = 0.5


def _results(tasks: list[pb.TaskAssignment]) -> pb.WorkerMessage:
    now = int(time.time() * 1000)
    results = []
    for task in tasks:
        result = pb.TaskResult(task_id=task.task_id, fencing_token=task.fencing_token, outcome=pb.ATTEMPT_SUCCEEDED)
        result.started_at.FromMilliseconds(now)
        result.finished_at.FromMilliseconds(now)
        results.append(result)
    return pb.WorkerMessage(reports=pb.Reports(results=results))


def _report(outbox: asyncio.Queue[pb.WorkerMessage | None], held: dict[str, int],
            tasks: list[pb.TaskAssignment]) -> None:
    for task in tasks:
        held.pop(task.task_id, None)
    outbox.put_nowait(_results(tasks))


async def _session(address: str, worker_id: str, slots: int, stop: asyncio.Event) -> None:
    """One stream to one master, until it ends or ``stop`` is set."""
    loop = asyncio.get_running_loop()
    outbox: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
    outbox.put_nowait(pb.WorkerMessage(register=pb.Register(worker_id=worker_id, slots=slots)))

    async def requests() -> AsyncIterator[pb.WorkerMessage]:
        while (message := await outbox.get()) is not None:
            yield message

    held: dict[str, int] = {}  # tasks waiting for their start_after: their leases are renewed as a worker's are
    interval = [HEARTBEAT_S]

    async def heartbeat() -> None:
        while True:
            leases = [pb.Lease(task_id=t, fencing_token=token) for t, token in held.items()]
            outbox.put_nowait(pb.WorkerMessage(heartbeat=pb.Heartbeat(free_slots=slots, held=leases)))
            await asyncio.sleep(interval[0])

    async with open_channel(address, ClientConfig(), asynchronous=True) as channel:
        call = pbg.WorkerServiceStub(channel).Connect(requests())
        beat = asyncio.create_task(heartbeat())
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while True:
                reader = asyncio.ensure_future(call.read())
                done, _ = await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if stopper in done:
                    reader.cancel()
                    return
                message = reader.result()
                if message is grpc.aio.EOF:
                    return
                if message.WhichOneof("kind") == "registered":
                    interval[0] = message.registered.heartbeat_interval.ToMilliseconds() / 1000 or HEARTBEAT_S
                if message.WhichOneof("kind") == "batch":
                    # As a real worker does: a task sent with start_after (fired ahead of its time) starts
                    # then, the others at once.
                    waits: dict[int, list[pb.TaskAssignment]] = {}
                    for task in message.batch.tasks:
                        waits.setdefault(task.start_after.ToMilliseconds(), []).append(task)
                    for wait_ms, tasks in waits.items():
                        if wait_ms > 0:
                            held.update((task.task_id, task.fencing_token) for task in tasks)
                        loop.call_later(wait_ms / 1000, _report, outbox, held, tasks)
        finally:
            beat.cancel()
            stopper.cancel()
            outbox.put_nowait(None)
            call.cancel()


async def protocol_worker(addresses: list[str], worker_id: str, slots: int, stop: asyncio.Event) -> None:
    """Stay connected to whichever master of ``addresses`` accepts the stream, until ``stop``."""
    turn = 0
    while not stop.is_set():
        try:
            await _session(addresses[turn % len(addresses)], worker_id, slots, stop)
        except grpc.aio.AioRpcError:
            pass  # a standby's refusal or a dead master: try the next one
        turn += 1
        if not stop.is_set():
            await asyncio.sleep(0.1)


class WorkerPool:
    """``count`` protocol-level workers on an event loop in a thread of this process."""

    def __init__(self, addresses: list[str], count: int, slots: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._tasks = [asyncio.run_coroutine_threadsafe(protocol_worker(addresses, f"fast{i}", slots, self._stop),
                                                        self._loop) for i in range(count)]

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        for task in self._tasks:
            try:
                task.result(timeout=10)
            except Exception:  # noqa: BLE001 - a stream that ended badly while stopping is no matter here
                pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
