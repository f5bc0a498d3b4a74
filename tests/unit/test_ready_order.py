"""The ready queue's order: priority first among tasks fired together, age wins in the long run."""

from __future__ import annotations

from sparkyard.master.store_values import DEFAULT_PRIORITY_AGING_MS, ready_score

T = 1_790_000_000_000


def test_tasks_fired_in_the_same_second_run_strictly_by_priority() -> None:
    scores = {p: ready_score(p, T + 999) for p in (1, 2, 10)}
    scores[0] = ready_score(0, T)
    assert sorted(scores, key=scores.__getitem__) == [10, 2, 1, 0]


def test_equal_priorities_run_in_fire_time_order() -> None:
    assert ready_score(5, T) < ready_score(5, T + 1)


def test_a_waiting_low_priority_task_overtakes_newer_high_priority_ones() -> None:
    waited = 11 * DEFAULT_PRIORITY_AGING_MS
    old_low, new_high = ready_score(0, T), ready_score(10, T + waited)
    assert old_low < new_high  # waited longer than 10 priority points are worth


def test_priority_is_worth_no_more_than_its_aging_step() -> None:
    assert ready_score(10, T + 10 * DEFAULT_PRIORITY_AGING_MS) == ready_score(0, T)
