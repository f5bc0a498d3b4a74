"""Batching with dedupe, bounded buffers and backoff — the hot path for task results and Redis writes.

This is Netflix Eureka's replication batcher (``AcceptorExecutor`` + ``TaskExecutors`` + ``TrafficShaper``)
rebuilt for asyncio, with its known weak spots fixed: no polling (one loop task waits on an event, and an
idle batcher has no timer armed), a hot id cannot starve (a newer payload replaces the old one in place,
keeping its queue position and age), a full batch leaves at once, and shutdown is bounded.

A walk-through of one batch's life is in ``docs/batcher.md``.

Delivery contract: at least once per *latest payload* of an id, unless the item expires, overflows, is
refused as permanent, or is abandoned at close — each of which is counted in :class:`BatcherStats`. With
``max_in_flight > 1`` two versions of one id are never in flight at the same time, so per-id order holds.
Design notes and tuning: ``docs/batcher.md``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import deque
from dataclasses import replace
from collections.abc import Mapping
from typing import Generic, TypeVar

from sparkyard.batching import (DEFAULT_CLOSE_TIMEOUT_S, DEFAULT_MAX_BATCH_DELAY_S, DEFAULT_MAX_BATCH_SIZE,
                                DEFAULT_MAX_BUFFER, DEFAULT_MAX_IN_FLIGHT, REPROCESS_BATCHES, BackoffPolicy,
                                BatcherStats, BatchResult, Item, ItemId, Outcome, Processor)
from sparkyard.clock import Cancellable, Clock

log = logging.getLogger(__name__)

T = TypeVar("T")

class Batcher(Generic[T]):
    """Collects ``(id, payload)`` submits into batches for an async ``processor``; see the module docstring."""

    def __init__(
        self,
        name: str,
        processor: Processor[T],
        *,
        clock: Clock,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        max_batch_delay_s: float = DEFAULT_MAX_BATCH_DELAY_S,
        max_buffer: int = DEFAULT_MAX_BUFFER,
        item_expiry_s: float = 0.0,
        max_reprocess: int | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        backoff: BackoffPolicy | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if max_batch_size < 1 or max_buffer < 1 or max_in_flight < 1:
            raise ValueError("max_batch_size, max_buffer and max_in_flight must be >= 1")
        if max_batch_delay_s < 0 or item_expiry_s < 0:
            raise ValueError("max_batch_delay_s and item_expiry_s must be >= 0")
        if max_reprocess is not None and max_reprocess < 1:
            raise ValueError("max_reprocess must be >= 1")
        self.name = name
        self._processor = processor
        self._clock = clock
        self._max_batch_size = max_batch_size
        self._max_batch_delay_s = max_batch_delay_s
        self._max_buffer = max_buffer
        self._item_expiry_s = item_expiry_s
        self._max_reprocess = max_reprocess or max_batch_size * max_in_flight * REPROCESS_BATCHES
        self._max_in_flight = max_in_flight
        self._backoff = backoff or BackoffPolicy()
        self._rng = rng or random.Random()

        self._accept: deque[Item[T]] = deque()
        self._retry: deque[Item[T]] = deque()
        self._index: dict[ItemId, Item[T]] = {}  # every queued item (either deque), by id
        self._in_flight: set[asyncio.Task[None]] = set()
        self._in_flight_ids: set[ItemId] = set()  # only maintained when max_in_flight > 1
        self._stalled = False  # everything queued is held back behind an in-flight version of its id
        self._wake = asyncio.Event()
        self._failures = 0
        self._backoff_s = 0.0
        self._backoff_until = -math.inf
        self._timer: Cancellable | None = None
        self._timer_at = math.nan
        self._loop_task: asyncio.Task[None] | None = None
        self._deadline: Cancellable | None = None
        self._closing = False
        self._flush = False  # flush() asked: what is queued leaves without waiting for the delay
        self._drain = True
        self._deadline_passed = False
        self._stats = BatcherStats()

    # ------------------------------------------------------------------------------------------ public

    @property
    def stats(self) -> BatcherStats:
        """A snapshot of the counters."""
        return replace(self._stats)

    @property
    def pending(self) -> int:
        """Items queued (accept + reprocess), not counting batches in flight."""
        return len(self._accept) + len(self._retry)

    @property
    def in_flight(self) -> int:
        """Processor calls under way."""
        return len(self._in_flight)

    @property
    def backoff_s(self) -> float:
        """The backoff chosen after the last failure; 0 once a batch went through."""
        return self._backoff_s

    def start(self) -> None:
        """Start the processing loop on the running event loop (idempotent)."""
        if self._closing:
            raise RuntimeError(f"batcher {self.name} is closed")
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._run(), name=f"batcher-{self.name}")

    def submit(self, item_id: ItemId, payload: T, expiry_s: float | None = None) -> bool:
        """Queue ``payload`` under ``item_id``; False if refused (closed, or full: the caller keeps the item).

        A pending item with the same id gets the new payload and expiry but keeps its place and its first
        submit time. ``expiry_s`` overrides ``item_expiry_s`` for this payload (0 = never expires).
        """
        if self._closing:
            return False
        now = self._clock.monotonic()
        seconds = self._item_expiry_s if expiry_s is None else expiry_s
        if seconds < 0:
            raise ValueError(f"expiry_s must be >= 0 (0 = never), got {seconds}")
        expires_at = now + seconds if seconds > 0 else math.inf
        item = self._index.get(item_id)
        if item is not None:
            item.payload = payload
            item.expires_at = expires_at
            self._stats.accepted += 1
            self._stats.deduped += 1
            return True
        if len(self._accept) >= self._max_buffer and not self._make_room(now):
            self._stats.overflowed += 1
            return False
        item = Item(item_id, payload, now, expires_at)
        self._accept.append(item)
        self._index[item_id] = item
        self._stats.accepted += 1
        queued = len(self._accept) + len(self._retry)
        if queued == 1 or queued >= self._max_batch_size:
            self._wake.set()
        return True

    def flush(self) -> None:
        """Let what is queued leave now instead of at the batch delay (backoff still applies).

        For a caller that knows nothing more will come soon — e.g. a worker whose last running attempt
        just ended: waiting the delay would only add latency to a batch that cannot grow.
        """
        if self._accept:
            self._flush = True
            self._wake.set()

    async def close(self, drain: bool = True, timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Stop accepting; with ``drain`` flush what is queued, giving up ``timeout_s`` from now.

        Without ``drain`` queued items are abandoned at once and only batches already in flight may finish
        (until the same deadline). Whatever is left at the deadline is cancelled and counted as abandoned.
        Backoff is honoured while draining, so a processor that keeps failing is called a few times, not
        in a loop.
        """
        if not drain:
            self._drain = False
        if not self._closing:
            self._closing = True
            self._deadline = self._clock.call_later(timeout_s, self._on_deadline)
            if self._loop_task is None:
                self._loop_task = asyncio.get_running_loop().create_task(self._run(), name=f"batcher-{self.name}")
        self._wake.set()
        assert self._loop_task is not None
        await self._loop_task

    # ------------------------------------------------------------------------------------- the loop

    async def _run(self) -> None:
        try:
            while not self._should_stop():
                self._wake.clear()
                now = self._clock.monotonic()
                at = self._dispatch_at(now)
                if at <= now:
                    self._dispatch(now)
                    continue
                if at == math.inf:
                    self._disarm()
                elif at != self._timer_at:
                    self._disarm()
                    self._timer = self._clock.call_later(at - now, self._on_timer)
                    self._timer_at = at
                await self._wake.wait()
        finally:
            await self._shut_down()

    def _should_stop(self) -> bool:
        if self._deadline_passed:
            return True
        queued = self._drain and bool(self._accept or self._retry)
        return self._closing and not self._in_flight and not queued

    def _dispatch_at(self, now: float) -> float:
        """When the next batch may leave: ``<= now`` means now, ``inf`` means only after an event."""
        if self._stalled or len(self._in_flight) >= self._max_in_flight or not self._drain:
            return math.inf
        if not self._accept and not self._retry:
            return math.inf
        if self._retry or self._closing or self._flush or len(self._accept) >= self._max_batch_size:
            ready = now
        else:
            ready = self._accept[0].first_submit + self._max_batch_delay_s
        return max(ready, self._backoff_until)

    def _dispatch(self, now: float) -> None:
        batch = self._take_batch(now)
        if not self._accept:
            self._flush = False
        if not batch:
            return
        self._stats.batches += 1
        task = asyncio.get_running_loop().create_task(self._process(batch))
        self._in_flight.add(task)
        task.add_done_callback(self._on_batch_done)

    def _take_batch(self, now: float) -> list[Item[T]]:
        """Reprocess queue first, then accept queue; expired items are dropped on the way."""
        batch: list[Item[T]] = []
        size = self._max_batch_size
        index = self._index
        guard = self._in_flight_ids if self._max_in_flight > 1 else None
        held = 0
        for queue in (self._retry, self._accept):
            skipped: list[Item[T]] = []
            while queue and len(batch) < size:
                item = queue.popleft()
                if guard is not None and item.id in guard:
                    skipped.append(item)
                    continue
                del index[item.id]
                if item.expires_at <= now:
                    self._stats.expired += 1
                else:
                    batch.append(item)
            if skipped:
                held += len(skipped)
                queue.extendleft(reversed(skipped))
        if guard is not None:
            guard.update(item.id for item in batch)
        self._stalled = held > 0 and not batch
        return batch

    async def _process(self, batch: list[Item[T]]) -> None:
        try:
            try:
                result = await self._processor(batch)
                if not isinstance(result, (Outcome, Mapping)):
                    raise TypeError(f"processor returned {type(result).__name__}, not an Outcome or a mapping")
            except asyncio.CancelledError:
                self._stats.abandoned += len(batch)
                raise
            except TimeoutError:
                log.warning("batcher %s: processor timed out; %d items back off (congestion)", self.name, len(batch))
                result = Outcome.CONGESTION
            except Exception:
                log.warning("batcher %s: processor failed; retrying %d items", self.name, len(batch), exc_info=True)
                result = Outcome.TRANSIENT_ERROR
        finally:
            if self._max_in_flight > 1:
                self._in_flight_ids.difference_update(item.id for item in batch)
        self._settle(batch, result)

    def _settle(self, batch: list[Item[T]], result: BatchResult) -> None:
        """Apply a batch's outcome(s): count, requeue, and steer the backoff."""
        stats = self._stats
        if result is Outcome.SUCCESS:
            stats.processed += len(batch)
            self._register_success()
            return
        outcomes: list[Outcome]
        if isinstance(result, Outcome):
            outcomes = [result] * len(batch)
        else:
            outcomes = [result.get(item.id, Outcome.SUCCESS) for item in batch]
        retry: list[Item[T]] = []
        congestion = False
        permanent = 0
        for item, outcome in zip(batch, outcomes):
            if outcome is Outcome.SUCCESS:
                stats.processed += 1
            elif outcome is Outcome.PERMANENT_ERROR:
                permanent += 1
            elif outcome is Outcome.CONGESTION:
                stats.congestion_retries += 1
                congestion = True
                retry.append(item)
            else:
                stats.transient_retries += 1
                retry.append(item)
        if permanent:
            self._stats.permanent_failures += permanent
            log.warning("batcher %s: dropped %d items after a permanent error", self.name, permanent)
        if retry:
            self._requeue(retry)
            self._register_failure(Outcome.CONGESTION if congestion else Outcome.TRANSIENT_ERROR)
        else:
            self._register_success()

    def _requeue(self, items: list[Item[T]]) -> None:
        """Put failed items at the back of the reprocess queue, unless a newer payload is already queued.

        The reprocess queue is bounded: beyond ``max_reprocess`` its oldest items are dropped (overflowed).
        """
        now = self._clock.monotonic()
        stats = self._stats
        for item in items:
            item.attempts += 1
            if item.id in self._index:
                stats.deduped += 1
            elif item.expires_at <= now:
                stats.expired += 1
            else:
                self._retry.append(item)
                self._index[item.id] = item
        while len(self._retry) > self._max_reprocess:
            dropped = self._retry.popleft()
            del self._index[dropped.id]
            stats.overflowed += 1

    def _register_failure(self, outcome: Outcome) -> None:
        self._failures += 1
        self._backoff_s = self._backoff.delay(outcome, self._failures, self._rng)
        self._backoff_until = max(self._backoff_until, self._clock.monotonic() + self._backoff_s)

    def _register_success(self) -> None:
        self._failures = 0
        self._backoff_s = 0.0
        self._backoff_until = -math.inf

    # ------------------------------------------------------------------------------------- plumbing

    def _purge_expired(self, now: float) -> bool:
        """Drop expired items from the head of the accept queue; True if that made room."""
        accept = self._accept
        while accept and accept[0].expires_at <= now:
            del self._index[accept.popleft().id]
            self._stats.expired += 1
        return len(accept) < self._max_buffer

    def _make_room(self, now: float) -> bool:
        """At a full buffer: drop expired items; True if that made room (else the submit is refused)."""
        return self._purge_expired(now)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = math.nan
        self._wake.set()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = math.nan

    def _on_deadline(self) -> None:
        self._deadline_passed = True
        self._wake.set()

    def _on_batch_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._stalled = False
        self._wake.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("batcher %s: batch bookkeeping failed", self.name, exc_info=task.exception())

    async def _shut_down(self) -> None:
        """Cancel what is still in flight, count what is left as abandoned, release blocked submitters."""
        self._closing = True
        self._disarm()
        if self._deadline is not None:
            self._deadline.cancel()
        tasks = list(self._in_flight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._stats.abandoned += len(self._accept) + len(self._retry)
        self._accept.clear()
        self._retry.clear()
        self._index.clear()
        if self._stats.abandoned:
            log.warning("batcher %s: closed with %d items abandoned", self.name, self._stats.abandoned)
