"""A worker counts a renewed lease from when it asked for the renewal (its heartbeat or its Register left), not
from when the master's answer arrived: the master renewed it in between, so an answer held up on the way (a
master paused after renewing, a slow network) never makes the worker's lease outlive the master's, and the
worker still fences itself before the master can give the task to another (docs/reliability.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparkyard.v1 import sparkyard_pb2 as pb
from worker_rig import running_worker


async def test_a_late_heartbeat_answer_renews_from_when_the_heartbeat_left(tmp_path: Path) -> None:
    clock, worker, execution = running_worker(tmp_path)
    outbound: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
    worker.link.connection.registered(outbound)
    clock.advance(5.0)
    worker.link.send_heartbeat()
    heartbeat = outbound.get_nowait()
    assert heartbeat is not None and heartbeat.heartbeat.sent_us == int(clock.monotonic() * 1e6)
    asked_at = clock.monotonic()
    clock.advance(4.0)  # the answer was 4 s on its way
    worker.link._on_message(pb.MasterMessage(heartbeat_ack=pb.HeartbeatAck(
        renewed=[pb.Lease(task_id="t1", fencing_token=5)], heartbeat_sent_us=heartbeat.heartbeat.sent_us)))
    assert abs(execution.renewed_at - asked_at) < 1e-3
    lease_s, margin_s = worker.link.connection.terms.lease_s, worker.cfg.self_fence_margin_s
    clock.advance(lease_s - margin_s - 4.0 + 0.1)  # past lease - margin since it asked, not since the answer
    assert worker.slots.fence_verdict("t1", 5).startswith("the attempt's lease was not renewed for")
    # A liveness message (no heartbeat answered) renews nothing; an answer echoing nothing (an older master)
    # renews from its arrival, as before.
    worker.link._on_message(pb.MasterMessage(heartbeat_ack=pb.HeartbeatAck()))
    assert abs(execution.renewed_at - asked_at) < 1e-3
    worker.link._on_message(pb.MasterMessage(heartbeat_ack=pb.HeartbeatAck(
        renewed=[pb.Lease(task_id="t1", fencing_token=5)])))
    assert execution.renewed_at == clock.monotonic() and worker.slots.fence_verdict("t1", 5) == ""


async def test_registering_renews_from_when_the_register_left(tmp_path: Path) -> None:
    clock, worker, execution = running_worker(tmp_path)
    clock.advance(3.0)
    asked_at = clock.monotonic()
    clock.advance(2.0)
    worker.slots.registered(set(), asked_at)
    assert execution.renewed_at == asked_at
    worker.slots.registered(set(), asked_at - 1.0)  # an older ask never takes a renewal back
    assert execution.renewed_at == asked_at
