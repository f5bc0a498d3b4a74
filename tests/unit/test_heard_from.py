"""What a master has read from a worker: the send time of the latest message on its connection (Register,
Heartbeat, Reports), which each batch names so that the worker counts a task's first lease from it
(TaskBatch.asked_us, master/scheduler.py; the worker's side: test_lease_clock.py)."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

from master_rig import MasterRig
from sparkyard.v1 import sparkyard_pb2 as pb
from test_job_names import rig  # noqa: F401 - the same rig fixture


async def test_the_master_keeps_the_latest_send_time_it_read_from_each_message_kind(rig: MasterRig) -> None:
    inbox: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()

    async def requests() -> AsyncIterator[pb.WorkerMessage]:
        while (message := await inbox.get()) is not None:
            yield message

    async def heard(us: int) -> None:
        deadline = asyncio.get_running_loop().time() + 10  # a few loop turns
        while (session := rig.master.registry.get("w1")) is None or session.heard_us != us:
            assert asyncio.get_running_loop().time() < deadline, session.heard_us if session else "no session"
            await asyncio.sleep(0.01)

    async def answers() -> None:
        async for _ in rig.master.connection.serve(requests(), "peer"):
            pass

    serving = asyncio.create_task(answers())
    try:
        inbox.put_nowait(pb.WorkerMessage(register=pb.Register(worker_id="w1", slots=2, sent_us=1_000)))
        await heard(1_000)
        inbox.put_nowait(pb.WorkerMessage(heartbeat=pb.Heartbeat(sent_us=2_000)))
        await heard(2_000)
        inbox.put_nowait(pb.WorkerMessage(reports=pb.Reports(seq=1, sent_us=3_000)))
        await heard(3_000)
        inbox.put_nowait(pb.WorkerMessage(heartbeat=pb.Heartbeat(sent_us=2_500)))  # read late: never back
        inbox.put_nowait(pb.WorkerMessage(reports=pb.Reports(seq=2, sent_us=4_000)))
        await heard(4_000)
    finally:
        inbox.put_nowait(None)
        await asyncio.wait_for(serving, 30)
