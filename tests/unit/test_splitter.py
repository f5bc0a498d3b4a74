"""The splitter: input syntax, task count (DataX's channel count) and fair assignment by resource mark.

The property tests pin the guarantees documented in docs/splitting.md.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkyard.spec import parse_input
from sparkyard.master.splitter import (
    MAX_TASKS_PER_RUN,
    SplitError,
    SplitInput,
    SplitSpec,
    channel_count,
    split,
    split_job,
)
from sparkyard.v1 import sparkyard_pb2 as pb

# -------------------------------------------------------------------------------------------- channel_count


def _inputs(count: int, mark: str = "") -> tuple[SplitInput, ...]:
    return tuple(SplitInput(f"in-{i}", mark) for i in range(count))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (SplitSpec(), 1),
        (SplitSpec(inputs=_inputs(7)), 7),
        (SplitSpec(inputs=_inputs(MAX_TASKS_PER_RUN + 5)), MAX_TASKS_PER_RUN),
        (SplitSpec(parallelism=4), 4),
        (SplitSpec(inputs=_inputs(2), parallelism=8), 8),
        (SplitSpec(max_bytes_per_sec=1000, task_bytes_per_sec=100), 10),
        (SplitSpec(max_bytes_per_sec=1050, task_bytes_per_sec=100), 10),
        (SplitSpec(max_records_per_sec=500, task_records_per_sec=100), 5),
        (
            SplitSpec(
                max_bytes_per_sec=1000, task_bytes_per_sec=100, max_records_per_sec=500, task_records_per_sec=100
            ),
            5,
        ),
        (SplitSpec(max_bytes_per_sec=5, task_bytes_per_sec=10), 1),
        (SplitSpec(max_bytes_per_sec=10**12, task_bytes_per_sec=1), MAX_TASKS_PER_RUN),
        (SplitSpec(inputs=_inputs(50), max_records_per_sec=300, task_records_per_sec=100), 3),
    ],
)
def test_channel_count_follows_parallelism_then_limits_then_inputs(spec: SplitSpec, expected: int) -> None:
    assert channel_count(spec) == expected


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (SplitSpec(parallelism=-1), "split.parallelism"),
        (SplitSpec(max_bytes_per_sec=-1, task_bytes_per_sec=1), "split.max_bytes_per_sec"),
        (SplitSpec(max_records_per_sec=-1, task_records_per_sec=1), "split.max_records_per_sec"),
        (SplitSpec(max_bytes_per_sec=1, task_bytes_per_sec=-1), "split.task_bytes_per_sec"),
        (SplitSpec(max_records_per_sec=1, task_records_per_sec=-1), "split.task_records_per_sec"),
        (SplitSpec(parallelism=4, max_bytes_per_sec=100, task_bytes_per_sec=10), "split.parallelism"),
        (SplitSpec(parallelism=4, task_records_per_sec=10), "split.parallelism"),
        (SplitSpec(parallelism=MAX_TASKS_PER_RUN + 1), "split.parallelism"),
        (SplitSpec(max_bytes_per_sec=100), "split.task_bytes_per_sec"),
        (SplitSpec(max_records_per_sec=100), "split.task_records_per_sec"),
        (SplitSpec(task_bytes_per_sec=100), "split.max_bytes_per_sec"),
        (SplitSpec(task_records_per_sec=100), "split.max_records_per_sec"),
        (SplitSpec(inputs=(SplitInput("a"), SplitInput(""))), "split.inputs[1]"),
    ],
)
def test_inconsistent_spec_raises_split_error_naming_the_field(spec: SplitSpec, field: str) -> None:
    with pytest.raises(SplitError) as err:
        channel_count(spec)
    assert err.value.field == field
    assert str(err.value).startswith(field + ": ")
    assert isinstance(err.value, ValueError)
    with pytest.raises(SplitError):
        split(spec)


def test_parallelism_at_the_maximum_is_accepted() -> None:
    assert channel_count(SplitSpec(parallelism=MAX_TASKS_PER_RUN)) == MAX_TASKS_PER_RUN


# ------------------------------------------------------------------------------------------------ split


def test_parallelism_without_inputs_gives_that_many_empty_tasks() -> None:
    assert split(SplitSpec(parallelism=4)) == [(), (), (), ()]


def test_no_inputs_and_no_parallelism_gives_one_empty_task() -> None:
    assert split(SplitSpec()) == [()]
    assert split_job(pb.JobSpec()) == split(SplitSpec())  # its shortcut for a job with nothing to split


def test_a_job_splits_as_its_split_message_says() -> None:
    spec = pb.JobSpec(split=pb.SplitSpec(parallelism=3))
    assert split_job(spec) == split(SplitSpec(parallelism=3)) == [(), (), ()]
    with pytest.raises(SplitError, match="split.parallelism"):
        split_job(pb.JobSpec(split=pb.SplitSpec(parallelism=MAX_TASKS_PER_RUN + 1)))


def test_task_count_is_capped_by_the_number_of_inputs() -> None:
    assert len(split(SplitSpec(inputs=_inputs(3), parallelism=8))) == 3


def test_worked_example_of_the_module_docstring() -> None:
    inputs = tuple(parse_input(t) for t in "a=a1 a=a2 a=a3 a=a4 b=b1 b=b2 c=c1".split())
    tasks = [[i.value for i in task] for task in split(SplitSpec(inputs, parallelism=3))]
    assert tasks == [["a1", "c1", "a4"], ["b1", "a2"], ["a3", "b2"]]


def test_two_marks_over_two_tasks_are_not_each_pinned_to_one_task() -> None:
    # DataX's interleave-then-deal gives (a1, a2) and (b1, b2) here: each source hit by one task only.
    inputs = tuple(parse_input(t) for t in "a=a1 a=a2 b=b1 b=b2".split())
    tasks = [[i.value for i in task] for task in split(SplitSpec(inputs, parallelism=2))]
    assert tasks == [["a1", "b1"], ["b2", "a2"]]


MARKS = st.sampled_from(["", "db1", "db2", "db3", "db4"])


@st.composite
def specs(draw: st.DrawFn) -> SplitSpec:
    marks = draw(st.lists(MARKS, max_size=80))
    inputs = tuple(SplitInput(f"v{i}", mark) for i, mark in enumerate(marks))
    return SplitSpec(inputs=inputs, parallelism=draw(st.integers(min_value=0, max_value=12)))


@given(specs())
def test_every_input_lands_in_exactly_one_task(spec: SplitSpec) -> None:
    tasks = split(spec)
    assert Counter(item for task in tasks for item in task) == Counter(spec.inputs)
    if spec.inputs:
        assert len(tasks) == min(channel_count(spec), len(spec.inputs))
        assert all(tasks)
    else:
        assert tasks == [()] * channel_count(spec)


@given(specs())
def test_task_sizes_differ_by_at_most_one_larger_tasks_first(spec: SplitSpec) -> None:
    sizes = [len(task) for task in split(spec)]
    assert sizes == sorted(sizes, reverse=True)
    assert max(sizes) - min(sizes) <= 1


@given(specs())
def test_every_mark_is_spread_over_the_tasks_within_one(spec: SplitSpec) -> None:
    tasks = split(spec)
    for mark in {item.mark for item in spec.inputs}:
        counts = [sum(1 for item in task if item.mark == mark) for task in tasks]
        assert max(counts) - min(counts) <= 1, (mark, counts)


@given(specs())
def test_a_task_repeats_a_mark_only_when_no_other_mark_is_left(spec: SplitSpec) -> None:
    for task in split(spec):
        for i in range(1, len(task)):
            if task[i].mark == task[i - 1].mark:
                assert all(item.mark == task[i].mark for item in task[i:]), task


@given(specs())
def test_a_task_has_the_fewest_adjacent_same_mark_pairs_possible(spec: SplitSpec) -> None:
    for task in split(spec):
        repeats = sum(1 for a, b in zip(task, task[1:]) if a.mark == b.mark)
        largest = max(Counter(item.mark for item in task).values(), default=0)
        # The largest mark's inputs can be separated by at most len - largest others: a lower bound, met.
        assert repeats == max(0, largest - (len(task) - largest) - 1)


@given(specs())
def test_inputs_of_one_mark_keep_their_order_within_a_task(spec: SplitSpec) -> None:
    position = {item: i for i, item in enumerate(spec.inputs)}
    for task in split(spec):
        for mark in {item.mark for item in task}:
            indexes = [position[item] for item in task if item.mark == mark]
            assert indexes == sorted(indexes)


@given(specs())
def test_split_is_deterministic(spec: SplitSpec) -> None:
    copy = SplitSpec(inputs=tuple(SplitInput(i.value, i.mark) for i in spec.inputs), parallelism=spec.parallelism)
    assert split(spec) == split(copy)


@given(
    marks=st.integers(min_value=2, max_value=5),
    tasks=st.integers(min_value=1, max_value=9),
    rounds=st.integers(min_value=1, max_value=3),
)
def test_with_equal_shares_each_wave_hits_each_mark_from_at_most_its_share_of_tasks(
    marks: int, tasks: int, rounds: int
) -> None:
    per_mark = tasks * rounds
    inputs = tuple(SplitInput(f"m{m}-{i}", f"m{m}") for m in range(marks) for i in range(per_mark))
    result = split(SplitSpec(inputs=inputs, parallelism=tasks))
    for wave in range(marks * rounds):
        hits = Counter(task[wave].mark for task in result)
        assert max(hits.values()) <= math.ceil(tasks / marks), (wave, hits)


def test_many_distinct_marks_split_quickly() -> None:
    inputs = tuple(SplitInput(f"v{i}", f"m{i % 5000}") for i in range(50_000))
    tasks = split(SplitSpec(inputs=inputs, parallelism=64))
    assert sum(len(t) for t in tasks) == 50_000
