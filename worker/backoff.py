"""How long a worker waits before starting again a process that failed to start: a pool's driver
(worker/runner/pool_health.py) or its Spark Connect server (worker/connect_server.py) — one rule for both, in
the worker package itself, which the runners import (not the other way: the worker's packages import no
cycle)."""

from __future__ import annotations

# The first pause, doubling with every failed start in a row up to the maximum.
RESTART_BACKOFF_S = 1.0
RESTART_BACKOFF_MAX_S = 60.0


def restart_pause(failures: int) -> float:
    """The pause before the next start after ``failures`` (at least 1) failed starts in a row."""
    return min(RESTART_BACKOFF_MAX_S, RESTART_BACKOFF_S * 2 ** (failures - 1))
