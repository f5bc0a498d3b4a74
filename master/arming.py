"""Schedule entries armed in the timing wheel: the part of the preloader every other component talks to.

A job's next fire time reaches the wheel from three places — the preloader's load of the durable schedule,
a submit or resume (the job manager), and the end of a fixed-delay job's run (the core) — and a pause or
cancel takes it out. All of them call :meth:`Arming.consider` / :meth:`Arming.forget`; an entry whose timer
expires goes on :attr:`Arming.due`, which the preloader's firing loop drains. Being its own object, built
first, it lets the core and the job manager arm timers without a reference to the preloader (which needs
the core), so the master's components are wired one way.

An entry's timer expires ``ahead_ms`` before its time (the master's ``--fire-ahead``): its run is created and
its task leased before the second it is due in, and the worker starts it at its time. A firing that must be
decided at its time (overlap forbid or replace: whether an earlier run is still active) is armed again at
its exact time (:meth:`Arming.at_time`).

Many entries due in the same second (a midnight cron burst) are armed further ahead, the more the later
they are armed (:data:`BURST_MS_PER_ENTRY` each, up to :data:`BURST_AHEAD_MAX_MS`): firing and leasing
10,000 runs takes the master and Redis about two seconds, which the second itself cannot hold.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from sparkyard.clock import Clock
from sparkyard.master.timer import SystemTimer, TimerTask

# Each entry already armed for the same second moves the next one this much further ahead: about what firing
# (fire.lua) and leasing (claim.lua) cost per run on a 2-core machine (10,000 due together: leased over
# ~2 s when fired at their time; docs/benchmarks.md, "Bursts"), so a cohort's last run is leased before
# its time. Bounded, since a run fired ahead holds its worker's slot until then: 10 s lets a cohort of
# 100,000 be fired before its second (with 5 s, half of them were fired after it, leased p99 13 s late).
BURST_MS_PER_ENTRY = 0.25
BURST_AHEAD_MAX_MS = 10_000


class Arming:
    def __init__(self, timer: SystemTimer, clock: Clock, horizon_ms: int, ahead_ms: int) -> None:
        self._timer = timer
        self._clock = clock
        self.horizon_ms = horizon_ms
        self.ahead_ms = ahead_ms
        # A burst's extra, within half the horizon: the preloader tops the wheel up every half horizon, so an
        # entry is armed at least that long before its time and never expires before it was armed.
        self._burst_max_ms = max(0, min(BURST_AHEAD_MAX_MS, horizon_ms // 2 - ahead_ms)) if ahead_ms else 0
        self.ahead_max_ms = ahead_ms + self._burst_max_ms  # the furthest an entry fires ahead
        self._armed: dict[str, tuple[int, TimerTask]] = {}
        self._cohorts: Counter[int] = Counter()  # armed entries per due second
        self.due: asyncio.Queue[tuple[str, int]] = asyncio.Queue()  # (job id, due ms) whose timer expired

    @property
    def armed(self) -> int:
        return len(self._armed)

    def consider(self, job_id: str, due_ms: int) -> None:
        """Arm (or move) the timer of a schedule entry if it falls within the horizon (else the
        preloader's next top-up arms it); a negative time means the job has no next firing."""
        self._arm(job_id, due_ms, self.ahead_ms)

    def at_time(self, job_id: str, due_ms: int) -> None:
        """Arm an entry to expire at its time, not ahead of it (nor with its cohort)."""
        self._arm(job_id, due_ms, 0)

    def _arm(self, job_id: str, due_ms: int, ahead_ms: int) -> None:
        if due_ms < 0:
            return
        current = self._armed.get(job_id)
        if current is not None:
            if current[0] == due_ms:
                return
            self.forget(job_id)
        if due_ms > int(self._clock.now() * 1000) + self.horizon_ms:
            return

        def expire() -> None:
            if self._armed.get(job_id, (None,))[0] == due_ms:
                self._disarmed(job_id)
            self.due.put_nowait((job_id, due_ms))

        second = due_ms // 1000
        if ahead_ms:
            ahead_ms += min(int(self._cohorts[second] * BURST_MS_PER_ENTRY), self._burst_max_ms)
        self._cohorts[second] += 1
        self._armed[job_id] = (due_ms, self._timer.schedule_at_wall((due_ms - ahead_ms) / 1000.0, expire))

    def forget(self, job_id: str) -> None:
        if job_id in self._armed:
            self._disarmed(job_id)[1].cancel()

    def _disarmed(self, job_id: str) -> tuple[int, TimerTask]:
        due_ms, task = self._armed.pop(job_id)
        second = due_ms // 1000
        self._cohorts[second] -= 1
        if not self._cohorts[second]:
            del self._cohorts[second]
        return due_ms, task

    def clear(self) -> None:
        for _, task in self._armed.values():
            task.cancel()
        self._armed.clear()
        self._cohorts.clear()
