"""Splitting one run of a job into tasks: how many tasks, and which inputs each one reads.

This is DataX's job split (``JobContainer.adjustChannelNumber`` + ``JobAssignUtil.assignFairly``) adapted
to Sparkyard, where one DataX *task group* is one Sparkyard *task* and one DataX reader slice is one
:class:`SplitInput`. Three steps:

1. **How many tasks** (:func:`channel_count`). An explicit ``parallelism`` wins. Otherwise speed limits
   decide, as in DataX: a job-wide limit divided by the per-task limit is the number of tasks that can run
   at full per-task speed without exceeding the job limit; with both a byte and a record limit, the smaller
   quotient. With neither: one task per input.
2. **Who owns what** (:func:`split`, first half). Inputs are grouped by resource mark (first-appearance
   order) and dealt round-robin over the tasks, mark after mark, the deal continuing where the previous
   mark stopped. So every task gets the same number of inputs give or take one, *and* every mark is spread
   over the tasks the same way (give or take one) — a database is never loaded by one task only.
3. **In which order** (:func:`split`, second half). Within a task, the next input is always taken from the
   mark with the most inputs left that is *not* the mark just read; ties go to the mark that comes first in
   the mark order rotated by the task index. So a task alternates its sources whenever it can, and tasks
   that start together start on different sources.

Worked example — seven inputs on three databases, ``parallelism=3``::

    a1 a2 a3 a4 (mark "a")   b1 b2 (mark "b")   c1 (mark "c")

    deal, continuing the cycle:  a1→T0 a2→T1 a3→T2 a4→T0 | b1→T1 b2→T2 | c1→T0
    owned:  T0 = {a1, a4, c1}   T1 = {a2, b1}   T2 = {a3, b2}
    order:  T0 = (a1, c1, a4)   T1 = (b1, a2)   T2 = (a3, b2)

``a`` has 4 inputs over 3 tasks (2/1/1), ``b`` 2 (0/1/1), ``c`` 1; T0 reads ``c1`` between the two ``a``
inputs; at the first wave the tasks read ``a``, ``b``, ``a``. DataX's own deal (interleave the marks into
one sequence a1 b1 c1 a2 b2 a3 a4, then deal it) gives T0 = (a1, a2, a4), T1 = (b1, b2), T2 = (c1, a3):
database ``b`` is read by one task only and T0 reads ``a`` three times in a row — whenever the number of
tasks lines up with the number of marks, the interleaving is undone by the deal. Dealing mark after mark,
then ordering each task, avoids both.

The guarantees are listed in ``docs/splitting.md`` and pinned by property tests.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from sparkyard.spec import SpecError, SplitInput
from sparkyard.v1 import sparkyard_pb2 as pb

MAX_TASKS_PER_RUN = 10_000
"""Upper bound on tasks per run: each task is a Spark application and a few Redis keys, so a typo such as
``parallelism=1000000`` must be refused rather than flood the ready queue."""

_LIMIT_PAIRS = (
    ("max_bytes_per_sec", "task_bytes_per_sec"),
    ("max_records_per_sec", "task_records_per_sec"),
)
_NUMERIC_FIELDS = (
    "parallelism",
    "max_bytes_per_sec",
    "max_records_per_sec",
    "task_bytes_per_sec",
    "task_records_per_sec",
)


class SplitError(SpecError):
    """A split spec that cannot be honoured; ``field`` names the offending field (``split.parallelism``).

    The gRPC layer maps it to INVALID_ARGUMENT with the field in the message, so a user sees which flag
    to fix.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message)
        self.message = message


@dataclass(frozen=True)
class SplitSpec:
    """How a run is split. Every number is 0 when unset."""

    inputs: tuple[SplitInput, ...] = ()
    parallelism: int = 0
    max_bytes_per_sec: int = 0
    max_records_per_sec: int = 0
    task_bytes_per_sec: int = 0
    task_records_per_sec: int = 0


def split_job(spec: pb.JobSpec) -> list[tuple[SplitInput, ...]]:
    """The task slices of one run of a job (every firing and the submit-time check split the same way)."""
    s = spec.split
    if not s.ListFields():  # nothing to split (most jobs): one task, as split() makes it
        return [()]
    return split(SplitSpec(
        inputs=tuple(SplitInput(i.value, i.mark) for i in s.inputs),
        parallelism=s.parallelism,
        max_bytes_per_sec=s.max_bytes_per_sec,
        max_records_per_sec=s.max_records_per_sec,
        task_bytes_per_sec=s.task_bytes_per_sec,
        task_records_per_sec=s.task_records_per_sec,
    ))


