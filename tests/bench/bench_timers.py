"""Timer benchmark: Sparkyard's timing wheel against heapq and asyncio's ``call_later``.

Run from the repository root (it is a script, deliberately not collected by pytest)::

    .venv/bin/python tests/bench/bench_timers.py [--sizes 10000,100000,1000000] [--gc default|tuned|off]
    .venv/bin/python tests/bench/bench_timers.py --sweep      # wheel size and tick choices

Every timer's delay is uniform over 0-2 s (the baseline mix of short timeouts). Rates are per CPU second of
this process (``time.process_time``), because the machine is shared and wall-clock rates swing with the
neighbours' load; so are the per-wake-up stall figures of ``--sweep``. Each rate is one pass over N
timers. ``expire/s`` is how fast due timers run once all are due (the loop is blocked past the last
deadline, then drained). Lateness is real time on the running asyncio loop: actual run time minus
deadline, with the N deadlines starting after the adds have finished. Bytes per timer come from
``tracemalloc`` (the handle the caller keeps plus the structure's share).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import heapq
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sparkyard.clock import FakeClock, SystemClock  # noqa: E402
from sparkyard.master.timer import (  # noqa: E402
    DEFAULT_CASCADE_BATCH,
    DEFAULT_TICK_MS,
    DEFAULT_WHEEL_SIZE,
    SystemTimer,
    TimerTask,
)

SPREAD_S = 2.0
TUNED_GC = (100_000, 50, 100)
"""The ``gc.set_threshold`` measured as the ``tuned`` mode: see docs/timer.md."""


def _noop() -> None:
    pass


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50 * 1e3, p99 * 1e3, ordered[-1] * 1e3


def _fresh() -> None:
    """Start each measured pass without garbage left over from the previous one."""
    gc.collect()


class Row:
    def __init__(self, n: int, name: str) -> None:
        self.n = n
        self.name = name
        self.add = self.cancel = self.expire = float("nan")
        self.bytes = float("nan")
        self.lateness: tuple[float, float, float] | None = None

    def render(self) -> str:
        def rate(v: float) -> str:
            return "–" if v != v else f"{v / 1e6:.2f} M"

        late = "–" if self.lateness is None else "{:.2f} / {:.2f} / {:.1f}".format(*self.lateness)
        size = f"{self.n // 1000}k" if self.n < 1_000_000 else f"{self.n // 1_000_000}M"
        nbytes = "–" if self.bytes != self.bytes else f"{self.bytes:.0f}"
        return (
            f"| {size} | {self.name} | {rate(self.add)} | {rate(self.cancel)} | {rate(self.expire)} "
            f"| {nbytes} | {late} |"
        )


# -- heapq: the floor for a priority queue in CPython (no cancel, no loop integration) -----------------


def bench_heapq(delays: list[float]) -> Row:
    row = Row(len(delays), "heapq")
    now = time.monotonic()
    _fresh()
    heap: list[tuple[float, int, Callable[[], None]]] = []
    push = heapq.heappush
    start = time.process_time()
    for seq, delay in enumerate(delays):
        push(heap, (now + delay, seq, _noop))
    row.add = len(delays) / (time.process_time() - start)
    pop = heapq.heappop
    start = time.process_time()
    while heap:
        pop(heap)[2]()
    row.expire = len(delays) / (time.process_time() - start)
    del heap
    row.bytes = _bytes_per_timer(delays, lambda: _heap_fill(delays))
    return row


def _heap_fill(delays: list[float]) -> object:
    now = time.monotonic()
    heap: list[tuple[float, int, Callable[[], None]]] = []
    for seq, delay in enumerate(delays):
        heapq.heappush(heap, (now + delay, seq, _noop))
    return heap


def _bytes_per_timer(delays: list[float], fill: Callable[[], object]) -> float:
    _fresh()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = fill()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / len(delays)


# -- the wheel and asyncio on a running loop ---------------------------------------------------------


async def _drain_after_block(count: int, done: asyncio.Future[None]) -> float:
    """Block the loop past every deadline, then time how long running all of them takes."""
    time.sleep(SPREAD_S + 0.05)
    start = time.process_time()
    await done
    return count / (time.process_time() - start)


def _counting(n: int, done: asyncio.Future[None]) -> Callable[[], None]:
    left = [n]

    def fired() -> None:
        left[0] -= 1
        if left[0] == 0:
            done.set_result(None)

    return fired


async def bench_asyncio(delays: list[float]) -> Row:
    row = Row(len(delays), "asyncio call_later")
    loop = asyncio.get_running_loop()
    n = len(delays)
    _fresh()
    call_later = loop.call_later
    start = time.process_time()
    handles = [call_later(d, _noop) for d in delays]
    row.add = n / (time.process_time() - start)
    start = time.process_time()
    for handle in handles:
        handle.cancel()
    row.cancel = n / (time.process_time() - start)
    del handles
    await asyncio.sleep(0)  # let asyncio drop the cancelled handles before the next pass
    done: asyncio.Future[None] = loop.create_future()
    fired = _counting(n, done)
    for d in delays:
        call_later(d, fired)
    row.expire = await _drain_after_block(n, done)
    row.bytes = _bytes_per_timer(delays, lambda: [call_later(d + 60.0, _noop) for d in delays])
    for handle in loop._scheduled:  # type: ignore[attr-defined]
        handle.cancel()
    await asyncio.sleep(0)
    row.lateness = await _asyncio_lateness(delays, row.add)
    return row


def _lead_s(n: int, add_rate: float) -> float:
    """Deadlines start this far ahead, so no timer is due before all have been added."""
    return 0.3 + 2.0 * n / add_rate


async def _asyncio_lateness(delays: list[float], add_rate: float) -> tuple[float, float, float]:
    loop = asyncio.get_running_loop()
    n = len(delays)
    lateness, deadlines, callbacks, done = _lateness_probes(n)
    base = loop.time() + _lead_s(n, add_rate)
    deadlines[:] = [base + d for d in delays]
    _fresh()
    call_at = loop.call_at
    for dl, cb in zip(deadlines, callbacks):
        call_at(dl, cb)
    await done
    return _percentiles(lateness)


def _lateness_probes(
    n: int,
) -> tuple[list[float], list[float], list[Callable[[], None]], asyncio.Future[None]]:
    """N callbacks recording ``now - deadline``; built before the deadlines are fixed, so their cost
    (and the GC passes their allocation triggers) does not eat into the lead."""
    lateness = [0.0] * n
    deadlines = [0.0] * n
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    left = [n]
    monotonic = time.monotonic

    def make(i: int) -> Callable[[], None]:
        def fired() -> None:
            lateness[i] = monotonic() - deadlines[i]
            left[0] -= 1
            if left[0] == 0:
                done.set_result(None)

        return fired

    return lateness, deadlines, [make(i) for i in range(n)], done


async def bench_wheel(delays: list[float], tick_ms: int, wheel_size: int, lateness: bool = True) -> Row:
    row = Row(len(delays), f"wheel (tick {tick_ms} ms, size {wheel_size})")
    n = len(delays)
    timer = SystemTimer(SystemClock(), tick_ms=tick_ms, wheel_size=wheel_size)
    timer.start()
    _fresh()
    schedule = timer.schedule
    start = time.process_time()
    tasks = [schedule(d, _noop) for d in delays]
    row.add = n / (time.process_time() - start)
    start = time.process_time()
    for task in tasks:
        task.cancel()
    row.cancel = n / (time.process_time() - start)
    del tasks
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    fired = _counting(n, done)
    for d in delays:
        schedule(d, fired)
    row.expire = await _drain_after_block(n, done)
    timer.close()
    row.bytes = _bytes_per_timer(delays, lambda: _wheel_fill(delays, tick_ms, wheel_size))
    if lateness:
        row.lateness = await _wheel_lateness(delays, tick_ms, wheel_size, row.add)
    return row


def _wheel_fill(delays: list[float], tick_ms: int, wheel_size: int) -> object:
    timer = SystemTimer(SystemClock(), tick_ms=tick_ms, wheel_size=wheel_size)
    return timer, [timer.schedule(d + 60.0, _noop) for d in delays]


async def _wheel_lateness(
    delays: list[float], tick_ms: int, wheel_size: int, add_rate: float
) -> tuple[float, float, float]:
    n = len(delays)
    timer = SystemTimer(SystemClock(), tick_ms=tick_ms, wheel_size=wheel_size)
    timer.start()
    lateness, deadlines, callbacks, done = _lateness_probes(n)
    base = time.monotonic() + _lead_s(n, add_rate)
    deadlines[:] = [base + d for d in delays]
    _fresh()
    schedule_at = timer.schedule_at
    for dl, cb in zip(deadlines, callbacks):
        schedule_at(dl, cb)
    await done
    timer.close()
    return _percentiles(lateness)


# -- the sweep: wheel size and tick, with a fake clock stepped one millisecond at a time ---------------


def sweep_wheel_size(
    n: int, spread_s: float, wheel_size: int, cascade_batch: int = DEFAULT_CASCADE_BATCH
) -> str:
    """Add/expire rates and the longest single wake-up (= the worst loop stall) on a FakeClock.

    The clock is stepped one millisecond at a time; every wake-up of the timer is timed on its own
    (a spread cascade runs in several wake-ups within one step).
    """
    rnd = random.Random(7)
    delays = [rnd.random() * spread_s for _ in range(n)]
    clock = FakeClock()
    timer = SystemTimer(clock, wheel_size=wheel_size, cascade_batch=cascade_batch)
    wakes: list[float] = []
    wake = timer._wake

    def timed_wake() -> None:
        start = time.process_time()
        wake()
        wakes.append(time.process_time() - start)

    timer._wake = timed_wake
    timer.start()
    _fresh()
    start = time.process_time()
    for d in delays:
        timer.schedule(d, _noop)
    add = n / (time.process_time() - start)
    start = time.process_time()
    for _ in range(int(spread_s * 1000) + 2):
        clock.advance(0.001)
    total = time.process_time() - start
    assert timer.size == 0
    levels = timer.wheel.levels()
    worst = max(wakes) * 1e3
    p99 = statistics.quantiles(wakes, n=100)[98] * 1e3
    batch = "all at once" if cascade_batch >= n else str(cascade_batch)
    return (
        f"| {n // 1000}k | 0–{spread_s:g} s | {wheel_size} | {batch} | {levels} | {add / 1e6:.2f} M | "
        f"{n / total / 1e6:.2f} M | {p99:.2f} | {worst:.2f} |"
    )


async def sweep_tick(n: int, tick_ms: int) -> str:
    rnd = random.Random(11)
    delays = [rnd.random() * SPREAD_S for _ in range(n)]
    p50, p99, worst = await _wheel_lateness(delays, tick_ms, DEFAULT_WHEEL_SIZE, 1e6)
    return f"| {n // 1000}k | {tick_ms} | {p50:.2f} | {p99:.2f} | {worst:.1f} |"


def object_layout() -> str:
    """One object per timer against Kafka's task + entry pair, with the GC on (the task.py decision)."""

    class Entry:
        __slots__ = ("task", "expiration", "bucket", "next", "prev")

        def __init__(self, task: object, expiration: int) -> None:
            self.task = task
            self.expiration = expiration
            self.bucket = self.next = self.prev = None

    class Task:
        __slots__ = ("deadline", "callback", "entry")

        def __init__(self, deadline: float, callback: Callable[[], None]) -> None:
            self.deadline = deadline
            self.callback = callback
            self.entry: Entry | None = None

    n = 1_000_000
    _fresh()
    start = time.process_time()
    pairs = []
    for i in range(n):
        task = Task(float(i), _noop)
        task.entry = Entry(task, i)
        pairs.append(task)
    two = n / (time.process_time() - start)
    del pairs
    _fresh()
    start = time.process_time()
    ones = [TimerTask(float(i), _noop) for i in range(n)]
    one = n / (time.process_time() - start)
    del ones
    state = "on" if gc.isenabled() else "off"
    return (
        f"allocation of 1M timers, GC {state}: task+entry {two / 1e6:.2f} M/s, "
        f"one object {one / 1e6:.2f} M/s"
    )


