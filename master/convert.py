"""Records (what the store reads) → protobuf messages (what the API returns)."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from sparkyard.master.records import AttemptRecord, JobRecord, RunRecord, TaskRecord, log_once
from sparkyard.states import RunState, to_proto
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.wellformed import MAX_TIMESTAMP_S


def _set_ms(ts: Timestamp, ms: int, record_id: str) -> None:
    """Set ``ts`` to ``ms`` if it is a time a Timestamp can hold; a stored time past year 9999 (a record
    written by hand or by an older master that accepted any delay) is left unset and logged once, so the
    record still lists."""
    if ms <= 0:
        return
    if ms < (MAX_TIMESTAMP_S + 1) * 1000:
        ts.FromMilliseconds(ms)
    else:
        log_once(f"{record_id} {ms}", "record %s holds a time out of range (%d ms); shown without it", record_id, ms)


def job_to_proto(job: JobRecord, with_spec: bool = True, last_run_state: RunState | None = None) -> pb.Job:
    out = pb.Job(
        id=job.id,
        spec=job.spec if with_spec else None,
        state=pb.JobState.Value(to_proto(job.state)),
        runs=job.runs,
        last_run_id=job.last_run_id,
        spec_version=job.spec_version,
        last_run_state=pb.RunState.Value(to_proto(last_run_state)) if last_run_state else None,
    )
    _set_ms(out.spec_updated_at, job.spec_updated_ms, job.id)
    _set_ms(out.created_at, job.created_ms, job.id)
    _set_ms(out.updated_at, job.updated_ms, job.id)
    _set_ms(out.next_fire_at, job.next_fire_ms, job.id)
    return out


def attempt_to_proto(a: AttemptRecord, task_id: str, out: pb.Attempt | None = None) -> pb.Attempt:
    """``a`` as the API shows it, filled into ``out`` (a repeated field's new item) if given."""
    out = pb.Attempt() if out is None else out
    out.number = a.number
    out.worker = a.worker
    out.fencing_token = a.token
    out.state = pb.AttemptState.Value(to_proto(a.state))
    out.result_json = a.result
    out.error = a.error
    out.traceback = a.traceback
    out.log_path = a.log_path
    _set_ms(out.leased_at, a.leased_ms, task_id)
    _set_ms(out.started_at, a.started_ms, task_id)
    _set_ms(out.finished_at, a.finished_ms, task_id)
    return out


def task_to_proto(t: TaskRecord, out: pb.Task | None = None) -> pb.Task:
    """``t`` as the API shows it, filled into ``out`` if given: a run's thousands of tasks (and their attempts)
    are built where they are sent, not built and then copied into it (as a message's constructor does)."""
    out = pb.Task() if out is None else out
    out.id = t.id
    out.run_id = t.run_id
    out.index = t.index
    out.state = pb.TaskState.Value(to_proto(t.state))
    out.inputs.extend(t.inputs)
    out.worker = t.worker
    out.fencing_token = t.token
    for a in t.attempts:
        attempt_to_proto(a, t.id, out.attempts.add())
    out.result_json = t.result
    out.error = t.error
    _set_ms(out.not_before, t.not_before_ms, t.id)
    return out


def run_to_proto(r: RunRecord, out: pb.Run | None = None) -> pb.Run:
    """``r`` as the API shows it, filled into ``out`` (a reply's field) if given."""
    out = pb.Run() if out is None else out
    out.id = r.id
    out.job_id = r.job_id
    out.state = pb.RunState.Value(to_proto(r.state))
    out.task_count = r.task_count
    out.tasks_succeeded = r.succeeded
    out.tasks_failed = r.dead
    out.tasks_cancelled = r.cancelled
    for t in r.tasks:
        task_to_proto(t, out.tasks.add())
    out.reason = r.reason
    out.spec_version = r.spec_version
    out.rerun_of = r.rerun_of
    out.backfill = r.backfill
    out.after_run = r.after_run
    if r.state == RunState.SUCCEEDED and r.tasks and len(r.tasks) == r.task_count:
        out.result_json = "[" + ",".join(t.result or "null" for t in sorted(r.tasks, key=lambda t: t.index)) + "]"
    _set_ms(out.scheduled_at, r.scheduled_ms, r.id)
    _set_ms(out.fired_at, r.fired_ms, r.id)
    _set_ms(out.started_at, r.started_ms, r.id)
    _set_ms(out.finished_at, r.finished_ms, r.id)
    out.pipeline_run = r.pipeline_run
    for s in r.steps:
        step = out.steps.add(name=s.name, state=pb.StepState.Value(to_proto(s.state)), run_id=s.run_id,
                             job_id=s.job_id, after=s.after, attempts=s.attempts)
        _set_ms(step.started_at, s.started_ms, r.id)
        _set_ms(step.finished_at, s.finished_ms, r.id)
    return out
