"""A task's context crosses a process boundary as JSON (worker → driver, env of a spark-submit task)."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.context import Input, TaskContext, current_context, set_current
from sparkyard.worker.runner.base import AttemptRun
from sparkyard.worker.workspace import Workspace


def _context() -> TaskContext:
    return TaskContext(job_id="j1", run_id="r1", task_id="t1", task_index=3, task_count=8,
                       inputs=(Input("s3://b/part-1", "m1"), Input("s3://b/part-2")), args=("--day", "2026-11-24"),
                       attempt=2, fencing_token=41, scheduled_at=datetime(2026, 11, 24, 1, 2, 3, tzinfo=timezone.utc),
                       worker_id="w1", labels={"team": "etl"}, fence="\0sparkyard-fence-0123")


def test_every_field_survives_the_json_round_trip() -> None:
    ctx = _context()
    back = TaskContext.from_json(ctx.to_json())
    assert back == ctx
    sent = set(json.loads(ctx.to_json()))
    # A new field must be sent too; the logger and the attempt's staged outputs belong to its process.
    assert sent == {f.name for f in fields(TaskContext)} - {"logger", "_outputs"}


def test_env_carries_the_whole_context() -> None:
    env = _context().env()
    assert TaskContext.from_json(env["SPARKYARD_TASK"]) == _context()
    assert env["SPARKYARD_TASK_INDEX"] == "3" and env["SPARKYARD_FENCING_TOKEN"] == "41"
    assert env["SPARKYARD_SCHEDULED_AT"] == "2026-11-24T01:02:03.000Z"  # the logical time, for plain scripts


def test_the_readme_lists_every_variable_a_plain_script_gets() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `SPARKYARD_")]
    listed = set(re.findall(r"`(SPARKYARD_[A-Z_]+)`", "\n".join(table)))
    assert listed == set(_context().env())


def test_current_context_is_one_object_in_every_thread_so_outputs_staged_in_one_are_committed_in_another(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKYARD_TASK", _context().to_json())  # a plain script under the submit runner
    try:
        first = current_context()
        seen: list[TaskContext] = []
        thread = threading.Thread(target=lambda: seen.append(current_context()))
        thread.start()
        thread.join()
        assert seen[0] is first and current_context() is first and first == _context()
    finally:
        set_current(None)


@pytest.mark.parametrize("pipeline", [False, True])
def test_the_env_built_from_an_assignment_is_the_contexts_own(pipeline: bool) -> None:
    """What a warm driver's attempt gets (AttemptRun.context_env, built straight from the assignment) is what
    the context of that attempt would give: every field, a pipeline step's logical-date args and upstream."""
    spec = pb.JobSpec(entrypoint="noop.py:main", args=["--day", "{ds}"], labels={"team": "etl"},
                      pipeline="p1" if pipeline else "")
    a = pb.TaskAssignment(task_id="r1-00003", run_id="r1", job_id="j1", index=3, task_count=8, attempt=2,
                          fencing_token=41, spec=spec, inputs=[pb.SplitInput(value="s3://b/part-1", mark="m1")],
                          upstream_json='{"extract": {"rows": 3}}' if pipeline else "")
    a.scheduled_at.FromMilliseconds(1_764_446_400_123)
    run = AttemptRun(a, "w1", "", "/tmp/attempts", 1 << 20, Workspace("", "", (), ()), fence="127.0.0.1:4444")
    env = run.context_env()
    assert env == run.context().env()
    assert json.loads(env["SPARKYARD_TASK"])["args"] == ["--day", "2025-11-29" if pipeline else "{ds}"]
