"""The batcher: batching triggers, dedupe, expiry, overflow, outcomes and backoff, shutdown.

Every test runs on a FakeClock: time moves only through ``clock.advance``, and ``settle()`` lets the event
loop run the batcher's tasks until nothing is runnable.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Hashable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkyard.batcher import Batcher
from sparkyard.batching import (
    BackoffPolicy,
    BatchResult,
    Item,
    Outcome,
)
from sparkyard.clock import FakeClock

NO_JITTER = BackoffPolicy(congestion_base_s=1.0, transient_base_s=0.1, max_s=8.0, jitter=0.0)


async def settle(rounds: int = 30) -> None:
    """Yield to the event loop enough times for submitted work to run to its next wait."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def advance(clock: FakeClock, seconds: float) -> None:
    clock.advance(seconds)
    await settle()


class Recorder:
    """A processor that records each batch (ids, payloads, time) and answers from a script of results."""

    def __init__(self, clock: FakeClock, *results: BatchResult | BaseException) -> None:
        self.clock = clock
        self.results = list(results)
        self.calls: list[tuple[float, list[tuple[Hashable, Any]]]] = []
        self.items: list[list[Item[Any]]] = []

    async def __call__(self, batch: list[Item[Any]]) -> BatchResult:
        self.calls.append((self.clock.monotonic(), [(item.id, item.payload) for item in batch]))
        self.items.append(list(batch))
        result = self.results.pop(0) if self.results else Outcome.SUCCESS
        if isinstance(result, BaseException):
            raise result
        return result

    @property
    def ids(self) -> list[list[Hashable]]:
        return [[item_id for item_id, _ in batch] for _, batch in self.calls]

    @property
    def times(self) -> list[float]:
        return [at for at, _ in self.calls]


_started: list[Batcher[Any]] = []


def make(clock: FakeClock, processor: Any, **options: Any) -> Batcher[Any]:
    options.setdefault("max_batch_size", 3)
    options.setdefault("max_batch_delay_s", 1.0)
    options.setdefault("backoff", NO_JITTER)
    batcher: Batcher[Any] = Batcher("test", processor, clock=clock, **options)
    batcher.start()
    _started.append(batcher)
    return batcher


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(autouse=True)
async def _close_batchers(clock: FakeClock) -> AsyncIterator[None]:
    yield
    while _started:
        closing = asyncio.ensure_future(_started.pop().close(drain=False, timeout_s=0))
        clock.advance(0)
        await closing


# ------------------------------------------------------------------------------------------- batching


