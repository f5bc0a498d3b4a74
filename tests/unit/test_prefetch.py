"""The worker's prefetch: Little's law over measured task and refill times (worker/prefetch.py)."""

from __future__ import annotations

import pytest

from sparkyard.worker.prefetch import HEADROOM, MAX_REFILL_SAMPLE_S, Prefetch


def _measured(task_s: float, refill_s: float, maximum: int = 256) -> Prefetch:
    p = Prefetch(maximum)
    for _ in range(60):  # long enough for the moving averages to settle
        p.ended(task_s)
        seq = p.next_seq(100.0, has_results=True)
        p.batch_arrived(100.0 + refill_s, seq)
    return p


def test_nothing_is_prefetched_before_a_task_time_is_known() -> None:
    assert Prefetch(256).want(2, []) == 0


def test_short_tasks_get_slots_times_refill_over_task_time_with_headroom() -> None:
    p = _measured(task_s=0.001, refill_s=0.005)
    assert p.want(2, [0.0005, 0.0001]) == round(HEADROOM * 2 * 0.005 / 0.001)


def test_the_maximum_caps_it_and_zero_turns_it_off() -> None:
    assert _measured(task_s=0.0001, refill_s=0.01, maximum=16).want(2, []) == 16
    assert _measured(task_s=0.0001, refill_s=0.01, maximum=0).want(2, []) == 0


def test_long_tasks_get_none_a_queued_task_would_only_wait() -> None:
    assert _measured(task_s=30.0, refill_s=0.005).want(2, [1.0, 2.0]) == 0


def test_a_slot_held_far_longer_than_the_usual_task_is_not_counted() -> None:
    p = _measured(task_s=0.001, refill_s=0.005)
    one_stuck = p.want(2, [60.0, 0.0005])
    assert 0 < one_stuck < p.want(2, [0.0005, 0.0005])
    assert p.want(2, [60.0, 45.0]) == 0  # both slots run long attempts: queue nothing behind them


def test_a_batch_long_after_the_results_is_not_a_round_trip() -> None:
    p = _measured(task_s=0.001, refill_s=0.005)
    before = p.refill_s
    seq = p.next_seq(200.0, has_results=True)
    p.batch_arrived(200.0 + MAX_REFILL_SAMPLE_S + 5, seq)  # the master had nothing to send for a while
    assert p.refill_s == before


def test_a_batch_answers_the_results_message_it_names_not_a_later_one() -> None:
    p = Prefetch(256)
    first = p.next_seq(10.0, has_results=True)
    second = p.next_seq(10.004, has_results=True)
    p.batch_arrived(10.005, first)  # built before the master saw `second`: a 5 ms round trip
    assert p.refill_s == pytest.approx(0.005)
    p.batch_arrived(10.034, second)  # 30 ms
    assert p.refill_s > 0.005
    assert p.next_seq(11.0, has_results=False) == second + 1  # every message is numbered


def test_messages_without_an_answer_are_forgotten_beyond_a_bound() -> None:
    p = Prefetch(256)
    for i in range(1000):
        p.next_seq(float(i), has_results=True)
    assert len(p._sent) <= 64


def test_results_leave_early_once_per_refill_when_the_queue_falls_to_a_refills_worth() -> None:
    p = _measured(task_s=0.001, refill_s=0.005)  # two slots run 10 tasks during one refill
    assert not Prefetch(256).running_low(1, 2)  # no task time yet: the batch delay decides
    assert not p.running_low(12, 2)
    assert p.running_low(9, 2)
    assert not p.running_low(3, 2) and not p.running_low(1, 2)  # the refill is on its way: no more messages
    p.batch_arrived(200.0, p.next_seq(199.99, has_results=True))
    assert p.running_low(5, 2)


def test_with_nothing_queued_every_result_leaves_at_once() -> None:
    """A freed slot with no task waits for the master to hear of it: with no prefetch (or tasks too long for
    any), the second of two results ending within one round trip must not wait for the batch delay."""
    p = _measured(task_s=0.3, refill_s=0.005, maximum=0)
    assert p.running_low(0, 2) and p.running_low(0, 2)
    assert Prefetch(0).running_low(0, 2)
