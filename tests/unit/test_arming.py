"""Schedule entries armed in the wheel (master/arming.py), on a fake clock."""

from __future__ import annotations

import pytest

from sparkyard.clock import FakeClock
from sparkyard.master.arming import Arming
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


def test_with_a_fire_ahead_an_entry_expires_that_long_before_its_time_or_at_it_when_asked(clock: FakeClock) -> None:
    timer = SystemTimer(clock)
    timer.start()
    arming = Arming(timer, clock, HORIZON_MS, 250)
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
