"""How many tasks a worker asks to have queued beyond its slots (prefetch), by Little's law.

When a slot frees, its next task must already be on the worker, or the slot idles for a whole refill
round trip: result → master → claim in Redis → task back over the stream. To keep every slot busy the
worker needs ``throughput × refill time`` tasks waiting, and its throughput is ``slots ÷ task time``, so

    prefetch = HEADROOM × slots × refill time ÷ task time     (rounded, at most ``maximum``)

Little's law gives the mean; refill times under load vary by several times from one round to the next, so
a queue sized for the mean runs dry about half the time: HEADROOM covers that (and bigger batches cost the
master and Redis less per task).

Both times are measured here (exponentially weighted): the task time from attempts that ended, the refill
time from a results message leaving to the first batch the master built after receiving it (each batch
names the last results message the master had seen: ``TaskBatch.reports_seq``). Short
tasks (a 1 ms task against a 5 ms refill) get tens of tasks queued; tasks longer than about two refill
times get none — for them a round trip per task costs little, and a queued task would only wait behind
them. A slot whose attempt has run far longer than the usual task is not counted (a queued task would wait
behind it); what is already queued behind such a slot is handed back by the slots (see
worker/slots.py, HANDBACK_AFTER_S).
"""

from __future__ import annotations

from typing import Iterable

# Weight of a new sample in the moving averages: ~the last ten samples count.
ALPHA = 0.2
# Refill time assumed until one is measured (a master on the same network, Redis a millisecond away).
DEFAULT_REFILL_S = 0.005
# A refill sample longer than this is not a round trip but the master having had nothing to send (and
# queues sized from it cover at most HEADROOM × this of work, well under the slots' hand-back delay).
MAX_REFILL_SAMPLE_S = 0.1
# Results messages remembered while no batch answers them.
MAX_AWAITING = 64
# An attempt running longer than max(STALLED_MIN_S, STALLED_FACTOR × task time) holds its slot for a while:
# prefetch is sized for the other slots only.
STALLED_MIN_S = 0.5
STALLED_FACTOR = 10.0
# How many mean refill times the queue covers.
HEADROOM = 4.0
# Task times below this are treated as this (no division by ~0 for tasks that do nothing).
MIN_TASK_S = 0.0001


class Prefetch:
    def __init__(self, maximum: int) -> None:
        self.maximum = maximum
        self.task_s: float | None = None  # nothing ended yet: no prefetch until the first attempt tells
        self.refill_s = DEFAULT_REFILL_S
        self._seq = 0
        self._sent: dict[int, float] = {}  # results messages awaiting their refill: seq → monotonic time sent
        self._refill_asked = False  # results were sent early for a refill that has not arrived yet

    def ended(self, duration_s: float) -> None:
        """An attempt ran ``duration_s`` (from its start on a slot to its end)."""
        sample = max(MIN_TASK_S, duration_s)
        self.task_s = sample if self.task_s is None else self.task_s + ALPHA * (sample - self.task_s)

    def next_seq(self, now: float, has_results: bool) -> int:
        """The number of the Reports message about to leave (its results free slots if it has any)."""
        self._seq += 1
        if has_results:
            self._sent[self._seq] = now
            if len(self._sent) > MAX_AWAITING:  # the master sends nothing (no work): forget the oldest
                del self._sent[min(self._sent)]
        return self._seq

    def batch_arrived(self, now: float, reports_seq: int) -> None:
        """A batch built after the master had seen Reports message ``reports_seq``."""
        self._refill_asked = False
        sent_at = self._sent.pop(reports_seq, None)
        for seq in [s for s in self._sent if s < reports_seq]:
            del self._sent[seq]
        if sent_at is not None and now - sent_at <= MAX_REFILL_SAMPLE_S:
            self.refill_s += ALPHA * (now - sent_at - self.refill_s)

    def running_low(self, queued: int, slots: int) -> bool:
        """Whether results should leave now: nothing is queued (the slot that just freed has no task, and the
        master sends it one only on hearing of it: with no prefetch, or tasks too long for any, every result
        leaves at once), or the queue holds no more than the slots run during one refill round trip, so the
        master (which frees capacity only on results) must hear of them for the next tasks to arrive before it
        runs dry — once per refill: until a batch arrives, more results would only add messages."""
        if queued == 0:
            return True
        if self._refill_asked or self.task_s is None or queued * self.task_s > slots * self.refill_s:
            return False
        self._refill_asked = True
        return True

    def want(self, slots: int, running_for: Iterable[float]) -> int:
        """Tasks to have queued now, given the ready slots and how long each running attempt has run."""
        if self.maximum <= 0 or self.task_s is None or slots <= 0:
            return 0
        stalled_after = max(STALLED_MIN_S, STALLED_FACTOR * self.task_s)
        flowing = slots - sum(1 for elapsed in running_for if elapsed > stalled_after)
        if flowing <= 0:
            return 0
        return min(self.maximum, int(HEADROOM * flowing * self.refill_s / self.task_s + 0.5))
