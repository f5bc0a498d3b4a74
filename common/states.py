"""The five state machines: Job, Run, Task, Attempt, Step (of a pipeline run) (docs/architecture.md, "State machines").

Each is a ``str`` Enum, a transition table (state → the states it may move to) and a ``TERMINAL`` set.
The tables here are the single source of truth: :func:`lua_tables` renders them into the prelude of every
Lua script, where ``may_move(kind, from, to)`` refuses any edge not listed — so Python and Redis cannot
disagree, and a terminal state can never be overwritten by a late or duplicated message.

The enum values equal the protobuf enum names without their prefix (``TaskState.READY`` ↔
``TASK_READY``), which :func:`to_proto` / :func:`from_proto` rely on.
"""

from __future__ import annotations

from enum import Enum
from typing import Mapping, TypeVar


class JobState(str, Enum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"


class RunState(str, Enum):
    SCHEDULED = "SCHEDULED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"


class StepState(str, Enum):
    """A step of one pipeline run (docs/pipelines.md)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"


class TaskState(str, Enum):
    READY = "READY"
    LEASED = "LEASED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"  # the last attempt failed and a retry is due after the backoff
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"


class AttemptState(str, Enum):
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    LOST = "LOST"
    CANCELLED = "CANCELLED"
    RELEASED = "RELEASED"


class VerdictKind(str, Enum):
    """What report.lua made of one report (the fencing rule's answer)."""

    ACCEPTED = "accepted"
    STALE = "stale"  # its token is not the task's current one: a newer attempt owns the task
    TERMINAL = "terminal"  # the task is no longer LEASED
    UNKNOWN = "unknown"  # no such task


class Loss(str, Enum):
    """Why reap.lua ended an attempt."""

    LOST = "lost"  # its lease expired (worker dead, partitioned)
    TIMEOUT = "timeout"  # its task timeout plus grace passed without a result


J, R, T, A, S = JobState, RunState, TaskState, AttemptState, StepState

JOB_TRANSITIONS: Mapping[JobState, frozenset[JobState]] = {
    J.ACTIVE: frozenset({J.PAUSED, J.COMPLETED, J.CANCELLED}),
    J.PAUSED: frozenset({J.ACTIVE, J.COMPLETED, J.CANCELLED}),
    J.COMPLETED: frozenset(),
    J.CANCELLED: frozenset(),
}

RUN_TRANSITIONS: Mapping[RunState, frozenset[RunState]] = {
    R.SCHEDULED: frozenset({R.RUNNING, R.FAILED, R.CANCELLED, R.SKIPPED}),
    R.RUNNING: frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLED}),
    R.SUCCEEDED: frozenset(),
    R.FAILED: frozenset(),
    R.CANCELLED: frozenset(),
    R.SKIPPED: frozenset(),
}

TASK_TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = {
    # claim; cancel
    T.READY: frozenset({T.LEASED, T.CANCELLED}),
    # result; failure with attempts left; exhausted; lease expired or handed back (→ READY); cancel
    T.LEASED: frozenset({T.SUCCEEDED, T.FAILED, T.DEAD, T.READY, T.CANCELLED}),
    # backoff elapsed; cancel
    T.FAILED: frozenset({T.READY, T.CANCELLED}),
    T.SUCCEEDED: frozenset(),
    T.DEAD: frozenset(),
    T.CANCELLED: frozenset(),
}

ATTEMPT_TRANSITIONS: Mapping[AttemptState, frozenset[AttemptState]] = {
    A.RUNNING: frozenset({A.SUCCEEDED, A.FAILED, A.TIMED_OUT, A.LOST, A.CANCELLED, A.RELEASED}),
    A.SUCCEEDED: frozenset(),
    A.FAILED: frozenset(),
    A.TIMED_OUT: frozenset(),
    A.LOST: frozenset(),
    A.CANCELLED: frozenset(),
    A.RELEASED: frozenset(),
}

STEP_TRANSITIONS: Mapping[StepState, frozenset[StepState]] = {
    # its run is made; its trigger rule settles it without a run; the pipeline run is cancelled
    S.PENDING: frozenset({S.RUNNING, S.SKIPPED, S.UPSTREAM_FAILED, S.CANCELLED}),
    # its run ended so (SKIPPED: every task of it called ctx.skip())
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.SKIPPED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.SKIPPED: frozenset(),
    S.UPSTREAM_FAILED: frozenset(),
}

JOB_TERMINAL = frozenset(s for s, nxt in JOB_TRANSITIONS.items() if not nxt)
RUN_TERMINAL = frozenset(s for s, nxt in RUN_TRANSITIONS.items() if not nxt)
TASK_TERMINAL = frozenset(s for s, nxt in TASK_TRANSITIONS.items() if not nxt)
ATTEMPT_TERMINAL = frozenset(s for s, nxt in ATTEMPT_TRANSITIONS.items() if not nxt)
STEP_TERMINAL = frozenset(s for s, nxt in STEP_TRANSITIONS.items() if not nxt)

TABLES: Mapping[str, Mapping[str, frozenset[str]]] = {
    "job": {s.value: frozenset(n.value for n in nxt) for s, nxt in JOB_TRANSITIONS.items()},
    "run": {s.value: frozenset(n.value for n in nxt) for s, nxt in RUN_TRANSITIONS.items()},
    "task": {s.value: frozenset(n.value for n in nxt) for s, nxt in TASK_TRANSITIONS.items()},
    "attempt": {s.value: frozenset(n.value for n in nxt) for s, nxt in ATTEMPT_TRANSITIONS.items()},
    "step": {s.value: frozenset(n.value for n in nxt) for s, nxt in STEP_TRANSITIONS.items()},
}

_PROTO_PREFIX = {JobState: "JOB_", RunState: "RUN_", TaskState: "TASK_", AttemptState: "ATTEMPT_",
                 StepState: "STEP_"}

E = TypeVar("E", JobState, RunState, TaskState, AttemptState, StepState)


class IllegalTransition(ValueError):
    """A state change that the transition table does not allow."""


def can_move(kind: str, current: str, target: str) -> bool:
    """True when the ``kind`` state machine allows ``current`` → ``target``."""
    return target in TABLES[kind].get(current, frozenset())


def check_move(kind: str, current: str, target: str) -> None:
    """Raise :class:`IllegalTransition` unless ``current`` → ``target`` is allowed."""
    if not can_move(kind, current, target):
        raise IllegalTransition(f"{kind} cannot move from {current} to {target}")


def to_proto(state: JobState | RunState | TaskState | AttemptState | StepState) -> str:
    """The protobuf enum name of a state (TaskState.READY → 'TASK_READY')."""
    return _PROTO_PREFIX[type(state)] + state.value


def from_proto(enum_type: type[E], name: str) -> E:
    """The state for a protobuf enum name ('TASK_READY' → TaskState.READY)."""
    prefix = _PROTO_PREFIX[enum_type]
    if not name.startswith(prefix):
        raise ValueError(f"{name} is not a {enum_type.__name__}")
    return enum_type(name[len(prefix):])


def lua_tables() -> str:
    """The transition tables as a Lua chunk defining ``EDGES[kind][from][to] = true``."""
    lines = ["local EDGES = {"]
    for kind, table in TABLES.items():
        lines.append(f"  {kind} = {{")
        for state, targets in sorted(table.items()):
            inner = ", ".join(f"{t} = true" for t in sorted(targets))
            lines.append(f"    {state} = {{{inner}}},")
        lines.append("  },")
    lines.append("}")
    return "\n".join(lines)