async def main_async(args: argparse.Namespace) -> None:
    if args.sweep:
        print(
            "| N | delays | wheel size | cascade batch | levels | add/s | expire/s "
            "| wake p99 ms | worst wake ms |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for n in (100_000, 1_000_000):
            for spread in (2.0, 60.0):
                for size in (64, 2048):
                    print(sweep_wheel_size(n, spread, size, cascade_batch=n), flush=True)
                for size in (16, 64, 256, 1024, 2048, 4096):
                    print(sweep_wheel_size(n, spread, size), flush=True)
        print()
        print("| N | tick ms | lateness p50 ms | p99 ms | max ms |")
        print("|---|---|---|---|---|")
        for n in (10_000, 100_000):
            for tick in (1, 2, 5):
                print(await sweep_tick(n, tick), flush=True)
        print()
        print(object_layout())
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"python {sys.version.split()[0]}, gc mode {args.gc}, thresholds {gc.get_threshold()}")
    print()
    print("| N | structure | add/s | cancel/s | expire/s | bytes/timer | lateness p50 / p99 / max ms |")
    print("|---|---|---|---|---|---|---|")
    for n in sizes:
        rnd = random.Random(n)
        delays = [rnd.random() * SPREAD_S for _ in range(n)]
        print(bench_heapq(delays).render(), flush=True)
        print((await bench_asyncio(delays)).render(), flush=True)
        print((await bench_wheel(delays, args.tick, args.wheel_size)).render(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="10000,100000,1000000")
    parser.add_argument("--gc", choices=("default", "tuned", "off"), default="default")
    parser.add_argument("--tick", type=int, default=DEFAULT_TICK_MS)
    parser.add_argument("--wheel-size", type=int, default=DEFAULT_WHEEL_SIZE)
    parser.add_argument("--sweep", action="store_true", help="compare wheel sizes and ticks instead")
    args = parser.parse_args()
    if args.gc == "tuned":
        gc.set_threshold(*TUNED_GC)
    elif args.gc == "off":
        gc.disable()
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
