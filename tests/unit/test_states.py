"""The four state machines: every allowed and every forbidden edge, terminal states, the
mapping to the protobuf enums, and the Lua rendering of the tables that the Redis scripts enforce.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Mapping, NamedTuple

import pytest

from sparkyard.states import (
    ATTEMPT_TERMINAL,
    ATTEMPT_TRANSITIONS,
    JOB_TERMINAL,
    JOB_TRANSITIONS,
    RUN_TERMINAL,
    RUN_TRANSITIONS,
    STEP_TERMINAL,
    STEP_TRANSITIONS,
    TASK_TERMINAL,
    TASK_TRANSITIONS,
    AttemptState,
    IllegalTransition,
    JobState,
    RunState,
    StepState,
    TaskState,
    can_move,
    check_move,
    from_proto,
    lua_tables,
    to_proto,
)
from sparkyard.v1 import sparkyard_pb2 as pb

StateEnum = type[JobState] | type[RunState] | type[TaskState] | type[AttemptState]


class Machine(NamedTuple):
    enum: Any  # one of the four StateEnum classes
    table: Mapping[Any, frozenset[Any]]
    terminal: frozenset[Any]
    proto: Any  # the protobuf EnumTypeWrapper (pb.TaskState, …)


MACHINES: dict[str, Machine] = {
    "job": Machine(JobState, JOB_TRANSITIONS, JOB_TERMINAL, pb.JobState),
    "run": Machine(RunState, RUN_TRANSITIONS, RUN_TERMINAL, pb.RunState),
    "task": Machine(TaskState, TASK_TRANSITIONS, TASK_TERMINAL, pb.TaskState),
    "attempt": Machine(AttemptState, ATTEMPT_TRANSITIONS, ATTEMPT_TERMINAL, pb.AttemptState),
    "step": Machine(StepState, STEP_TRANSITIONS, STEP_TERMINAL, pb.StepState),
}

# The documented machines (docs/architecture.md), written out by hand so a change to the tables is a visible change here.
EXPECTED_EDGES: dict[str, set[tuple[str, str]]] = {
    "job": {
        ("ACTIVE", "PAUSED"), ("ACTIVE", "COMPLETED"), ("ACTIVE", "CANCELLED"),
        ("PAUSED", "ACTIVE"), ("PAUSED", "COMPLETED"), ("PAUSED", "CANCELLED"),
    },
    "run": {
        ("SCHEDULED", "RUNNING"), ("SCHEDULED", "FAILED"), ("SCHEDULED", "CANCELLED"), ("SCHEDULED", "SKIPPED"),
        ("RUNNING", "SUCCEEDED"), ("RUNNING", "FAILED"), ("RUNNING", "CANCELLED"),
    },
    "task": {
        ("READY", "LEASED"), ("READY", "CANCELLED"),
        ("LEASED", "SUCCEEDED"), ("LEASED", "FAILED"), ("LEASED", "DEAD"), ("LEASED", "READY"),
        ("LEASED", "CANCELLED"),
        ("FAILED", "READY"), ("FAILED", "CANCELLED"),
    },
    "attempt": {
        ("RUNNING", "SUCCEEDED"), ("RUNNING", "FAILED"), ("RUNNING", "TIMED_OUT"), ("RUNNING", "LOST"),
        ("RUNNING", "CANCELLED"), ("RUNNING", "RELEASED"),
    },
    "step": {
        ("PENDING", "RUNNING"), ("PENDING", "SKIPPED"), ("PENDING", "UPSTREAM_FAILED"), ("PENDING", "CANCELLED"),
        ("RUNNING", "SUCCEEDED"), ("RUNNING", "FAILED"), ("RUNNING", "CANCELLED"), ("RUNNING", "SKIPPED"),
    },
}
EXPECTED_TERMINAL: dict[str, set[str]] = {
    "job": {"COMPLETED", "CANCELLED"},
    "run": {"SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED"},
    "task": {"SUCCEEDED", "DEAD", "CANCELLED"},
    "attempt": {"SUCCEEDED", "FAILED", "TIMED_OUT", "LOST", "CANCELLED", "RELEASED"},
    "step": {"SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED", "UPSTREAM_FAILED"},
}


def _all_pairs(kind: str) -> list[tuple[str, str]]:
    states = [s.value for s in MACHINES[kind][0]]
    return [(a, b) for a in states for b in states]


ALLOWED = [(kind, a, b) for kind, edges in EXPECTED_EDGES.items() for a, b in sorted(edges)]
FORBIDDEN = [
    (kind, a, b) for kind in EXPECTED_EDGES for a, b in _all_pairs(kind) if (a, b) not in EXPECTED_EDGES[kind]
]


def _edge_id(edge: tuple[str, str, str]) -> str:
    kind, a, b = edge
    return f"{kind}:{a}->{b}"


# ------------------------------------------------------------------------------------------------- edges


@pytest.mark.parametrize("edge", ALLOWED, ids=_edge_id)
def test_allowed_edge_is_accepted(edge: tuple[str, str, str]) -> None:
    kind, current, target = edge
    assert can_move(kind, current, target)
    check_move(kind, current, target)  # does not raise


@pytest.mark.parametrize("edge", FORBIDDEN, ids=_edge_id)
def test_forbidden_edge_is_refused(edge: tuple[str, str, str]) -> None:
    kind, current, target = edge
    assert not can_move(kind, current, target)
    with pytest.raises(IllegalTransition, match=f"{kind} cannot move from {current} to {target}"):
        check_move(kind, current, target)


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_transition_table_is_exactly_the_documented_machine(kind: str) -> None:
    _, table, _, _ = MACHINES[kind]
    edges = {(a.value, b.value) for a, targets in table.items() for b in targets}
    assert edges == EXPECTED_EDGES[kind]


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_every_state_has_a_row_in_the_transition_table(kind: str) -> None:
    enum, table, _, _ = MACHINES[kind]
    assert set(table) == set(enum)


def test_illegal_transition_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        check_move("task", "SUCCEEDED", "READY")


def test_unknown_source_state_has_no_edges() -> None:
    assert not can_move("task", "NOT_A_STATE", "READY")


# ---------------------------------------------------------------------------------------------- terminal


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_terminal_set_is_the_documented_one(kind: str) -> None:
    _, _, terminal, _ = MACHINES[kind]
    assert {s.value for s in terminal} == EXPECTED_TERMINAL[kind]


@pytest.mark.parametrize(
    ("kind", "state"),
    [(kind, s) for kind, states in EXPECTED_TERMINAL.items() for s in sorted(states)],
)
def test_terminal_state_has_no_outgoing_edge(kind: str, state: str) -> None:
    enum, table, _, _ = MACHINES[kind]
    assert table[enum(state)] == frozenset()
    assert not any(can_move(kind, state, target.value) for target in enum)


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_every_non_terminal_state_has_an_outgoing_edge(kind: str) -> None:
    enum, table, terminal, _ = MACHINES[kind]
    assert all(table[s] for s in enum if s not in terminal)


# ------------------------------------------------------------------------------------------------ protobuf


def _proto_names(kind: str) -> list[str]:
    return [name for name in MACHINES[kind].proto.keys() if not name.endswith("_UNSPECIFIED")]


PROTO_CASES = [(kind, name) for kind in MACHINES for name in _proto_names(kind)]


@pytest.mark.parametrize(("kind", "name"), PROTO_CASES, ids=[n for _, n in PROTO_CASES])
def test_every_protobuf_enum_value_maps_to_a_state_and_back(kind: str, name: str) -> None:
    enum, _, _, wrapper = MACHINES[kind]
    state = from_proto(enum, name)
    assert isinstance(state, enum)
    assert to_proto(state) == name
    assert wrapper.Value(to_proto(state)) == wrapper.Value(name)


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_every_state_has_a_protobuf_enum_value(kind: str) -> None:
    enum, _, _, wrapper = MACHINES[kind]
    assert {to_proto(s) for s in enum} == set(_proto_names(kind))
    for state in enum:
        assert wrapper.Value(to_proto(state)) > 0


@pytest.mark.parametrize(
    ("state", "name"),
    [
        (JobState.ACTIVE, "JOB_ACTIVE"),
        (RunState.SKIPPED, "RUN_SKIPPED"),
        (TaskState.READY, "TASK_READY"),
        (AttemptState.TIMED_OUT, "ATTEMPT_TIMED_OUT"),
    ],
)
def test_to_proto_prefixes_the_state_with_its_machine(state: Enum, name: str) -> None:
    assert to_proto(state) == name


@pytest.mark.parametrize(
    ("enum", "name"),
    [(TaskState, "RUN_SUCCEEDED"), (RunState, "TASK_READY"), (JobState, "ACTIVE"), (AttemptState, "")],
)
def test_from_proto_refuses_a_name_of_another_enum(enum: StateEnum, name: str) -> None:
    with pytest.raises(ValueError, match=enum.__name__):
        from_proto(enum, name)


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_unspecified_protobuf_value_is_not_a_state(kind: str) -> None:
    enum, _, _, wrapper = MACHINES[kind]
    unspecified = wrapper.Name(0)
    with pytest.raises(ValueError):
        from_proto(enum, unspecified)


# ----------------------------------------------------------------------------------------------------- Lua


def _parse_lua_tables(text: str) -> dict[str, dict[str, set[str]]]:
    """Read back ``EDGES`` from the Lua chunk: ``  kind = {`` opens a machine, ``    STATE = {A = true, …},``
    is one row."""
    kind_line = re.compile(r"^  ([a-z]+) = \{$")
    row_line = re.compile(r"^    ([A-Z_]+) = \{(.*)\},$")
    target = re.compile(r"([A-Z_]+) = true")
    out: dict[str, dict[str, set[str]]] = {}
    current: dict[str, set[str]] | None = None
    for line in text.splitlines():
        if m := kind_line.match(line):
            current = out.setdefault(m.group(1), {})
        elif m := row_line.match(line):
            assert current is not None, f"row outside a machine: {line!r}"
            current[m.group(1)] = set(target.findall(m.group(2)))
    return out


def test_lua_tables_define_the_edges_table() -> None:
    text = lua_tables()
    assert text.splitlines()[0] == "local EDGES = {"
    assert text.splitlines()[-1] == "}"


def test_lua_tables_render_every_machine_and_every_state() -> None:
    parsed = _parse_lua_tables(lua_tables())
    assert set(parsed) == set(MACHINES)
    for kind, (enum, _, _, _) in MACHINES.items():
        assert set(parsed[kind]) == {s.value for s in enum}


@pytest.mark.parametrize("edge", ALLOWED, ids=_edge_id)
def test_lua_tables_render_allowed_edge(edge: tuple[str, str, str]) -> None:
    kind, current, target = edge
    assert target in _parse_lua_tables(lua_tables())[kind][current]


@pytest.mark.parametrize("kind", sorted(MACHINES))
def test_lua_tables_render_no_edge_the_python_table_lacks(kind: str) -> None:
    parsed = _parse_lua_tables(lua_tables())[kind]
    rendered = {(a, b) for a, targets in parsed.items() for b in targets}
    assert rendered == EXPECTED_EDGES[kind]


def test_lua_tables_render_a_leased_task_row() -> None:
    assert "    LEASED = {CANCELLED = true, DEAD = true, FAILED = true, READY = true, SUCCEEDED = true}," in (
        lua_tables().splitlines()
    )
