"""Throughput: N no-op tasks through 2 session-runner workers, submit → SUCCEEDED.

    .venv/bin/python tests/bench/bench_throughput.py [--tasks 10000] [--slots 2] [--mode jobs|split]

A fresh redis-server (AOF on, fsync every second, as the embedded one), a master and two workers (session
runner) on this machine. ``--mode jobs`` submits N one-task jobs with bulk SubmitJobs calls of 1,000;
``--mode split`` submits one job whose run is split into N tasks. The client keeps two bulk calls in flight. The entrypoint returns at once without
touching Spark, so what is measured is Sparkyard's own cost per task: submit, fire, queue, claim, gRPC
to the worker, run a thread, report, complete.

Reported: tasks/s from the first submit call to the last attempt's finish, dispatch latency (fired →
leased) p50/p99, end-to-end latency (submit → finished on the worker) p50/p99, and CPU seconds used by the
master, Redis, the two workers and this client process (bulk submits and the poll for the end) during the run
(from /proc). The last column, "speed ms", times a fixed pure-Python loop before and after the run (median
of 5 each): the machine is shared and its speed drifts, and this says how fast it was during the run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis, wait_for  # noqa: E402
from sparkyard.client import build_spec, first_run_id  # noqa: E402
from sparkyard.keys import Keys  # noqa: E402
from sparkyard.master.scripts import SCRIPT_NAMES, render  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"
BULK = 1000
POLL_WINDOW = 200
SLOWLOG_LEN = 1_000_000  # enough to hold every command of a --redis-stats run (scripts' included)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 10 ms


def speed_ms() -> float:
    """Milliseconds for a fixed pure-Python loop (median of 5): a reading of how fast the machine is now."""
    times = []
    for _ in range(5):
        start = time.perf_counter()
        total = 0
        for i in range(1_500_000):
            total += i * i % 7
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def script_times(r: Any) -> list[tuple[str, int, float]]:
    """Per script: calls and total µs inside Redis, from a SLOWLOG that logged every command."""
    names = {hashlib.sha1(render(n, Keys()).encode()).hexdigest(): n for n in SCRIPT_NAMES}
    totals: dict[str, list[float]] = {}
    for entry in r.slowlog_get(SLOWLOG_LEN):
        command = entry["command"].decode(errors="replace").split()
        name = names.get(command[1], command[1][:8]) if command[0].upper() == "EVALSHA" else command[0].upper()
        total = totals.setdefault(name, [0, 0.0])
        total[0] += 1
        total[1] += entry["duration"]
    return sorted(((n, int(c), us) for n, (c, us) in totals.items()), key=lambda t: -t[2])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=2, help="slots per worker (default: the worker default)")
    parser.add_argument("--mode", choices=["jobs", "split"], default="jobs")
    parser.add_argument("--profile", default="", help="directory for cProfile stats of master and workers")
    parser.add_argument("--redis-stats", action="store_true", help="print Redis' busiest commands")
    args = parser.parse_args()
    speed_before = speed_ms()
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis")
        cluster = Cluster(redis.url, Path(tmp) / "cluster", profile_dir=args.profile, driver_conf="")
        try:
            cluster.start_master("--log-level", "WARNING")
            for name in ("w1", "w2"):
                cluster.start_worker(name, slots=args.slots, runner="session", extra=("--log-level", "WARNING"))
            cluster.wait_workers()
            client = cluster.client()
            for _ in range(3):  # warm-up: the sessions' first tasks
                client.wait(first_run_id(client.submit(NOOP)), timeout=120)
            pids = {"master": cluster.master.pid, "redis": redis.process.pid, "client": os.getpid(),  # type: ignore[union-attr]
                    **{n: p.pid for n, p in cluster.workers.items()}}
            r = redis.client()
            if args.redis_stats:
                r.config_set("slowlog-log-slower-than", 0)
                r.config_set("slowlog-max-len", SLOWLOG_LEN)
                r.slowlog_reset()
                r.config_resetstat()
            cpu0 = {n: cpu_s(p) for n, p in pids.items()}
            t0 = time.time()
            if args.mode == "jobs":
                # Two bulk calls in flight: the client builds the next 1,000 specs while the master
                # stores the previous ones.
                spec = build_spec(NOOP)  # 10,000 identical jobs: one spec, submitted as many jobs

                def bulk(count: int) -> list[str]:
                    return [first_run_id(j) for j in client.submit_many([spec] * count)]

                with ThreadPoolExecutor(2) as pool:
                    sizes = [min(BULK, args.tasks - start) for start in range(0, args.tasks, BULK)]
                    run_ids = [run for chunk in pool.map(bulk, sizes) for run in chunk]
            else:
                job = client.submit(NOOP, parallelism=args.tasks)
                run_ids = [first_run_id(job)]
            submitted = time.time()
            pending = [f"sy:run:{run}" for run in run_ids]

            def all_done() -> bool:
                # Runs finish roughly in submit order: only the oldest runs not seen SUCCEEDED yet are read,
                # a window at a time, so the poll costs Redis little (it shares the cores it measures).
                while pending:
                    pipe = r.pipeline(transaction=False)
                    for key in pending[:POLL_WINDOW]:
                        pipe.hget(key, "state")
                    states = pipe.execute()
                    left = [k for k, s in zip(pending, states) if s != "SUCCEEDED"]
                    pending[:len(states)] = left
                    if left:
                        return False
                return True

            wait_for(all_done, 600, f"{args.tasks} tasks to succeed", interval=0.05)
            done = time.time()
            cpu1 = {n: cpu_s(p) for n, p in pids.items()}
            if args.redis_stats:
                r.config_set("slowlog-log-slower-than", 10_000)
                for name, calls, us in script_times(r)[:10]:
                    print(f"  {name}: {calls} calls, {us / 1e6:.3f} s, {us / args.tasks:.1f} us per task")
                stats = r.info("commandstats")
                for name, st in sorted(stats.items(), key=lambda kv: -kv[1]["usec"])[:10]:
                    print(f"  {name}: calls {st['calls']}, {st['usec'] / 1e6:.2f} s, {st['usec_per_call']:.0f} us/call")
            runs = [client.run(run) for run in run_ids[:: max(1, len(run_ids) // 2000)]] if args.mode == "jobs" \
                else [client.run(run_ids[0])]
        finally:
            cluster.stop()
            redis.stop()
    speed_after = speed_ms()
    attempts = [(run, t.attempts[-1]) for run in runs for t in run.tasks]
    finish_ms = max(a.finished_at.ToMilliseconds() for _, a in attempts)
    dispatch = [a.leased_at.ToMilliseconds() - run.fired_at.ToMilliseconds() for run, a in attempts]
    e2e = [a.finished_at.ToMilliseconds() - run.scheduled_at.ToMilliseconds() for run, a in attempts]
    wall = done - t0
    print("| mode | tasks | slots | submit s | tasks/s (submit → last finished) | dispatch p50 / p99 ms | "
          "submit → finished p50 / p99 ms | CPU s master / redis / workers / client | speed ms before / after |")
    print("|---|---|---|---|---|---|---|---|---|")
    workers_cpu = sum(cpu1[n] - cpu0[n] for n in ("w1", "w2"))
    print(f"| {args.mode} | {args.tasks:,} | 2 × {args.slots} | {submitted - t0:.2f} | "
          f"{args.tasks / max(0.001, finish_ms / 1000 - t0):,.0f} (seen done after {wall:.2f} s) | "
          f"{statistics.median(dispatch):.0f} / {pct(dispatch, 0.99):.0f} | "
          f"{statistics.median(e2e):.0f} / {pct(e2e, 0.99):.0f} | "
          f"{cpu1['master'] - cpu0['master']:.1f} / {cpu1['redis'] - cpu0['redis']:.1f} / {workers_cpu:.1f} / {cpu1['client'] - cpu0['client']:.1f} | "
          f"{speed_before:.0f} / {speed_after:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
