"""A worker counts a renewed lease from when it asked for the renewal (its heartbeat or its Register left), not
from when the master's answer arrived: the master renewed it in between, so an answer held up on the way (a
master paused after renewing, a slow network) never makes the worker's lease outlive the master's, and the
worker still fences itself before the master can give the task to another (docs/reliability.md). The same for a
task's first lease: from the send time of the worker's last message the master had read before it leased the task,
which its batch names."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sparkyard.clock import FakeClock
from sparkyard.config import WorkerConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.assembly import build_worker
from sparkyard.worker.master_link import _Stream
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


async def test_a_batch_held_up_on_the_way_counts_its_leases_from_the_last_message_the_master_had_read(
        tmp_path: Path) -> None:
    clock = FakeClock(start=time.time())
    cfg = WorkerConfig(work_dir=str(tmp_path), id="w1", runner="submit", class_archive_dir="off").validate()
    worker = build_worker(cfg, clock=clock)
    await worker.runners["submit"].start()  # finds spark-submit; starts nothing
    asked_us = int(clock.monotonic() * 1e6)  # a message of the worker's, read by the master before it leased
    clock.advance(3.0)  # the batch was 3 s on its way

    def batch(task_id: str, asked_us: int) -> pb.MasterMessage:
        a = pb.TaskAssignment(task_id=task_id, attempt=1, fencing_token=7)
        a.start_after.FromSeconds(3600)  # waits in the queue: nothing is started here
        return pb.MasterMessage(batch=pb.TaskBatch(tasks=[a], asked_us=asked_us))

    outbound: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
    worker.link.connection.registered(outbound)
    worker.link._on_message(batch("t1", asked_us))
    late = worker.slots.executions["t1"]
    assert late.renewed_at == asked_us / 1e6
    # Counted from 3 s back: a heartbeat leaves at once to renew it, not up to a heartbeat later.
    beat = outbound.get_nowait()
    assert beat is not None and [lease.task_id for lease in beat.heartbeat.held] == ["t1"]
    lease_s, margin_s = worker.link.connection.terms.lease_s, cfg.self_fence_margin_s
    worker.link._on_message(batch("t2", 0))  # an older master names nothing: from the arrival, as before
    assert worker.slots.executions["t2"].renewed_at == clock.monotonic() and outbound.empty()
    clock.advance(lease_s - margin_s - 3.0 + 0.1)  # past lease - margin since the master read it, not since arrival
    assert worker.slots.fence_verdict("t1", 7).startswith("the attempt's lease was not renewed for")
    assert worker.slots.fence_verdict("t2", 7) == ""


async def test_register_and_reports_say_when_they_left(tmp_path: Path) -> None:
    """What the master names in a batch (TaskBatch.asked_us) is one of these, read before it leased the tasks."""
    clock, worker, _ = running_worker(tmp_path)
    asked_at = clock.monotonic()
    assert worker.link.report.register(asked_at).sent_us == int(asked_at * 1e6)
    stream = _Stream()
    leaving = worker.link._requests(stream)
    clock.advance(1.5)
    stream.outbound.put_nowait(pb.WorkerMessage(reports=pb.Reports()))
    message = await anext(leaving)
    assert message.reports.sent_us == int(clock.monotonic() * 1e6) and message.reports.seq == 1
    stream.outbound.put_nowait(None)
    assert await anext(leaving, None) is None
