"""Throughput: N no-op tasks through 2 session-runner workers, submit → SUCCEEDED, against Celery.

    deploy/bench.sh [--tasks 2000] [--slots 2] [--mode split|jobs] [--peer celery|none] [--repeat K]

(deploy/bench.sh installs the benchmark's extra, Celery, and runs this file with the project's Python.)

A fresh redis-server (AOF on, fsync every second, as the embedded one), a master and two workers (session
runner) on this machine. ``--mode jobs`` submits N one-task jobs with bulk SubmitJobs calls of 1,000;
``--mode split`` submits one job whose run is split into N tasks. The client keeps two bulk calls in flight. The entrypoint returns at once without
touching Spark, so what is measured is Sparkyard's own cost per task: submit, fire, queue, claim, gRPC
to the worker, run a thread, report, complete.

The peer, run by this benchmark on the same redis-server right after: Celery (tests/bench/celery_noop.py)
with the same shape — 2 worker processes × concurrency 2 (prefork), Redis broker and result backend,
Celery's defaults otherwise — and the same N no-op tasks sent as one ``group`` (what a Celery user sends
for a batch); its tasks/s counts from the send to the last result read back. The ratio of the two,
measured minutes apart on the same machine, is the figure to compare.

Reported: tasks/s from the first submit call to the last attempt's finish, dispatch latency (fired →
leased) p50/p99, end-to-end latency (submit → finished on the worker) p50/p99, and CPU seconds used by the
master, Redis, the two workers (with their drivers and JVMs) and this client process (bulk submits and the poll for the end) during the run
(from /proc). The last column, "speed ms", times a fixed pure-Python loop before and after the run (median
of 5 each): the machine is shared and its speed drifts, and this says how fast it was during the run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import statistics
import subprocess
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


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its live descendants (a worker's drivers and their JVMs)."""
    import psutil

    total = cpu_s(pid)
    for child in psutil.Process(pid).children(recursive=True):
        try:
            total += cpu_s(child.pid)
        except OSError:
            pass
    return total


