"""The soak's checker (tests/soak/verdict.py) on a submit whose reply the client never got: the 60-minute soak
of seed 2027 (2026-11-27) reported such a job as a "lost firing" although the master had stored it, run it
once (retried once) and still held it SUCCEEDED at the end. An unanswered submit has an outcome unknown to the
client: running it is no violation, losing it after running it is. The scheduler here is a stand-in that
answers ``job`` and ``runs`` from a dict (the checker reads nothing else of it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

from sparkyard import errors
from sparkyard.master.jobs import PAUSED_BEFORE_ITS_TIME
from sparkyard.v1 import sparkyard_pb2 as pb

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "soak"))

from ledger import audit  # noqa: E402
from verdict import check  # noqa: E402
from workload import Workload  # noqa: E402

JOB, RUN, TASK = "jstored", "jstored.1000", "jstored.1000.00000"


class Scheduler:
    """What the checker reads: a job by id, a job's runs with their tasks."""

    def __init__(self, runs: dict[str, list[pb.Run]]) -> None:
        self._runs = runs

    def job(self, job_id: str) -> pb.Job:
        if job_id not in self._runs:
            raise errors.NotFound(f"no job {job_id}")
        return pb.Job(id=job_id)

    def runs(self, job_id: str, **_: Any) -> list[pb.Run]:
        self.job(job_id)
        return self._runs[job_id]


def ledger(tmp_path: Path, *tokens: int) -> Path:
    lines = [json.dumps({"event": event, "job": JOB, "run": RUN, "task": TASK, "token": token, "worker": "w2",
                         "scheduled_ms": 1000, "at": 1.0 + i}) for i, token in enumerate(tokens)
             for event in ("start", "end")]
    path = tmp_path / "ledger.jsonl"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def run(state: pb.RunState.ValueType, *tokens: int) -> pb.Run:
    attempts = [pb.Attempt(number=i + 1, fencing_token=token,
                           state=pb.ATTEMPT_SUCCEEDED if i == len(tokens) - 1 else pb.ATTEMPT_FAILED)
                for i, token in enumerate(tokens)]
    scheduled = pb.Run(id=RUN, state=state, tasks=[pb.Task(id=TASK, attempts=attempts)])
    scheduled.scheduled_at.FromMilliseconds(1000)
    return scheduled


def workload(tmp_path: Path) -> Workload:
    """The soak's workload with only its pipeline job acknowledged, which has not run."""
    return Workload(net=cast(Any, None), client=cast(Any, None), ledger=tmp_path / "ledger.jsonl",
                    pipeline_job="jpipeline")


def test_an_unanswered_submit_the_master_stored_and_ran_once_is_audited_not_reported_lost(tmp_path: Path) -> None:
    path = ledger(tmp_path, 1111, 1114)
    verdict = check(workload(tmp_path), cast(Any, Scheduler({JOB: [run(pb.RUN_SUCCEEDED, 1111, 1114)], "jpipeline": []})), path)
    assert verdict.stored_unanswered == [JOB]
    assert verdict.findings.violations == [] and verdict.findings.runs == 1 and verdict.findings.reruns == 1


def test_its_runs_are_checked_like_an_acknowledged_job_s(tmp_path: Path) -> None:
    path = ledger(tmp_path, 1111, 1114)
    twice = run(pb.RUN_SUCCEEDED, 1111, 1114)
    twice.tasks[0].attempts[0].state = pb.ATTEMPT_SUCCEEDED
    verdict = check(workload(tmp_path), cast(Any, Scheduler({JOB: [twice], "jpipeline": []})), path)
    assert [v.split(":")[0] for v in verdict.findings.violations] == [f"task {TASK} succeeded 2 times"]


def test_an_unanswered_submit_that_ran_and_is_gone_is_a_lost_firing(tmp_path: Path) -> None:
    verdict = check(workload(tmp_path), cast(Any, Scheduler({"jpipeline": []})), ledger(tmp_path, 1111))
    assert verdict.stored_unanswered == []
    assert [v.split(" ran ")[0] for v in verdict.findings.violations] == [f"job {JOB}"]
    assert "the scheduler has no such job now" in verdict.findings.violations[0]


def withdrawn_run() -> pb.Run:
    """The job's next run, fired ahead of its time, cancelled by the pause that ended the load."""
    later = pb.Run(id="jstored.2000", state=pb.RUN_CANCELLED, reason=PAUSED_BEFORE_ITS_TIME,
                   tasks=[pb.Task(id="jstored.2000.00000", state=pb.TASK_CANCELLED)])
    later.scheduled_at.FromMilliseconds(2000)
    return later


def test_a_run_fired_ahead_and_cancelled_by_the_pause_before_its_time_is_withdrawn_not_lost(tmp_path: Path) -> None:
    path = ledger(tmp_path, 1111)
    found = audit(path, cast(Any, Scheduler({JOB: [run(pb.RUN_SUCCEEDED, 1111), withdrawn_run()]})), [JOB],
                  period_ms={JOB: 1000})
    assert found.violations == [] and (found.runs, found.withdrawn) == (2, 1)


def test_one_that_ran_nevertheless_is_a_violation(tmp_path: Path) -> None:
    path = ledger(tmp_path, 1111)
    with path.open("a") as f:
        f.write(json.dumps({"event": "start", "job": JOB, "run": "jstored.2000", "task": "jstored.2000.00000",
                            "token": 2222, "worker": "w2", "scheduled_ms": 2000, "at": 3.0}) + "\n")
    found = audit(path, cast(Any, Scheduler({JOB: [run(pb.RUN_SUCCEEDED, 1111), withdrawn_run()]})), [JOB])
    assert found.withdrawn == 0 and [v.split(" ")[:2] for v in found.violations] == [["run", "jstored.2000:"],
                                                                                      ["task", "jstored.2000.00000"]]
