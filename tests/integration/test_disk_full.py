"""A worker whose disk is full (issue 22): its work directory, or the ``logs`` directory in it, on a small
tmpfs filled to the last byte.

Before, the worker kept offering its slot and every task it was given failed at once (``submit runner error:
OSError: [Errno 28] No space left on device``), each failure using up an attempt. Now it says ``degraded``
with the reason and offers no slot while the disk is full (worker/disk.py), hands back (RELEASED, no attempt
used up) a task it could not start for want of space, and offers its slot again by itself once there is
room: the task then runs there with its one attempt.

Needs root (a tmpfs mount); skips, saying so, without it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from harness import EXAMPLES, Cluster, wait_for
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
DISK_MB = 16

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs for the worker's disk needs root")


def fill(path: Path) -> None:
    """Write ``path`` until the file system holding it refuses (ENOSPC)."""
    try:
        with path.open("ab") as f:
            while True:
                f.write(b"\0" * (1 << 20))
                f.flush()
    except OSError:
        pass


def mounted(path: Path) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "sparkyard-test-disk", str(path)], check=True)
    return path


def test_a_worker_with_a_full_disk_offers_no_slot_until_there_is_room(make_cluster: Callable[..., Cluster]) -> None:
    cluster = make_cluster()
    disk = mounted(cluster.root / "full")
    try:
        cluster.start_master()
        cluster.start_worker("full", slots=1, runner="submit")  # --work-dir: cluster.root / "full"
        cluster.wait_workers("full")
        client = cluster.client()

        filler = disk / "filler"
        fill(filler)
        worker = wait_for(lambda: next((w for w in client.workers() if w.id == "full"
                                        and w.readiness == pb.READINESS_DEGRADED), None), 60,
                          "the worker to say it is degraded")
        assert worker.readiness_reason.startswith(f"work directory {disk} is full ("), worker.readiness_reason
        assert worker.ready_slots == 0

        # One attempt only (no retry): a task failed by the full disk would be DEAD.
        run_id = first_run_id(client.submit(f"{TASKS}:noop", retries=0))
        filler.unlink()
        cluster.wait_workers("full", timeout=60)
        run, timed_out = client.wait(run_id, timeout=180)
        assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
        states = [a.state for a in run.tasks[0].attempts]
        assert states[-1] == pb.ATTEMPT_SUCCEEDED and set(states[:-1]) <= {pb.ATTEMPT_RELEASED}, states
        log = cluster.workers["full"].log()
        assert f"work directory {disk} has room again" in log
        assert "No space left on device" not in log, log[-3000:]
    finally:
        cluster.stop()
        subprocess.run(["umount", str(disk)], check=False)


def test_a_task_that_cannot_start_for_want_of_space_is_handed_back(make_cluster: Callable[..., Cluster]) -> None:
    """The write refused where the probe does not look (a full ``logs`` volume in a work directory that has
    room): the attempt goes back unstarted, and the worker says it is full for a while instead of failing
    every task it is given."""
    cluster = make_cluster()
    logs = mounted(cluster.root / "logs-full" / "logs")
    try:
        cluster.start_master()
        cluster.start_worker("logs-full", slots=1, runner="submit")  # its logs: cluster.root / "logs-full" / "logs"
        cluster.wait_workers("logs-full")
        client = cluster.client()
        filler = logs / "filler"
        fill(filler)

        run_id = first_run_id(client.submit(f"{TASKS}:noop", retries=0))
        task = wait_for(lambda: (t := client.run(run_id).tasks[0]).attempts and t.attempts[0].state
                        == pb.ATTEMPT_RELEASED and t, 120, "the task to be handed back")
        assert task.attempts[0].error.startswith(f"handed back: work directory {cluster.root / 'logs-full'} is "
                                                 "full (No space left on device)"), task.attempts[0].error
        assert task.state in (pb.TASK_READY, pb.TASK_LEASED)  # no attempt used up
        filler.unlink()
        run, timed_out = client.wait(run_id, timeout=180)
        assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
        states = [a.state for a in run.tasks[0].attempts]
        assert states[-1] == pb.ATTEMPT_SUCCEEDED and set(states[:-1]) == {pb.ATTEMPT_RELEASED}, states
        assert len(states) <= 30, f"{len(states)} attempts: the worker took and handed back the task every probe"
    finally:
        cluster.stop()
        subprocess.run(["umount", str(logs)], check=False)
