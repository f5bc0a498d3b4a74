"""Schedule entries armed in the wheel (master/arming.py), on a fake clock."""

from __future__ import annotations

import pytest

from sparkyard.clock import FakeClock
from sparkyard.master.arming import BURST_AHEAD_MAX_MS, BURST_MS_PER_ENTRY, Arming
from sparkyard.master.timer import SystemTimer

HORIZON_MS = 60_000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def arming(clock: FakeClock) -> Arming:
    timer = SystemTimer(clock)
    timer.start()
    return Arming(timer, clock, HORIZON_MS, 0)


@pytest.fixture
def ahead(clock: FakeClock) -> Arming:
    """Armed the default fire-ahead (250 ms) before an entry's time."""
    timer = SystemTimer(clock)
    timer.start()
    return Arming(timer, clock, HORIZON_MS, 250)


def _ms(clock: FakeClock, ahead_s: float) -> int:
    return int((clock.now() + ahead_s) * 1000)


def _drain(arming: Arming) -> list[tuple[str, int]]:
    out = []
    while not arming.due.empty():
        out.append(arming.due.get_nowait())
    return out


def test_an_entry_within_the_horizon_fires_once_at_its_time(arming: Arming, clock: FakeClock) -> None:
    due = _ms(clock, 5)
    arming.consider("j1", due)
    arming.consider("j1", due)  # the same time again: still one timer
    assert arming.armed == 1
    clock.advance(4.9)
    assert _drain(arming) == []
    clock.advance(0.2)
    assert _drain(arming) == [("j1", due)] and arming.armed == 0


def test_beyond_the_horizon_or_no_next_time_nothing_is_armed(arming: Arming, clock: FakeClock) -> None:
    arming.consider("far", _ms(clock, HORIZON_MS / 1000 + 10))
    arming.consider("none", -1)
    assert arming.armed == 0


def test_a_moved_time_replaces_the_old_timer_and_forget_cancels(arming: Arming, clock: FakeClock) -> None:
    arming.consider("moved", _ms(clock, 5))
    later = _ms(clock, 20)
    arming.consider("moved", later)
    arming.consider("paused", _ms(clock, 5))
    arming.forget("paused")
    clock.advance(10)
    assert _drain(arming) == []
    clock.advance(11)
    assert _drain(arming) == [("moved", later)]


def test_clear_cancels_everything(arming: Arming, clock: FakeClock) -> None:
    for i in range(5):
        arming.consider(f"j{i}", _ms(clock, 1 + i))
    arming.clear()
    clock.advance(10)
    assert arming.armed == 0 and _drain(arming) == []


def test_with_a_fire_ahead_an_entry_expires_that_long_before_its_time_or_at_it_when_asked(ahead: Arming,
                                                                                         clock: FakeClock) -> None:
    arming = ahead
    due = _ms(clock, 5)
    arming.consider("ahead", due)
    arming.at_time("exact", due)
    clock.advance(4.7)
    assert _drain(arming) == []
    clock.advance(0.1)
    assert _drain(arming) == [("ahead", due)]
    clock.advance(0.15)
    assert _drain(arming) == [] and arming.armed == 1
    clock.advance(0.06)
    assert _drain(arming) == [("exact", due)] and arming.armed == 0


def test_many_entries_due_in_the_same_second_are_armed_further_ahead_the_later_they_come(ahead: Arming,
                                                                                        clock: FakeClock) -> None:
    """A cohort of 4,001: the first is armed the fire-ahead before its time, each next one BURST_MS_PER_ENTRY
    further (the 4,001st a second further); an entry of another second is not moved by them."""
    arming = ahead
    due = (int(clock.now()) + 10) * 1000
    for i in range(4_001):
        arming.consider(f"j{i}", due)
    arming.consider("alone", due + 1_000)
    extra_s = 4_000 * BURST_MS_PER_ENTRY / 1000
    clock.advance(due / 1000 - clock.now() - 0.25 - extra_s - 0.005)
    assert _drain(arming) == []
    clock.advance(0.01)
    first_due = {job for job, _ in _drain(arming)}
    assert "j4000" in first_due and "j0" not in first_due
    clock.advance(extra_s)
    assert len(first_due) + len(_drain(arming)) == 4_001 and arming.armed == 1
    clock.advance(0.99)  # to 5 ms before the fire-ahead of the other second's entry
    assert _drain(arming) == [] and arming.armed == 1
    clock.advance(0.01)
    assert _drain(arming) == [("alone", due + 1_000)]


@pytest.mark.parametrize(("horizon_ms", "furthest_ms"), [(HORIZON_MS, 250 + BURST_AHEAD_MAX_MS), (6_000, 3_000)])
def test_a_burst_goes_no_further_ahead_than_its_bound_nor_half_the_horizon(clock: FakeClock, horizon_ms: int,
                                                                           furthest_ms: int) -> None:
    """The preloader arms an entry at least half a horizon before its time: a cohort's extra stops there (and at
    BURST_AHEAD_MAX_MS), so no entry's timer would have expired before the entry was loaded."""
    timer = SystemTimer(clock)
    timer.start()
    arming = Arming(timer, clock, horizon_ms, 250)
    assert arming.ahead_max_ms == furthest_ms
    due = (int(clock.now()) + 3) * 1000 + horizon_ms // 2
    cohort = int(furthest_ms / BURST_MS_PER_ENTRY) + 100  # more than the bound lets go further
    for i in range(cohort):
        arming.consider(f"j{i}", due)
    clock.advance(due / 1000 - clock.now() - furthest_ms / 1000 - 0.005)
    assert _drain(arming) == []
    clock.advance(0.01)
    assert len(_drain(arming)) >= 100


def test_an_entry_moved_or_forgotten_leaves_its_cohort(ahead: Arming, clock: FakeClock) -> None:
    arming = ahead
    due = (int(clock.now()) + 10) * 1000
    for i in range(4_000):
        arming.consider(f"j{i}", due)
    for i in range(4_000):
        arming.forget(f"j{i}") if i % 2 else arming.consider(f"j{i}", due + 5_000)
    arming.consider("last", due)  # its cohort is empty again: armed the fire-ahead before its time
    clock.advance(due / 1000 - clock.now() - 0.26)
    assert _drain(arming) == []
    clock.advance(0.02)
    assert _drain(arming) == [("last", due)]
