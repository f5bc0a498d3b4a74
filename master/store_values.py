"""The values the store trades in: what callers hand it (a new job, a firing, a report) and what it answers
(claims, verdicts, reaped tasks, cancel results), with the ready queue's score. The protocol itself is
:class:`sparkyard.master.store.Store`; the scripts' status enums and small records are in
:mod:`sparkyard.master.store_outcomes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from sparkyard.master.records import inputs_to_json
from sparkyard.master.store_outcomes import (
    CancelStatus,
    EndedRun,
    FireStatus,
    Lease,
    LeasedTask,
    PipelineEnd,
    UpdateStatus,
)
from sparkyard.states import JobState, Loss, RunState, TaskState, VerdictKind
from sparkyard.v1 import sparkyard_pb2 as pb

# Ready-queue aging: one priority point is worth this many milliseconds of waiting. Tasks fired within
# the same second run strictly by priority; a task that has waited longer than (priority difference ×
# this) goes before a newer, higher-priority one — so a steady stream of high-priority work cannot
# starve lower priorities forever (priority 1000 vs 0 is a ~17 minute head start).
DEFAULT_PRIORITY_AGING_MS = 1000
# How many schedule entries and queue items one call looks at unless told otherwise.
DEFAULT_DUE_LIMIT = 100_000
DEFAULT_SWEEP_LIMIT = 1000


def ready_score(priority: int, scheduled_ms: int, aging_ms: int = DEFAULT_PRIORITY_AGING_MS) -> int:
    """A task's place in its group's ready queue (lowest first; equal scores go by task id)."""
    return scheduled_ms - priority * aging_ms


@dataclass(frozen=True)
class SubmitResult:
    job_id: str
    duplicate: bool
    created_ms: int
    next_fire_ms: int
    fired: bool = False  # the job's run was created by the submit itself
    id_taken: bool = False  # another job has this id: nothing was stored
    parent_missing: bool = False  # a child job whose parent does not exist: nothing was stored
    bundle_missing: bool = False  # the job's bundle is not stored (collected since it was checked): nothing stored


@dataclass(frozen=True)
class NewJob:
    """A validated job about to be stored: its id, spec and first fire time (absolute or a delay)."""

    job_id: str
    spec: pb.JobSpec
    fire_mode: str  # 'abs' | 'delay' | 'after' (a child job of ``after``) | 'manual' (no schedule entry)
    fire_value_ms: int
    idempotency_key: str = ""
    fire_now: Sequence[Sequence[Any]] | None = None  # task inputs: fire in the submit (scheduled = fire_value_ms)
    after: str = ""  # fire_mode 'after': the parent job's id
    steps: tuple[tuple[str, pb.JobSpec], ...] = ()  # a pipeline: its step jobs (id, spec), stored with it


@dataclass(frozen=True)
class FireRequest:
    """One firing (see fire.lua's header for the meaning of each field)."""

    job_id: str
    spec: pb.JobSpec
    scheduled_ms: int
    expected_ms: int | None  # the schedule entry consumed; None for a manual trigger
    next_fire_ms: int
    overlap: str
    inputs: Sequence[Sequence[Any]]
    skip_reason: str = ""
    spec_version: int = 1  # the version of ``spec`` (the job's spec_v): the firing is refused if it changed
    run_ms: int | None = None  # the time in the run's id (None: scheduled_ms); a rerun's differs from it
    rerun_of: str = ""  # the run this firing runs again (recorded in the run)
    backfill: bool = False  # a backfill's firing (recorded in the run)
    keep_steps: dict[str, str] | None = None  # a pipeline run's rerun: steps kept as SUCCEEDED → their run ids


@dataclass(frozen=True)
class FireResult:
    status: FireStatus
    fired_ms: int
    run_state: RunState | None  # the run's state (created, skipped, exists), else None
    error: str = ""  # why the firing failed (status failed)
    due_ms: int = -1  # status stale: the schedule entry's time now (-1: the job has none)


class Fired(NamedTuple):
    """One firing's run id (made or not) and what the firing did."""

    run_id: str
    result: FireResult


@dataclass(frozen=True)
class RunBlock:
    """What the tasks of one firing share, and each task's inputs (lib.lua create_run's block).

    Settings are taken from the spec once per firing; a store writes only those that differ from the
    defaults (no retries, no timeout, no concurrency cap).
    """

    group: str
    max_attempts: int
    backoff_ms: int
    backoff_mult: float
    backoff_max_ms: int
    timeout_ms: int
    route: str
    routing: str  # protobuf Routing name; '' = default
    cap: int  # max tasks of the run in the ready queue or leased at once; 0 = no cap
    score: int  # ready-queue score of every task of the run
    recurring: bool  # tasks remember their last worker (job field w:{index}) for the next run
    tasks: tuple[str, ...]  # inputs JSON of task 0, 1, …
    spec_version: int = 1  # the job's spec version the run is made from (recorded unless 1)
    rerun_of: str = ""  # the run this one runs again (recorded when set)
    after_run: str = ""  # the parent's run that fired this one (recorded when set)
    backfill: bool = False  # made by a backfill (recorded when set)
    hooks: str = ""  # F, S: the spec has its own webhook URL for a failed, succeeded run (recorded when set)

    @classmethod
    def of(cls, spec: pb.JobSpec, scheduled_ms: int, inputs: Sequence[Sequence[Any]],
           aging_ms: int = DEFAULT_PRIORITY_AGING_MS, spec_version: int = 1, rerun_of: str = "",
           after_run: str = "", backfill: bool = False) -> RunBlock:
        retry = spec.retry
        return cls(
            group=spec.group, max_attempts=retry.max_attempts,
            backoff_ms=retry.initial_backoff.ToMilliseconds(), backoff_mult=retry.multiplier,
            backoff_max_ms=retry.max_backoff.ToMilliseconds(), timeout_ms=spec.timeout.ToMilliseconds(),
            route=spec.routing_key,
            routing="" if spec.routing == pb.ROUTING_UNSPECIFIED else pb.Routing.Name(spec.routing),
            cap=spec.split.max_concurrent, score=ready_score(spec.priority, scheduled_ms, aging_ms),
            recurring=spec.trigger.WhichOneof("kind") in ("cron", "every"),
            tasks=tuple(inputs_to_json(list(x)) for x in inputs), spec_version=spec_version, rerun_of=rerun_of,
            after_run=after_run, backfill=backfill, hooks=("F" if spec.on_failure else "") + ("S" if spec.on_success else ""),
        )

    def to_wire(self) -> dict[str, Any]:
        """The block as create_run decodes it from JSON."""
        return {
            "group": self.group, "max_attempts": self.max_attempts, "backoff_ms": self.backoff_ms,
            "backoff_mult": self.backoff_mult, "backoff_max_ms": self.backoff_max_ms,
            "timeout_ms": self.timeout_ms, "route": self.route, "routing": self.routing, "cap": self.cap,
            "score": self.score, "recurring": self.recurring, "tasks": list(self.tasks),
            "spec_v": self.spec_version, "rerun_of": self.rerun_of, "after_run": self.after_run,
            "hooks": self.hooks, **({"backfill": True} if self.backfill else {}),
        }


@dataclass(frozen=True)
class QueueDepth:
    length: int
    by_priority: dict[int, int] | None  # None: the queues were too long to read task by task


@dataclass(frozen=True)
class Claim:
    task_id: str
    worker: str
    token: int
    attempt: int
    run_id: str
    job_id: str
    index: int
    inputs_json: str
    scheduled_ms: int
    task_count: int
    spec_version: int = 1  # the version of the job's spec the run was made from
    upstream_json: str = ""  # a pipeline step's run: its upstream steps' results (ctx.upstream)


@dataclass(frozen=True)
class UpdateResult:
    """What update.lua did (bundle_missing: the new spec's bundle is not stored); the job's state (None: no
    such job), its spec version after the call, and its next fire ms (-1: none)."""

    status: UpdateStatus
    state: JobState | None
    spec_version: int
    next_fire_ms: int


@dataclass(frozen=True)
class RenewResult:
    renewed: list[Lease]
    lost: list[Lease]
    deadline_ms: int


@dataclass(frozen=True)
class Report:
    """One worker report: an attempt started, or finished with an outcome."""

    task_id: str
    token: int
    outcome: str  # STARTED | SUCCEEDED | FAILED | TIMED_OUT | CANCELLED | RELEASED
    result_json: str = ""
    error: str = ""
    traceback: str = ""
    started_ms: int = 0
    finished_ms: int = 0
    log_path: str = ""


@dataclass(frozen=True)
class Verdict:
    task_id: str
    verdict: VerdictKind
    task_state: TaskState | None  # None: no such task
    run_id: str
    run_state: RunState | None  # None unless the run just ended
    not_before_ms: int
    pipeline: PipelineEnd | None = None  # the pipeline run that the run's end ended

    @classmethod
    def of(cls, task_id: str, verdict: str, task_state: str, run_id: str, run_state: str,
           not_before_ms: int, *pipeline: Any) -> Verdict:
        """From the script's words ('' for none; ``pipeline``: the words of lib_pipelines.lua pipeline_end); an unknown
        word raises ValueError."""
        return cls(task_id, VerdictKind(verdict), TaskState(task_state) if task_state else None, run_id,
                   RunState(run_state) if run_state else None, not_before_ms, PipelineEnd.of(*pipeline))


@dataclass(frozen=True)
class Reaped:
    task_id: str
    what: Loss
    task_state: TaskState
    run_id: str
    run_state: RunState | None  # None unless the run just ended
    worker: str
    not_before_ms: int
    token: int  # of the attempt that ended
    pipeline: PipelineEnd | None = None  # the pipeline run that the run's end ended

    @classmethod
    def of(cls, task_id: str, what: str, task_state: str, run_id: str, run_state: str, worker: str,
           not_before_ms: int, token: int, *pipeline: Any) -> Reaped:
        """From the script's words ('' for none; ``pipeline``: the words of lib_pipelines.lua pipeline_end); an unknown
        word raises ValueError."""
        return cls(task_id, Loss(what), TaskState(task_state), run_id, RunState(run_state) if run_state else None,
                   worker, not_before_ms, token, PipelineEnd.of(*pipeline))


@dataclass(frozen=True)
class CancelResult:
    status: CancelStatus
    cancelled: list[str]
    leased: list[LeasedTask]
    ended_runs: list[EndedRun]


@dataclass(frozen=True)
class PurgeResult:
    """What one bounded retention step did (retention.lua's reply)."""

    cursor: int  # where the next step's scan of jobs starts; 0: this one reached the end
    runs_deleted: int
    jobs_deleted: int
    keys_deleted: int
    more: bool  # the step's budget ran out: there is more to delete now


@dataclass(frozen=True)
class RetentionBounds:
    """How much history is kept (``--keep-runs``, ``--history-max-age``) and how much one step may delete."""

    keep_runs: int
    max_age_ms: int
    jobs_per_step: int
    budget: int  # keys deleted per step, about
