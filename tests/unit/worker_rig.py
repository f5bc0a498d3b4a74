"""A worker built by its composition root (:func:`sparkyard.worker.assembly.build_worker`) on a FakeClock, with
one attempt placed in its slots as if a master had leased it: no master, no runner started."""

from __future__ import annotations

import time
from pathlib import Path

from sparkyard.clock import FakeClock
from sparkyard.config import WorkerConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.assembly import Worker, build_worker
from sparkyard.worker.execution import Execution
from sparkyard.worker.runner.base import AttemptRun
from sparkyard.worker.workspace import Workspace


def running_worker(tmp_path: Path, task_id: str = "t1", token: int = 5) -> tuple[FakeClock, Worker, Execution]:
    """Worker ``w1`` running attempt 1 of ``task_id`` with fencing token ``token``, renewed just now."""
    clock = FakeClock(start=time.time())
    worker = build_worker(WorkerConfig(work_dir=str(tmp_path), id="w1").validate(), clock=clock)
    assignment = pb.TaskAssignment(task_id=task_id, attempt=1, fencing_token=token)
    execution = Execution(assignment, AttemptRun(assignment, "w1", "", str(tmp_path), 1024, Workspace("", "", (), ())),
                          worker.runners["submit"], renewed_at=clock.monotonic(), not_before=clock.monotonic())
    worker.slots.executions[task_id] = execution
    return clock, worker, execution
