"""What :class:`~sparkyard.master.memory_store.MemoryStore` keeps per job, run, task and attempt, and how
it reads them back as the records RedisStore returns.

The entries hold the fields of the Redis hashes documented in :mod:`sparkyard.keys` that change what a
script does or what a read returns; the conversions reproduce :mod:`sparkyard.master.records`' parsing of
those hashes (defaults for absent fields, which attempt carries the task's result).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkyard.master.records import AttemptRecord, JobRecord, RunRecord, TaskRecord, inputs_from_json
from sparkyard.master.sorted_set import SortedSet
from sparkyard.states import AttemptState, JobState, RunState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb


@dataclass
class JobEntry:
    spec: pb.JobSpec  # a private copy taken at submit
    state: JobState
    created_ms: int
    updated_ms: int
    next_fire_ms: int = -1  # -1: none
    runs: int = 0
    last_run_id: str = ""
    awaits: str = ""  # in `awaiting`: the run whose end sets the next fire time
    last_workers: dict[int, str] = field(default_factory=dict)  # task index → worker that last ran it
    spec_version: int = 1
    spec_updated_ms: int = 0
    old_specs: dict[int, pb.JobSpec] = field(default_factory=dict)  # version → the spec it replaced
    after: str = ""  # a child job: its parent's id


@dataclass
class RunEntry:
    job_id: str
    state: RunState
    scheduled_ms: int
    fired_ms: int
    task_count: int
    started_ms: int = 0
    finished_ms: int = 0
    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    reason: str = ""
    max_attempts: int = 1
    backoff_ms: int = 0
    backoff_mult: float = 1.0
    backoff_max_ms: int = 0
    timeout_ms: int = 0
    cap: int = 0
    gate: SortedSet = field(default_factory=SortedSet)  # task id → index: READY, held back by the cap
    spec_version: int = 1
    rerun_of: str = ""
    after_run: str = ""


@dataclass
class AttemptEntry:
    number: int
    token: int
    worker: str
    leased_ms: int
    state: AttemptState = AttemptState.RUNNING
    started_ms: int = 0
    finished_ms: int = 0
    error: str = ""
    traceback: str = ""
    log_path: str = ""


@dataclass
class TaskEntry:
    run_id: str
    job_id: str
    index: int
    group: str
    score: int
    inputs: str  # JSON; '' for none
    routing: str
    route: str
    aff: bool  # remembers its worker in the job (recurring job)
    state: TaskState = TaskState.READY
    token: int | None = None  # of the latest attempt; None before the first claim
    worker: str = ""
    prev_worker: str = ""
    failures: int = 0
    lost: int = 0
    result: str = ""
    error: str = ""
    not_before_ms: int = 0
    lease_ms: int = 0
    attempts: list[AttemptEntry] = field(default_factory=list)  # the last one is the latest


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ended (lib.lua finish_attempt's fields); empty texts are not written."""

    state: AttemptState
    finished_ms: int
    error: str = ""
    traceback: str = ""
    log_path: str = ""
    started_ms: int | None = None  # None: keep the start the worker reported


def job_record(job_id: str, job: JobEntry) -> JobRecord:
    return JobRecord(job_id, job.spec, job.state, job.created_ms, job.updated_ms, job.next_fire_ms, job.runs,
                     job.last_run_id, job.awaits, job.spec_version, job.spec_updated_ms)


def run_record(run_id: str, run: RunEntry) -> RunRecord:
    return RunRecord(run_id, run.job_id, run.state, run.scheduled_ms, run.fired_ms, run.started_ms,
                     run.finished_ms, run.task_count, run.succeeded, run.dead, run.cancelled, run.reason,
                     spec_version=run.spec_version, rerun_of=run.rerun_of, after_run=run.after_run)


def task_record(task_id: str, t: TaskEntry) -> TaskRecord:
    attempts = [attempt_record(a, t, latest=i == len(t.attempts) - 1) for i, a in enumerate(t.attempts)]
    return TaskRecord(
        id=task_id, run_id=t.run_id, job_id=t.job_id, index=t.index, state=t.state, group=t.group,
        inputs=inputs_from_json(t.inputs), token=t.token or 0, worker=t.worker, prev_worker=t.prev_worker,
        attempts_started=len(t.attempts), failures=t.failures, lost=t.lost, result=t.result, error=t.error,
        not_before_ms=t.not_before_ms, lease_deadline_ms=t.lease_ms,
        attempts=attempts,
    )


def attempt_record(a: AttemptEntry, t: TaskEntry, *, latest: bool) -> AttemptRecord:
    """An attempt as RedisStore reads it: only the latest, once SUCCEEDED, carries the task's result."""
    result = t.result if latest and a.state is AttemptState.SUCCEEDED else ""
    return AttemptRecord(a.number, a.worker, a.token, a.state, a.leased_ms, a.started_ms, a.finished_ms, result,
                         a.error, a.traceback, a.log_path)