def celery_peer(redis_port: int, tasks: int, workdir: Path) -> tuple[float, float]:
    """(tasks/s, CPU s of the Celery workers) for N no-op tasks through 2 Celery workers × concurrency 2."""
    env = {**os.environ, "BENCH_CELERY_BROKER": f"redis://127.0.0.1:{redis_port}/1",
           "BENCH_CELERY_BACKEND": f"redis://127.0.0.1:{redis_port}/2",
           "PYTHONPATH": str(Path(__file__).parent)}
    os.environ.update({k: env[k] for k in ("BENCH_CELERY_BROKER", "BENCH_CELERY_BACKEND")})
    sys.path.insert(0, str(Path(__file__).parent))
    from celery import group

    import celery_noop

    procs = [subprocess.Popen([sys.executable, "-m", "celery", "-A", "celery_noop", "worker", "-c", "2", "-P", "prefork",
                               "-n", f"peer{i}@%h", "-l", "WARNING", "--without-gossip", "--without-mingle"],
                              env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for i in (1, 2)]
    try:
        wait_for(lambda: len(celery_noop.app.control.ping(timeout=0.5) or []) >= 2, 120, "2 Celery workers")
        celery_noop.noop.delay(-1).get(timeout=60)  # warm-up: the pools' first task
        cpu0 = sum(tree_cpu_s(p.pid) for p in procs)
        t0 = time.time()
        result = group(celery_noop.noop.s(i) for i in range(tasks)).apply_async()
        values = result.get(timeout=600)
        elapsed = time.time() - t0
        assert len(values) == tasks
        return tasks / elapsed, sum(tree_cpu_s(p.pid) for p in procs) - cpu0
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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


def measure(args: argparse.Namespace, cluster: Cluster, redis: Any) -> dict[str, Any]:
    """One run of N no-op tasks through the cluster; the figures of one table row."""
    client = cluster.client()
    pids = {"master": cluster.master.pid, "redis": redis.process.pid, "client": os.getpid(),  # type: ignore[union-attr]
            **{n: p.pid for n, p in cluster.workers.items()}}
    r = redis.client()
    if args.redis_stats:
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", SLOWLOG_LEN)
        r.slowlog_reset()
        r.config_resetstat()

    def cpu() -> dict[str, float]:
        return {n: tree_cpu_s(p) if n in cluster.workers else cpu_s(p) for n, p in pids.items()}

    cpu0 = cpu()
    t0 = time.time()
    if args.mode == "jobs":
        # Two bulk calls in flight: the client builds the next 1,000 specs while the master stores the
        # previous ones.
        spec = build_spec(NOOP)  # N identical jobs: one spec, submitted as many jobs

        def bulk(count: int) -> list[str]:
            return [first_run_id(j) for j in client.submit_many([spec] * count)]

        with ThreadPoolExecutor(2) as pool:
            sizes = [min(BULK, args.tasks - start) for start in range(0, args.tasks, BULK)]
            run_ids = [run for chunk in pool.map(bulk, sizes) for run in chunk]
    else:
        job = client.submit(NOOP, parallelism=args.tasks)
        run_ids = [first_run_id(job)]
    submitted = time.time()
    pending = [f"{cluster.namespace}:run:{run}" for run in run_ids]

    def all_done() -> bool:
        # Runs finish roughly in submit order: only the oldest runs not seen SUCCEEDED yet are read, a
        # window at a time, so the poll costs Redis little (it shares the cores it measures).
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
    cpu1 = cpu()
    if args.redis_stats:
        r.config_set("slowlog-log-slower-than", 10_000)
        for name, calls, us in script_times(r)[:10]:
            print(f"  {name}: {calls} calls, {us / 1e6:.3f} s, {us / args.tasks:.1f} us per task")
        stats = r.info("commandstats")
        for name, st in sorted(stats.items(), key=lambda kv: -kv[1]["usec"])[:10]:
            print(f"  {name}: calls {st['calls']}, {st['usec'] / 1e6:.2f} s, {st['usec_per_call']:.0f} us/call")
    runs = [client.run(run) for run in run_ids[:: max(1, len(run_ids) // 2000)]] if args.mode == "jobs" \
        else [client.run(run_ids[0])]
    attempts = [(run, t.attempts[-1]) for run in runs for t in run.tasks]
    finish_ms = max(a.finished_at.ToMilliseconds() for _, a in attempts)
    dispatch = [a.leased_at.ToMilliseconds() - run.fired_at.ToMilliseconds() for run, a in attempts]
    e2e = [a.finished_at.ToMilliseconds() - run.scheduled_at.ToMilliseconds() for run, a in attempts]
    used = {n: cpu1[n] - cpu0[n] for n in pids}
    return {
        "submit_s": submitted - t0, "tasks_s": args.tasks / max(0.001, finish_ms / 1000 - t0), "seen_s": done - t0,
        "dispatch": (statistics.median(dispatch), pct(dispatch, 0.99)),
        "e2e": (statistics.median(e2e), pct(e2e, 0.99)),
        "cpu": (used["master"], used["redis"], used["w1"] + used["w2"], used["client"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--slots", type=int, default=2, help="slots per worker (default: the worker default, 2)")
    parser.add_argument("--mode", choices=["jobs", "split"], default="split")
    parser.add_argument("--peer", choices=["celery", "none"], default="celery",
                        help="run Celery with the same shape after each run (default) or not")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (alternating)")
    parser.add_argument("--worker-arg", action="append", default=[],
                        help="extra worker flag, e.g. --worker-arg=--prefetch-max=0 (a tuned configuration)")
    parser.add_argument("--profile", default="", help="directory for cProfile stats of master and workers")
    parser.add_argument("--redis-stats", action="store_true", help="print Redis' busiest commands")
    args = parser.parse_args()
    speed_before = speed_ms()
    rows: list[tuple[dict[str, Any], tuple[float, float] | None]] = []
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis")
        cluster = Cluster(redis.url, Path(tmp) / "cluster", profile_dir=args.profile, driver_conf="")
        try:
            cluster.start_master("--log-level", "WARNING")
            for name in ("w1", "w2"):
                cluster.start_worker(name, slots=args.slots, runner="session",
                                     extra=("--log-level", "WARNING", *args.worker_arg))
            cluster.wait_workers()
            client = cluster.client()
            for _ in range(3):  # warm-up: the drivers' first tasks
                client.wait(first_run_id(client.submit(NOOP)), timeout=120)
            for _ in range(args.repeat):
                ours = measure(args, cluster, redis)
                peer = celery_peer(redis.port, args.tasks, Path(tmp)) if args.peer == "celery" else None
                rows.append((ours, peer))
        finally:
            cluster.stop()
            redis.stop()
    speed_after = speed_ms()
    extra = f" ({' '.join(args.worker_arg)})" if args.worker_arg else ""
    print("| mode | tasks | slots | tasks/s (submit → last finished) | Celery 2 × 2 tasks/s | ratio | "
          "dispatch p50 / p99 ms | submit → finished p50 / p99 ms | CPU s master / redis / workers+drivers / "
          "client | Celery CPU s | speed ms before / after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for ours, peer in rows:
        peer_rate = f"{peer[0]:,.0f}" if peer else "–"
        ratio = f"{ours['tasks_s'] / peer[0]:.1f}×" if peer else "–"
        cpu = " / ".join(f"{c:.1f}" for c in ours["cpu"])
        print(f"| {args.mode} | {args.tasks:,} | 2 × {args.slots}{extra} | {ours['tasks_s']:,.0f} (seen done after "
              f"{ours['seen_s']:.2f} s) | {peer_rate} | {ratio} | {ours['dispatch'][0]:.0f} / {ours['dispatch'][1]:.0f} | "
              f"{ours['e2e'][0]:.0f} / {ours['e2e'][1]:.0f} | {cpu} | {f'{peer[1]:.1f}' if peer else '–'} | "
              f"{speed_before:.0f} / {speed_after:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
