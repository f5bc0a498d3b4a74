"""Attempt logs and scratch directories expire on a running worker, not only when it starts — but never
today's log directory or the scratch of a task that is still running."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from sparkyard.clock import FakeClock
from sparkyard.config import WorkerConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.assembly import build_worker
from sparkyard.worker.logs import day_name, remove_older_than
from sparkyard.worker.runner.base import AttemptRun
from sparkyard.worker.execution import Execution
from sparkyard.worker.workspace import Workspace


def _entry(root: Path, name: str, age_s: float, now: float) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "x.log").write_text("x")
    os.utime(path, (now - age_s, now - age_s))
    return path


def test_only_entries_older_than_the_cutoff_and_not_kept_are_removed(tmp_path: Path) -> None:
    now = time.time()
    old, recent, kept = (_entry(tmp_path / "a", n, age, now) for n, age in
                         (("old", 100), ("recent", 10), ("kept", 100)))
    also_old = _entry(tmp_path / "b", "old2", 100, now)
    removed = remove_older_than([tmp_path / "a", tmp_path / "b", tmp_path / "missing"], now - 50, {"kept"})
    assert removed == 2
    assert not old.exists() and not also_old.exists() and recent.exists() and kept.exists()


async def test_a_running_worker_sweeps_periodically_and_spares_today_and_running_tasks(tmp_path: Path) -> None:
    clock = FakeClock(start=time.time())
    cfg = WorkerConfig(work_dir=str(tmp_path), id="w1", log_retention_s=100).validate()
    worker = build_worker(cfg, clock=clock)
    now = clock.now()
    logs, scratch = worker.logs.root, tmp_path / "attempts"
    old_day = _entry(logs, "20200101", 1_000, now)
    today = _entry(logs, day_name(now), 1_000, now)  # e.g. written to long ago today, then quiet
    done_task = _entry(scratch, "t-done", 1_000, now)
    running_task = _entry(scratch, "t-running", 1_000, now)
    assignment = pb.TaskAssignment(task_id="t-running", attempt=1)
    worker.slots.executions["t-running"] = Execution(
        assignment, AttemptRun(assignment, "w1", "", str(scratch), 1024, Workspace("", "", (), ())),
        worker.runners["submit"], renewed_at=clock.monotonic(), not_before=clock.monotonic())

    loop = asyncio.create_task(worker.retention.run())
    try:
        await asyncio.sleep(0)
        assert old_day.exists()  # the first periodic sweep comes after retention / 2
        clock.advance(50)
        deadline = time.monotonic() + 10
        while (old_day.exists() or done_task.exists()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert not old_day.exists() and not done_task.exists()
        assert today.exists() and running_task.exists()
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
