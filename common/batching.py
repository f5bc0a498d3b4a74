"""The vocabulary of batching: items, a processor's outcomes, limits, backoff and counters.

Apart from the engine (:mod:`sparkyard.batcher`) so a processor — the master's report sink, the worker's
report sender — and the tests can speak of batches without the engine's machinery.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar, Union

T = TypeVar("T")
ItemId = Hashable

# Items per processor call: one Redis pipeline of 500 small writes takes a few ms, so ten calls carry 5,000/s.
DEFAULT_MAX_BATCH_SIZE = 500
# Longest wait for company: noise next to a Spark task (seconds), yet it folds a busy worker's results together.
DEFAULT_MAX_BATCH_DELAY_S = 0.02
# Queued items before a submit is refused: 10 s at 5,000/s, a leader failover (3 s lease) with room to spare.
DEFAULT_MAX_BUFFER = 50_000
# Reprocess-queue bound in batches per in-flight slot: failed items leave first, so more only piles up in a storm.
REPROCESS_BATCHES = 4
# Concurrent processor calls: one keeps per-id order trivial and suffices when a call is one pipeline.
DEFAULT_MAX_IN_FLIGHT = 1
# How long close(drain=True) may flush: well inside a 15 s task lease, so a stopping worker's results still count.
DEFAULT_CLOSE_TIMEOUT_S = 10.0
# First backoff after congestion or a timeout: the other side is overloaded, give it room.
DEFAULT_CONGESTION_BASE_S = 0.5
# First backoff after a transient error (connection reset, failover): retrying soon usually works.
DEFAULT_TRANSIENT_BASE_S = 0.1
# Backoff ceiling: results still arrive within a task lease once an outage ends.
DEFAULT_MAX_BACKOFF_S = 5.0
# Backoff growth per consecutive failure.
DEFAULT_BACKOFF_MULTIPLIER = 2.0
# Relative jitter, delay x [1 - j, 1 + j]: de-synchronises workers retrying against one master, and with a
# multiplier of 2 successive delays still strictly grow (2 x 0.8 > 1.2).
DEFAULT_JITTER = 0.2
_MAX_EXPONENT = 64  # caps multiplier ** n so hours of failures cannot overflow a float


class Outcome(str, Enum):
    """What a processor reports for a batch (or for one item of it)."""

    SUCCESS = "success"
    CONGESTION = "congestion"
    TRANSIENT_ERROR = "transient_error"
    PERMANENT_ERROR = "permanent_error"


@dataclass(slots=True, eq=False)
class Item(Generic[T]):
    """One queued payload. ``first_submit`` and ``expires_at`` are on the clock's monotonic scale."""

    id: ItemId
    payload: T
    first_submit: float
    expires_at: float
    attempts: int = 0


BatchResult = Union[Outcome, Mapping[ItemId, Outcome]]
"""An :class:`Outcome` for the whole batch, or per-item outcomes; ids absent from the mapping succeeded."""
Processor = Callable[[list[Item[T]]], Awaitable[BatchResult]]


@dataclass(frozen=True)
class BackoffPolicy:
    """Exponential backoff with bounded jitter; congestion and transient errors start from their own base."""

    congestion_base_s: float = DEFAULT_CONGESTION_BASE_S
    transient_base_s: float = DEFAULT_TRANSIENT_BASE_S
    max_s: float = DEFAULT_MAX_BACKOFF_S
    multiplier: float = DEFAULT_BACKOFF_MULTIPLIER
    jitter: float = DEFAULT_JITTER

    def __post_init__(self) -> None:
        if self.congestion_base_s <= 0 or self.transient_base_s <= 0:
            raise ValueError("backoff bases must be > 0")
        if self.max_s < max(self.congestion_base_s, self.transient_base_s):
            raise ValueError("backoff max_s must be >= both bases")
        if self.multiplier < 1:
            raise ValueError("backoff multiplier must be >= 1")
        if not 0 <= self.jitter < 1:
            raise ValueError("backoff jitter must be in [0, 1)")

    def delay(self, outcome: Outcome, failures: int, rng: random.Random) -> float:
        """Delay after the ``failures``-th consecutive failure, the last one being ``outcome``."""
        base = self.congestion_base_s if outcome is Outcome.CONGESTION else self.transient_base_s
        raw = min(self.max_s, base * self.multiplier ** min(max(failures - 1, 0), _MAX_EXPONENT))
        if self.jitter:
            raw *= 1.0 + rng.uniform(-self.jitter, self.jitter)
        return min(self.max_s, raw)


@dataclass(slots=True)
class BatcherStats:
    """Counters, in items unless noted. ``overflowed`` counts refused submits and evicted items alike."""

    accepted: int = 0
    deduped: int = 0
    expired: int = 0
    overflowed: int = 0
    processed: int = 0
    permanent_failures: int = 0
    transient_retries: int = 0
    congestion_retries: int = 0
    abandoned: int = 0
    batches: int = 0
