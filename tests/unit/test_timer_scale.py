"""One million timers on a FakeClock: each fires exactly once, at its own millisecond, in deadline order."""

from __future__ import annotations

import random

from sparkyard.clock import FakeClock
from sparkyard.master.timer import SystemTimer, TimerTask

N = 1_000_000
START = 1_000.0


class Probe(TimerTask):
    """Records itself and the fake time it ran at (one object per timer, like a real subclass)."""

    __slots__ = ()
    clock: FakeClock
    fired: list[tuple[TimerTask, float]]

    def run(self) -> None:
        Probe.fired.append((self, Probe.clock.monotonic()))


def test_one_million_timers_each_fire_once_in_deadline_order_at_their_deadline() -> None:
    clock = FakeClock(monotonic_start=START)
    timer = SystemTimer(clock)
    timer.start()
    Probe.clock = clock
    Probe.fired = []
    rnd = random.Random(5)
    probes = [Probe(START + rnd.randrange(1, 2_000) / 1000) for _ in range(N)]
    for probe in probes:
        timer.add(probe)
    assert timer.size == N and clock.pending == 1

    clock.advance(2.5)

    fired = Probe.fired
    assert timer.size == 0 and len(fired) == N
    assert len({id(task) for task, _ in fired}) == N
    deadlines = [task.deadline for task, _ in fired]
    assert all(a <= b for a, b in zip(deadlines, deadlines[1:]))
    assert all(abs(at - task.deadline) < 1e-6 for task, at in fired)
    Probe.fired = []