async def test_batch_leaves_as_soon_as_it_reaches_max_size(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    for i in range(4):
        batcher.submit(i, f"p{i}")
    await settle()
    assert recorder.ids == [[0, 1, 2]]
    assert batcher.pending == 1


async def test_batch_leaves_at_max_delay_and_not_before(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    start = clock.monotonic()
    batcher.submit("a", 1)
    await advance(clock, 0.999)
    assert recorder.calls == []
    await advance(clock, 0.001)
    assert recorder.times == [start + 1.0]


async def test_flush_sends_what_is_queued_without_waiting_for_the_delay(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    start = clock.monotonic()
    batcher.submit("a", 1)
    batcher.submit("b", 2)
    batcher.flush()
    await settle()
    assert recorder.ids == [["a", "b"]] and recorder.times == [start]
    # The flush was for what was queued then: a later item waits for the delay again.
    batcher.submit("c", 3)
    await advance(clock, 0.5)
    assert recorder.ids == [["a", "b"]]
    await advance(clock, 0.5)
    assert recorder.ids == [["a", "b"], ["c"]]


async def test_flush_of_an_empty_batcher_does_not_hurry_later_items(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    batcher.flush()
    batcher.submit("a", 1)
    await advance(clock, 0.5)
    assert recorder.calls == []
    await advance(clock, 0.5)
    assert recorder.ids == [["a"]]


async def test_flush_still_honours_backoff(clock: FakeClock) -> None:
    recorder = Recorder(clock, Outcome.CONGESTION)
    batcher = make(clock, recorder)
    batcher.submit("a", 1)
    batcher.flush()
    await settle()
    assert recorder.ids == [["a"]]  # refused: backoff of 1 s (no jitter)
    batcher.submit("b", 2)
    batcher.flush()
    await advance(clock, 0.9)
    assert recorder.ids == [["a"]]
    await advance(clock, 0.1)
    assert recorder.ids == [["a"], ["a", "b"]]


async def test_dedupe_keeps_the_latest_payload_and_the_first_submit_time(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    start = clock.monotonic()
    batcher.submit("a", 1)
    await advance(clock, 0.5)
    batcher.submit("a", 2)
    await advance(clock, 0.5)
    assert recorder.calls == [(start + 1.0, [("a", 2)])]
    assert recorder.items[0][0].first_submit == start
    assert batcher.stats.deduped == 1 and batcher.stats.accepted == 2


async def test_a_hot_id_updated_faster_than_the_delay_does_not_starve(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    start = clock.monotonic()
    for version in range(12):
        batcher.submit("hot", version)
        await advance(clock, 0.25)
    assert recorder.times[:3] == [start + 1.0, start + 2.0, start + 3.0]
    assert recorder.calls[0][1] == [("hot", 3)]


async def test_an_idle_batcher_arms_no_timer(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder)
    await settle()
    assert clock.pending == 0
    batcher.submit("a", 1)
    await settle()
    assert clock.pending == 1
    await advance(clock, 1.0)
    assert clock.pending == 0


# --------------------------------------------------------------------------------------------- expiry


async def test_expired_items_are_dropped_and_counted(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder, item_expiry_s=0.5)
    batcher.submit("short", 1)
    batcher.submit("long", 2, expiry_s=5.0)
    batcher.submit("never", 3, expiry_s=0)
    await advance(clock, 1.0)
    assert recorder.ids == [["long", "never"]]
    assert batcher.stats.expired == 1


async def test_a_batch_of_only_expired_items_calls_nothing(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder, item_expiry_s=0.5)
    batcher.submit("a", 1)
    await advance(clock, 1.0)
    assert recorder.calls == [] and batcher.stats.expired == 1 and batcher.pending == 0


# ------------------------------------------------------------------------------------------- overflow


async def test_a_full_buffer_refuses_submits(clock: FakeClock) -> None:
    batcher = make(clock, Recorder(clock), max_buffer=2, max_batch_size=10)
    assert batcher.submit(1, "a") and batcher.submit(2, "b")
    assert not batcher.submit(3, "c")
    assert batcher.submit(1, "a2"), "an update of a pending id needs no room"
    assert batcher.stats.overflowed == 1 and batcher.pending == 2


async def test_a_full_buffer_makes_room_by_dropping_expired_items_first(clock: FakeClock) -> None:
    batcher = make(clock, Recorder(clock), max_buffer=1, max_batch_size=10, max_batch_delay_s=5.0, item_expiry_s=0.5)
    batcher.submit(1, "a")
    await advance(clock, 0.6)
    assert batcher.submit(2, "b")
    assert batcher.stats.expired == 1 and batcher.stats.overflowed == 0


# ------------------------------------------------------------------------------------------- outcomes


async def test_success_counts_items_as_processed(clock: FakeClock) -> None:
    batcher = make(clock, Recorder(clock, Outcome.SUCCESS))
    for i in range(3):
        batcher.submit(i, i)
    await settle()
    stats = batcher.stats
    assert (stats.processed, stats.batches, batcher.backoff_s) == (3, 1, 0.0)


async def test_congestion_backs_off_exponentially_then_resets_on_success(clock: FakeClock) -> None:
    recorder = Recorder(clock, Outcome.CONGESTION, Outcome.CONGESTION, Outcome.CONGESTION)
    batcher = make(clock, recorder)
    for i in range(3):
        batcher.submit(i, i)
    await settle()
    t0 = recorder.times[0]
    for _ in range(8):
        await advance(clock, 1.0)
    assert recorder.times == [t0, t0 + 1.0, t0 + 3.0, t0 + 7.0]
    assert batcher.stats.congestion_retries == 9 and batcher.stats.processed == 3
    assert batcher.backoff_s == 0.0
    batcher.submit("next", 1)
    await advance(clock, 1.0)
    assert recorder.times[-1] == clock.monotonic(), "after a success only the batch delay applies"


async def test_transient_error_retries_the_items_first_and_they_succeed(clock: FakeClock) -> None:
    recorder = Recorder(clock, Outcome.TRANSIENT_ERROR)
    batcher = make(clock, recorder, max_batch_size=2)
    start = clock.monotonic()
    batcher.submit("a", 1)
    batcher.submit("b", 1)
    await settle()
    batcher.submit("c", 1)
    await advance(clock, 0.1)
    assert recorder.calls[1] == (start + 0.1, [("a", 1), ("b", 1)]), "retries leave first, after the backoff"
    assert [item.attempts for item in recorder.items[1]] == [1, 1]
    await advance(clock, 1.0)
    assert recorder.ids == [["a", "b"], ["a", "b"], ["c"]]
    assert batcher.stats.transient_retries == 2 and batcher.stats.processed == 3


async def test_a_newer_payload_replaces_the_one_waiting_for_retry(clock: FakeClock) -> None:
    recorder = Recorder(clock, Outcome.TRANSIENT_ERROR)
    batcher = make(clock, recorder)
    for i in range(3):
        batcher.submit(i, "old")
    await settle()
    batcher.submit(1, "new")
    await advance(clock, 0.1)
    assert recorder.calls[1][1] == [(0, "old"), (1, "new"), (2, "old")]
    assert batcher.stats.deduped == 1


async def test_permanent_error_drops_the_batch_and_counts_it(clock: FakeClock) -> None:
    recorder = Recorder(clock, Outcome.PERMANENT_ERROR)
    batcher = make(clock, recorder)
    for i in range(3):
        batcher.submit(i, i)
    await advance(clock, 10.0)
    assert len(recorder.calls) == 1
    assert batcher.stats.permanent_failures == 3 and batcher.pending == 0


async def test_per_item_outcomes_retry_only_the_failed_items(clock: FakeClock) -> None:
    recorder = Recorder(clock, {"poison": Outcome.PERMANENT_ERROR, "busy": Outcome.CONGESTION})
    batcher = make(clock, recorder)
    for item_id in ("ok", "poison", "busy"):
        batcher.submit(item_id, 1)
    await settle()
    await advance(clock, 1.0)
    assert recorder.ids == [["ok", "poison", "busy"], ["busy"]]
    stats = batcher.stats
    assert (stats.processed, stats.permanent_failures, stats.congestion_retries) == (2, 1, 1)


async def test_a_processor_exception_counts_as_a_transient_error(clock: FakeClock) -> None:
    recorder = Recorder(clock, ConnectionResetError("reset"))
    batcher = make(clock, recorder)
    for i in range(3):
        batcher.submit(i, i)
    await settle()
    assert batcher.backoff_s == pytest.approx(0.1)
    await advance(clock, 0.1)
    assert len(recorder.calls) == 2
    assert batcher.stats.transient_retries == 3 and batcher.stats.processed == 3


@pytest.mark.parametrize("error", [TimeoutError(), asyncio.TimeoutError()])
async def test_a_processor_timeout_counts_as_congestion(clock: FakeClock, error: BaseException) -> None:
    recorder = Recorder(clock, error)
    batcher = make(clock, recorder)
    for i in range(3):
        batcher.submit(i, i)
    await settle()
    assert batcher.backoff_s == pytest.approx(1.0)
    assert batcher.stats.congestion_retries == 3


async def test_a_processor_returning_garbage_is_retried_not_lost(clock: FakeClock) -> None:
    recorder = Recorder(clock, None)
    batcher = make(clock, recorder)
    for i in range(3):
        batcher.submit(i, i)
    await settle()
    await advance(clock, 0.1)
    assert batcher.stats.transient_retries == 3 and batcher.stats.processed == 3


async def test_reprocess_overflow_drops_the_oldest_retries(clock: FakeClock) -> None:
    recorder = Recorder(clock, Outcome.TRANSIENT_ERROR, Outcome.TRANSIENT_ERROR)
    batcher = make(clock, recorder, max_batch_size=3, max_reprocess=2, max_in_flight=2)
    for i in range(6):
        batcher.submit(i, i)
    await settle()
    assert recorder.ids == [[0, 1, 2], [3, 4, 5]]
    assert batcher.stats.overflowed == 4
    await advance(clock, 0.3)
    assert recorder.ids[2:] == [[4, 5]]


# --------------------------------------------------------------------------------------------- backoff


def test_jitter_stays_within_its_bounds_and_the_ceiling() -> None:
    policy = BackoffPolicy(congestion_base_s=1.0, transient_base_s=0.1, max_s=5.0, jitter=0.2)
    rng = random.Random(7)
    for failures in range(1, 12):
        raw = min(5.0, 0.1 * 2 ** (failures - 1))
        samples = [policy.delay(Outcome.TRANSIENT_ERROR, failures, rng) for _ in range(300)]
        assert all(raw * 0.8 <= s <= min(5.0, raw * 1.2) for s in samples)
        assert len(set(samples)) > 1, "the jitter actually varies"
    assert policy.delay(Outcome.CONGESTION, 1, random.Random(1)) >= 0.8
    assert policy.delay(Outcome.TRANSIENT_ERROR, 10_000, rng) <= 5.0


@pytest.mark.parametrize(
    "options",
    [
        {"congestion_base_s": 0},
        {"transient_base_s": -1},
        {"max_s": 0.05},
        {"multiplier": 0.5},
        {"jitter": 1.0},
    ],
)
def test_an_inconsistent_backoff_policy_is_refused(options: Mapping[str, float]) -> None:
    with pytest.raises(ValueError):
        BackoffPolicy(**options)


# ---------------------------------------------------------------------------------------- concurrency


async def test_max_in_flight_runs_batches_concurrently_but_never_one_id_twice(clock: FakeClock) -> None:
    gate = asyncio.Event()
    seen: list[list[Hashable]] = []

    async def slow(batch: list[Item[Any]]) -> Outcome:
        seen.append([item.id for item in batch])
        await gate.wait()
        return Outcome.SUCCESS

    batcher = make(clock, slow, max_batch_size=2, max_in_flight=2)
    for item_id in ("a", "b", "c", "d"):
        batcher.submit(item_id, 1)
    await settle()
    assert seen == [["a", "b"], ["c", "d"]] and batcher.in_flight == 2
    batcher.submit("a", 2)
    batcher.submit("e", 1)
    await advance(clock, 1.0)
    assert len(seen) == 2, "both slots are busy"
    gate.set()
    await settle()
    assert seen[2:] == [["a", "e"]]


async def test_a_queued_update_waits_while_its_id_is_in_flight(clock: FakeClock) -> None:
    gate = asyncio.Event()
    seen: list[list[tuple[Hashable, Any]]] = []

    async def slow(batch: list[Item[Any]]) -> Outcome:
        seen.append([(item.id, item.payload) for item in batch])
        if len(seen) == 1:
            await gate.wait()
        return Outcome.SUCCESS

    batcher = make(clock, slow, max_batch_size=2, max_in_flight=2)
    batcher.submit("a", 1)
    await advance(clock, 1.0)
    batcher.submit("a", 2)
    await advance(clock, 5.0)
    assert seen == [[("a", 1)]], "the second version is held back, not sent concurrently"
    gate.set()
    await settle()
    assert seen == [[("a", 1)], [("a", 2)]]


# -------------------------------------------------------------------------------------------- closing


async def test_close_with_drain_flushes_pending_items_without_waiting_for_the_delay(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder, max_batch_size=2, max_batch_delay_s=60.0)
    for i in range(5):
        batcher.submit(i, i)
    await settle()
    await batcher.close(drain=True)
    assert recorder.ids == [[0, 1], [2, 3], [4]]
    assert batcher.stats.processed == 5 and batcher.stats.abandoned == 0
    assert not batcher.submit(9, 9)
    assert clock.pending == 0


async def test_close_without_drain_abandons_what_is_queued(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher = make(clock, recorder, max_batch_size=10)
    for i in range(4):
        batcher.submit(i, i)
    await batcher.close(drain=False)
    assert recorder.calls == [] and batcher.stats.abandoned == 4


async def test_close_with_a_failing_processor_gives_up_at_the_deadline_without_spinning(clock: FakeClock) -> None:
    calls = 0

    async def failing(batch: list[Item[Any]]) -> Outcome:
        nonlocal calls
        calls += 1
        raise ConnectionError("master unreachable")

    batcher = make(clock, failing, max_batch_size=10, max_batch_delay_s=60.0)
    for i in range(4):
        batcher.submit(i, i)
    closing = asyncio.create_task(batcher.close(drain=True, timeout_s=5.0))
    await settle()
    for _ in range(60):
        await advance(clock, 0.1)
    assert closing.done()
    await closing
    # Attempts at 0, 0.1, 0.3, 0.7, 1.5, 3.1 (backoff 0.1 doubling); the next would be at 6.3 > 5.
    assert calls == 6
    assert batcher.stats.abandoned == 4 and batcher.pending == 0
    assert clock.pending == 0


async def test_close_cancels_a_hung_batch_at_the_deadline(clock: FakeClock) -> None:
    async def hung(batch: list[Item[Any]]) -> Outcome:
        await asyncio.Event().wait()
        return Outcome.SUCCESS

    batcher = make(clock, hung)
    for i in range(4):
        batcher.submit(i, i)
    closing = asyncio.create_task(batcher.close(drain=True, timeout_s=2.0))
    await settle()
    await advance(clock, 2.0)
    await closing
    assert batcher.stats.abandoned == 4 and batcher.in_flight == 0


@pytest.mark.timeout(5)
async def test_close_waits_for_an_in_flight_batch_without_spinning_on_a_free_slot(clock: FakeClock) -> None:
    gate = asyncio.Event()

    async def slow(batch: list[Item[Any]]) -> Outcome:
        await gate.wait()
        return Outcome.SUCCESS

    batcher = make(clock, slow, max_in_flight=2)
    for i in range(3):
        batcher.submit(i, i)
    await settle()
    closing = asyncio.create_task(batcher.close())
    await settle()
    assert not closing.done() and batcher.in_flight == 1
    gate.set()
    await closing
    assert batcher.stats.processed == 3


async def test_close_before_start_still_drains(clock: FakeClock) -> None:
    recorder = Recorder(clock)
    batcher: Batcher[int] = Batcher("late", recorder, clock=clock, max_batch_delay_s=60.0)
    batcher.submit("a", 1)
    await batcher.close()
    assert recorder.ids == [["a"]]
    with pytest.raises(RuntimeError):
        batcher.start()


@pytest.mark.parametrize(
    "options",
    [{"max_batch_size": 0}, {"max_buffer": 0}, {"max_in_flight": 0}, {"max_batch_delay_s": -1}, {"max_reprocess": 0}],
)
def test_invalid_options_are_refused(clock: FakeClock, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Batcher("bad", Recorder(clock), clock=clock, **options)


# ------------------------------------------------------------------------------------------ accounting

OUTCOMES = st.sampled_from(list(Outcome))
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(0, 7), st.sampled_from([None, 0.0, 0.3, 5.0])),
        st.tuples(st.just("advance"), st.sampled_from([0.0, 0.05, 0.3, 1.0, 2.5]), st.none()),
    ),
    max_size=60,
)
RESULTS = st.lists(
    st.one_of(OUTCOMES, st.dictionaries(st.integers(0, 7), OUTCOMES, max_size=3), st.just(TimeoutError())),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(
    steps=STEPS,
    results=RESULTS,
    in_flight=st.integers(1, 2),
    drain=st.booleans(),
)
def test_every_accepted_item_ends_in_exactly_one_counter(
    steps: list[tuple[str, Any, Any]],
    results: list[BatchResult | BaseException],
    in_flight: int,
    drain: bool,
) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        recorder = Recorder(clock, *results)
        batcher: Batcher[int] = Batcher(
            "prop",
            recorder,
            clock=clock,
            max_batch_size=3,
            max_batch_delay_s=1.0,
            max_buffer=4,
            max_reprocess=3,
            max_in_flight=in_flight,
            backoff=BackoffPolicy(jitter=0.2),
            rng=random.Random(0),
        )
        batcher.start()
        refused = 0
        for kind, value, expiry in steps:
            if kind == "submit":
                refused += not batcher.submit(value, value, expiry)
            else:
                await advance(clock, value)
        closing = asyncio.create_task(batcher.close(drain=drain, timeout_s=30.0))
        await settle()
        for _ in range(40):
            await advance(clock, 1.0)
        assert closing.done()
        await closing
        s = batcher.stats
        ended = s.processed + s.permanent_failures + s.expired + (s.overflowed - refused) + s.abandoned
        assert s.accepted - s.deduped == ended, s
        assert batcher.pending == 0 and batcher.in_flight == 0 and clock.pending == 0
        assert s.batches == len(recorder.calls) <= 60

    asyncio.run(scenario())
