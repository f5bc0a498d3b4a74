"""What the store's calls answer besides records of jobs, runs and tasks: each script's status words as an
enum (the script's reply is parsed into it, so an unknown word raises ValueError at once), and the
store's small results as named records instead of bare tuples.

The enums are ``str`` enums holding the scripts' own words (they appear in logs and metric labels).
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from sparkyard.states import JobState, RunState


class PipelineEnd(NamedTuple):
    """A pipeline run that the end of one of its steps' runs ended (returned with that run's end)."""

    run_id: str
    state: RunState
    took_ms: int  # from its firing to its end

    @classmethod
    def of(cls, run_id: str = "", state: str = "", took_ms: int | str = 0) -> PipelineEnd | None:
        """From a script's words (lib_pipelines.lua pipeline_end: '', '', 0 for none)."""
        return cls(run_id, RunState(state), int(took_ms)) if run_id else None


class FireStatus(str, Enum):
    """What one firing did (fire.lua)."""

    CREATED = "created"  # the run was made
    SKIPPED = "skipped"  # recorded as a SKIPPED run (overlap forbid, misfire skip)
    EXISTS = "exists"  # the run exists already (another master, or a duplicate timer, fired it)
    STALE = "stale"  # the schedule entry is no longer the one this firing consumes
    INACTIVE = "inactive"  # the job is paused, cancelled or gone
    EXHAUSTED = "exhausted"  # the job has made its max runs
    CHANGED = "changed"  # the job's spec changed since the caller read it: read it again
    FAILED = "failed"  # the firing raised in Redis (FireResult.error says why); the others of its call went on


# Firings after which the run exists (made by this firing or before): the schedule entry was consumed.
RUN_EXISTS = frozenset({FireStatus.CREATED, FireStatus.SKIPPED, FireStatus.EXISTS})


class CancelStatus(str, Enum):
    OK = "ok"
    RETRY = "retry"  # the job has an active run the caller did not list: nothing changed


class StateChangeStatus(str, Enum):
    """What a pause or resume did (job_state.lua)."""

    OK = "ok"
    UNCHANGED = "unchanged"  # the job was in that state already
    ILLEGAL = "illegal"  # no edge from the job's state to that one (it ended)
    MISSING = "missing"


class RescheduleStatus(str, Enum):
    OK = "ok"
    NOT_AWAITING = "not_awaiting"  # the job does not wait for that run (any more)


class UpdateStatus(str, Enum):
    """What a spec update did (update.lua)."""

    OK = "ok"
    MISSING = "missing"
    ENDED = "ended"  # the job fires no more
    CONFLICT = "conflict"  # another update came first
    BUNDLE_MISSING = "bundle_missing"  # the new spec's bundle is not stored


class BackfillStatus(str, Enum):
    OK = "ok"
    MISSING = "missing"
    CANCELLED = "cancelled"


class DeleteStatus(str, Enum):
    """What a delete did (delete_job.lua); only OK changed anything."""

    OK = "ok"
    MISSING = "missing"
    ACTIVE = "active"  # the job has active runs
    CHILDREN = "children"  # other jobs fire after it


class JobProgress(NamedTuple):
    state: JobState
    runs: int
    spec_version: int


class ScheduleEntry(NamedTuple):
    job_id: str
    fire_ms: int


class Released(NamedTuple):
    """A task whose retry backoff ended, back in its group's ready queue."""

    task_id: str
    group: str


class Delayed(NamedTuple):
    """A task waiting out its retry backoff."""

    task_id: str
    not_before_ms: int


class Lease(NamedTuple):
    task_id: str
    token: int


class LeasedTask(NamedTuple):
    """A task that was leased when it was cancelled: its worker is told to stop that attempt."""

    task_id: str
    worker: str
    token: int


class EndedRun(NamedTuple):
    run_id: str
    state: RunState
    pipeline: PipelineEnd | None = None  # the pipeline run that this run's end ended


class StateChange(NamedTuple):
    """A pause or resume: its status, the job's state after it (None: no such job), its next fire ms (-1:
    none)."""

    status: StateChangeStatus
    state: JobState | None
    next_fire_ms: int


class Rescheduled(NamedTuple):
    status: RescheduleStatus
    next_fire_ms: int


class BackfillPlanned(NamedTuple):
    status: BackfillStatus
    added: int
    pending: int


class Deletion(NamedTuple):
    """A delete: its status and what kept the job (its active runs, or its child jobs; else empty)."""

    status: DeleteStatus
    blockers: list[str]