def channel_count(spec: SplitSpec) -> int:
    """How many tasks a run of ``spec`` wants, before it is capped by the number of inputs.

    Explicit parallelism wins (and is refused above :data:`MAX_TASKS_PER_RUN`). From speed limits the
    count is capped at :data:`MAX_TASKS_PER_RUN` instead of refused: the limits are maxima, so fewer tasks
    still respect them. Raises :class:`SplitError` for an inconsistent spec.
    """
    _validate(spec)
    if spec.parallelism:
        return spec.parallelism
    quotients = [
        getattr(spec, job) // getattr(spec, task) for job, task in _LIMIT_PAIRS if getattr(spec, job)
    ]
    if quotients:
        return max(1, min(min(quotients), MAX_TASKS_PER_RUN))
    if spec.inputs:
        return min(len(spec.inputs), MAX_TASKS_PER_RUN)
    return 1


def split(spec: SplitSpec) -> list[tuple[SplitInput, ...]]:
    """Cut ``spec.inputs`` into task slices; element ``i`` is the input slice of task ``i``.

    With inputs there are ``min(channel_count(spec), len(inputs))`` slices, none empty. Without inputs
    there are ``channel_count(spec)`` empty slices: the task index tells each task which part it is.
    Deterministic: the same spec always gives the same split.
    """
    count = channel_count(spec)
    if not spec.inputs:
        return [() for _ in range(count)]
    tasks = min(count, len(spec.inputs))
    groups: dict[str, list[SplitInput]] = {}
    for item in spec.inputs:
        groups.setdefault(item.mark, []).append(item)
    owned: list[dict[int, list[SplitInput]]] = [{} for _ in range(tasks)]
    cursor = 0
    for mark_index, members in enumerate(groups.values()):
        for item in members:
            owned[cursor % tasks].setdefault(mark_index, []).append(item)
            cursor += 1
    return [_interleave(owned[t], t, len(groups)) for t in range(tasks)]


def _interleave(by_mark: dict[int, list[SplitInput]], rotation: int, marks: int) -> tuple[SplitInput, ...]:
    """Order one task's inputs: most-remaining mark first, never the previous mark while another remains.

    Holding the previous mark out of the heap for one step is the classic rearrangement greedy; it yields
    the fewest adjacent same-mark pairs possible for the task's multiset of marks. Ties are broken by the
    mark order rotated by the task index, so tasks with equal shares start on different marks.
    """
    heap = [(-len(items), (mark - rotation) % marks, mark) for mark, items in by_mark.items()]
    heapq.heapify(heap)
    taken = dict.fromkeys(by_mark, 0)
    order: list[SplitInput] = []
    held: tuple[int, int, int] | None = None
    while heap or held is not None:
        if heap:
            entry = heapq.heappop(heap)
        else:
            assert held is not None
            entry, held = held, None
        remaining, tie, mark = entry
        order.append(by_mark[mark][taken[mark]])
        taken[mark] += 1
        if held is not None:
            heapq.heappush(heap, held)
        held = (remaining + 1, tie, mark) if remaining + 1 < 0 else None
    return tuple(order)


def _validate(spec: SplitSpec) -> None:
    for name in _NUMERIC_FIELDS:
        value = getattr(spec, name)
        if value < 0:
            raise SplitError(f"split.{name}", f"must be >= 0 (0 means unset), got {value}")
    limits = [name for name in _NUMERIC_FIELDS[1:] if getattr(spec, name)]
    if spec.parallelism and limits:
        raise SplitError(
            "split.parallelism",
            f"cannot be combined with speed limits ({', '.join('split.' + n for n in limits)}): "
            "set either an explicit parallelism or limits to derive it from",
        )
    if spec.parallelism > MAX_TASKS_PER_RUN:
        raise SplitError(
            "split.parallelism", f"{spec.parallelism} exceeds the maximum of {MAX_TASKS_PER_RUN} tasks per run"
        )
    for job, task in _LIMIT_PAIRS:
        if getattr(spec, job) and not getattr(spec, task):
            raise SplitError(
                f"split.{task}",
                f"is required when split.{job} is set: the task count is the job limit divided by it",
            )
        if getattr(spec, task) and not getattr(spec, job):
            raise SplitError(
                f"split.{job}",
                f"is required when split.{task} is set: a per-task limit alone does not give a task count",
            )
    for position, item in enumerate(spec.inputs):
        if not item.value:
            raise SplitError(f"split.inputs[{position}]", "has an empty value")
