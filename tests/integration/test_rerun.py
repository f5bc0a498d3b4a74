"""sparkyard rerun: an ended run runs again as a new run, all of it or only its failed tasks, with the job's
current spec and the original's scheduled time; the original is left as it was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import EXAMPLES, Cluster
from sparkyard import errors
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"


def test_rerun_of_the_failed_tasks_only_after_a_fix(shared_cluster: Cluster, tmp_path: Path) -> None:
    client = shared_cluster.client()
    fixed = tmp_path / "fixed"
    job = client.submit(f"{TASKS}:fail_on", args=["b", str(fixed)], inputs=["a", "b", "c"])
    original, _ = client.wait(first_run_id(job), timeout=120)
    assert original.state == pb.RUN_FAILED and original.tasks_succeeded == 2 and original.tasks_failed == 1

    with pytest.raises(errors.FailedPrecondition, match="run .* has no failed or cancelled task"):
        ok, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop")), timeout=120)
        client.rerun(ok.id, failed_only=True)

    fixed.touch()
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", shared_cluster.address, "--json",
                           "rerun", original.id, "--failed-only"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rerun = json.loads(done.stdout)
    assert rerun["rerun_of"] == original.id and rerun["task_count"] == 1 and rerun["id"] != original.id
    ended, _ = client.wait(rerun["id"], timeout=120)
    assert ended.state == pb.RUN_SUCCEEDED
    # Only input b ran again, and it saw the original's scheduled time.
    assert json.loads(ended.result_json) == [f"b@{original.scheduled_at.ToDatetime().isoformat()}+00:00"]
    again = client.run(original.id)
    assert again.state == pb.RUN_FAILED and again.tasks_failed == 1  # the original is as it was

    whole = client.rerun(original.id)  # every task again
    assert whole.task_count == 3 and whole.rerun_of == original.id
    assert client.wait(whole.id, timeout=120)[0].state == pb.RUN_SUCCEEDED


def test_rerun_refuses_a_run_that_has_not_ended_or_does_not_exist(shared_cluster: Cluster, tmp_path: Path) -> None:
    client = shared_cluster.client()
    job = client.submit(f"{TASKS}:sleep_python", args=["30"])
    with pytest.raises(errors.FailedPrecondition, match="rerun it once it has ended"):
        client.rerun(first_run_id(job))
    client.cancel(job.id)
    with pytest.raises(errors.NotFound):
        client.rerun(f"{job.id}.0000000000001")
