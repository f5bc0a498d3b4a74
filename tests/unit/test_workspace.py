"""Where an attempt runs (worker/workspace.py): the paths of a job version are worked out once, its working
directory for every attempt from what the worker's file system holds then."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.workspace import WorkspaceError, workspace


def test_attempts_of_one_job_version_share_its_paths_but_each_finds_its_working_directory_anew(tmp_path: Path) -> None:
    submit_dir = tmp_path / "checkout"
    (submit_dir / "jobs").mkdir(parents=True)
    (submit_dir / "jobs" / "etl.py").write_text("def main(spark, ctx): pass\n")
    root = tmp_path / "bundles" / "abc"
    (root / "jobs").mkdir(parents=True)
    spec = pb.JobSpec(entrypoint="jobs/etl.py:main", py_files=["lib/util.py"], submit_dir=str(submit_dir))
    scratch_asked: list[int] = []

    def scratch() -> Path:
        scratch_asked.append(1)
        return tmp_path / "scratch"

    first = workspace(spec, root, scratch)
    assert first.cwd == str(submit_dir)  # the checkout the job was submitted from is on this machine
    assert first.entrypoint == f"{root}/jobs/etl.py:main"
    assert first.sys_path == (f"{root}/jobs", str(root), f"{root}/lib")
    (submit_dir / "jobs" / "etl.py").unlink()  # the checkout changed: the next attempt runs in the bundle
    second = workspace(pb.JobSpec.FromString(spec.SerializeToString()), root, scratch)
    assert second.cwd == str(root)
    assert second.sys_path is first.sys_path and second.executor_path is first.executor_path
    assert not scratch_asked  # a scratch directory is made only for an attempt that runs in it


def test_an_attempt_with_no_bundle_and_no_known_directory_runs_in_its_scratch_directory(tmp_path: Path) -> None:
    ws = workspace(pb.JobSpec(entrypoint="tasks:noop", submit_dir=str(tmp_path / "gone")), None,
                   lambda: tmp_path / "attempts" / "t1" / "a1")
    assert ws.cwd == str(tmp_path / "attempts" / "t1" / "a1") and Path(ws.cwd).is_dir()
    assert ws.sys_path == () and ws.entrypoint == "tasks:noop"


def test_a_bad_entrypoint_fails_every_attempt_of_it_saying_why(tmp_path: Path) -> None:
    for _ in range(2):  # a failure is not remembered as a layout
        with pytest.raises(WorkspaceError, match="entrypoint"):
            workspace(pb.JobSpec(entrypoint="jobs/etl.py:no-such-name!"), None, tmp_path)
