"""Records (what the store reads) → protobuf messages (what the API returns)."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from sparkyard.master.records import AttemptRecord, JobRecord, RunRecord, TaskRecord
from sparkyard.states import RunState, to_proto
from sparkyard.v1 import sparkyard_pb2 as pb


def _set_ms(ts: Timestamp, ms: int) -> None:
    if ms > 0:
        ts.FromMilliseconds(ms)


def job_to_proto(job: JobRecord, with_spec: bool = True) -> pb.Job:
    out = pb.Job(
        id=job.id,
        spec=job.spec if with_spec else None,
        state=pb.JobState.Value(to_proto(job.state)),
        runs=job.runs,
        last_run_id=job.last_run_id,
        spec_version=job.spec_version,
    )
    _set_ms(out.spec_updated_at, job.spec_updated_ms)
    _set_ms(out.created_at, job.created_ms)
    _set_ms(out.updated_at, job.updated_ms)
    _set_ms(out.next_fire_at, job.next_fire_ms)
    return out


def attempt_to_proto(a: AttemptRecord) -> pb.Attempt:
    out = pb.Attempt(
        number=a.number,
        worker=a.worker,
        fencing_token=a.token,
        state=pb.AttemptState.Value(to_proto(a.state)),
        result_json=a.result,
        error=a.error,
        traceback=a.traceback,
        log_path=a.log_path,
    )
    _set_ms(out.leased_at, a.leased_ms)
    _set_ms(out.started_at, a.started_ms)
    _set_ms(out.finished_at, a.finished_ms)
    return out


def task_to_proto(t: TaskRecord) -> pb.Task:
    out = pb.Task(
        id=t.id,
        run_id=t.run_id,
        index=t.index,
        state=pb.TaskState.Value(to_proto(t.state)),
        inputs=t.inputs,
        worker=t.worker,
        fencing_token=t.token,
        attempts=[attempt_to_proto(a) for a in t.attempts],
        result_json=t.result,
        error=t.error,
    )
    _set_ms(out.not_before, t.not_before_ms)
    return out


def run_to_proto(r: RunRecord) -> pb.Run:
    out = pb.Run(
        id=r.id,
        job_id=r.job_id,
        state=pb.RunState.Value(to_proto(r.state)),
        task_count=r.task_count,
        tasks_succeeded=r.succeeded,
        tasks_failed=r.dead,
        tasks_cancelled=r.cancelled,
        tasks=[task_to_proto(t) for t in r.tasks],
        reason=r.reason,
        spec_version=r.spec_version,
    )
    if r.state == RunState.SUCCEEDED and r.tasks and len(r.tasks) == r.task_count:
        out.result_json = "[" + ",".join(t.result or "null" for t in sorted(r.tasks, key=lambda t: t.index)) + "]"
    _set_ms(out.scheduled_at, r.scheduled_ms)
    _set_ms(out.fired_at, r.fired_ms)
    _set_ms(out.started_at, r.started_ms)
    _set_ms(out.finished_at, r.finished_ms)
    return out
