"""Whether a pool's drivers start: what its readiness says, and how long it waits before trying again.

Apart from the pool (worker/runner/session.py), which decides which driver runs which attempt, because this is
what the worker tells the master (readiness and its reason are the slots offered, worker/master_link.py) and
what an attempt waiting for a runner that cannot start is failed with; none of it depends on an attempt.
"""

from __future__ import annotations

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.backoff import restart_pause


class PoolHealth:
    """The failed starts in a row (and the last one's error), whether every driver was ready once, and a
    cluster manager that does not answer (then no driver is started: worker/engine.py). ``name``: the
    runner's; ``drivers``: what its processes are called in a reason."""

    def __init__(self, slots: int, name: str, drivers: str) -> None:
        self.slots = slots
        self._name = name
        self._drivers = drivers
        self.failures = 0
        self.last_error = ""
        self.warm = False  # every driver was ready once (before that the pool is STARTING, after DEGRADED)
        self.engine_problem = ""

    def started(self) -> None:
        """A driver got ready: the failures in a row are over."""
        self.failures, self.last_error = 0, ""

    def failed(self, error: str) -> float:
        """A driver failed to start with ``error``: the pause before the next is tried."""
        self.failures += 1
        self.last_error = error
        return restart_pause(self.failures)

    def engine_back(self) -> None:
        """The cluster manager answers again: a new pool warms as the first did."""
        self.engine_problem = ""
        self.failures, self.last_error, self.warm = 0, "", False

    def readiness(self, started: bool, ready: int) -> tuple[int, str, int]:
        """(pb.Readiness, reason, slots that can take an attempt now) with ``ready`` drivers ready or busy."""
        if not started:
            return pb.READINESS_STARTING, f"{self._name} runner not started", 0
        ready = min(self.slots, ready)
        if ready >= self.slots:
            return pb.READINESS_READY, "", self.slots
        if self.failures:
            return (pb.READINESS_DEGRADED, f"{ready} of {self.slots} {self._drivers} ready; one failed to "
                    f"start ({self.last_error}), retrying", ready)
        if not self.warm:
            return pb.READINESS_STARTING, f"warming {self._drivers}, {ready} of {self.slots} ready", ready
        return (pb.READINESS_DEGRADED, f"{ready} of {self.slots} {self._drivers} ready (replacements warming)",
                ready)
