"""Throughput: N no-op tasks through 2 session-runner workers, submit → SUCCEEDED, against Celery.

    deploy/bench.sh [--tasks 2000] [--slots 2] [--mode split|jobs] [--peer celery|none] [--repeat K]
                    [--inputs N] [--entry bundle|path] [--no-cli] [--no-ceiling] [--ceiling-dir DIR]

(deploy/bench.sh installs the benchmark's extra, Celery, and runs this file with the project's Python.)

A fresh redis-server (AOF on, fsync every second, as the embedded one), a master and two workers (session
runner) on this machine. The default is the shape of issue #23: the entrypoint shipped as the CLI ships
it (``noop.py:main`` of a directory the benchmark writes, uploaded as a bundle that the workers fetch and
extract) and one input file per task (``--inputs``, default N; ``in/*`` of that directory). ``--entry
path`` names a module already on the workers' path instead (tests/jobs/tasks.py:noop, no bundle), ``--inputs
0`` gives no input files: the shape this benchmark measured before 2026-11-27. ``--mode jobs`` submits N
one-task jobs with bulk SubmitJobs calls of 1,000 (two in flight; no inputs); ``--mode split`` submits one
job whose run is split into N tasks. The entrypoint returns at once without touching Spark, so what is
measured is Sparkyard's own cost per task: submit, fire, queue, claim, gRPC to the worker, the driver's
attempt, report, complete.

After each in-process run (and its Celery peer) the same split run goes through the CLI as a user types
it (``sparkyard submit noop.py:main --inputs 'in/*' --parallelism N --wait --json``, tests/bench/
throughput_paths.py), timed from the command's start to its exit; ``sparkyard --help`` is timed for the
CLI's start-up. Last, with the cluster stopped, the runner's own ceiling: two processes each holding a
``SessionRunner`` of the same slots (the workers' own drivers) fed the same N attempts with no master
(tests/bench/throughput_ceiling.py), its drivers' CPU given for their Python and their JVMs apart;
``--ceiling-dir /dev/shm`` puts its attempts' log files on tmpfs (creating a file costs this machine's root
file system up to 1 ms of CPU: docs/benchmarks.md).

The peer, run by this benchmark on the same redis-server right after: Celery (tests/bench/celery_noop.py)
with the same shape — 2 worker processes × concurrency 2 (prefork), Redis broker and result backend,
Celery's defaults otherwise — and the same N no-op tasks sent as one ``group`` (what a Celery user sends
for a batch); its tasks/s counts from the send to the last result read back. The ratio of the two,
measured minutes apart on the same machine, is the figure to compare.

Reported: tasks/s from the first submit call to the last attempt's finish, dispatch latency (fired →
leased) p50/p99, end-to-end latency (submit → finished on the worker) p50/p99, and CPU per task (µs: CPU
seconds of the process over the run ÷ N, from /proc) of the master, Redis, the two worker processes
outside their drivers, the drivers (with their JVMs, whose own share is given in brackets) and this client process (bulk submits and the poll
for the end; for the CLI row, the CLI process). The last column, "speed ms", times a fixed pure-Python loop before and after the run (median
of 5 each): the machine is shared and its speed drifts, and this says how fast it was during the run.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import throughput_paths  # noqa: E402
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


def descendants_cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds of a process's live descendants (a worker's drivers and their JVMs), and of the JVMs among
    them."""
    import psutil

    total = jvms = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            cpu = cpu_s(child.pid)
            total += cpu
            if child.name() == "java":
                jvms += cpu
        except (OSError, psutil.Error):
            pass
    return total, jvms


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its live descendants."""
    return cpu_s(pid) + descendants_cpu_s(pid)[0]


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


class Shape:
    """What one run submits: the entrypoint and options, built once (the bundle is uploaded once)."""

    def __init__(self, args: argparse.Namespace, app: Path) -> None:
        self.app = app
        self.entry = "noop.py:main" if args.entry == "bundle" else NOOP
        self.options: dict[str, Any] = {"base_dir": str(app)}
        if args.inputs:
            self.options["input_globs"] = ["in/*"]


def measure(args: argparse.Namespace, cluster: Cluster, redis: Any, shape: Shape) -> dict[str, Any]:
    """One run of N no-op tasks through the cluster; the figures of one table row."""
    client = cluster.client()
    r = redis.client()
    if args.redis_stats:
        r.config_set("slowlog-log-slower-than", 0)
        r.config_set("slowlog-max-len", SLOWLOG_LEN)
        r.slowlog_reset()
        r.config_resetstat()
    cpu0 = cluster_cpu(cluster, redis)
    t0 = time.time()
    if args.mode == "jobs":
        # Two bulk calls in flight: the client builds the next 1,000 specs while the master stores the
        # previous ones.
        spec = build_spec(shape.entry, base_dir=str(shape.app))  # N identical jobs: one spec, many jobs

        def bulk(count: int) -> list[str]:
            return [first_run_id(j) for j in client.submit_many([spec] * count)]

        with ThreadPoolExecutor(2) as pool:
            sizes = [min(BULK, args.tasks - start) for start in range(0, args.tasks, BULK)]
            run_ids = [run for chunk in pool.map(bulk, sizes) for run in chunk]
    else:
        job = client.submit(shape.entry, parallelism=args.tasks, **shape.options)
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
    cpu1 = cluster_cpu(cluster, redis)
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
    return {
        "submit_s": submitted - t0, "tasks_s": args.tasks / max(0.001, finish_ms / 1000 - t0), "seen_s": done - t0,
        "dispatch": (statistics.median(dispatch), pct(dispatch, 0.99)),
        "e2e": (statistics.median(e2e), pct(e2e, 0.99)),
        "cpu_us": per_task_us(cpu0, cpu1, args.tasks), "job_id": runs[0].job_id,
    }


def cluster_cpu(cluster: Cluster, redis: Any) -> dict[str, float]:
    """CPU seconds so far: master, Redis, this process, the worker processes and their drivers."""
    workers = [p.pid for p in cluster.workers.values()]
    drivers = [descendants_cpu_s(p) for p in workers]
    return {"master": cpu_s(cluster.master.pid), "redis": cpu_s(redis.process.pid),
            "client": cpu_s(os.getpid()), "workers": sum(cpu_s(p) for p in workers),
            "drivers": sum(d[0] for d in drivers), "driver_jvms": sum(d[1] for d in drivers)}


def per_task_us(cpu0: dict[str, float], cpu1: dict[str, float], tasks: int) -> dict[str, float]:
    return {name: (cpu1[name] - cpu0[name]) / tasks * 1e6 for name in cpu0}


def measure_cli(args: argparse.Namespace, cluster: Cluster, redis: Any, shape: Shape) -> dict[str, Any]:
    """The same split run through ``sparkyard submit … --wait --json``, start of the command → its exit."""
    env = {**cluster._env(), "SPARKYARD_MASTER": cluster.address}
    cpu0 = cluster_cpu(cluster, redis)
    out = throughput_paths.cli_run(shape.app, cluster.address, args.tasks, args.inputs, env)
    cpu = per_task_us(cpu0, cluster_cpu(cluster, redis), args.tasks)
    cpu["client"] = out["cli_cpu_s"] / args.tasks * 1e6
    run = out["run"]
    if run.get("state") != "SUCCEEDED":
        raise SystemExit(f"bench: the CLI's run ended {run.get('state')}")
    return {"tasks_s": args.tasks / out["wall_s"], "wall_s": out["wall_s"], "cpu_us": cpu,
            "printed_bytes": out["printed_bytes"], "argv": out["argv"]}


def stored_bundle(cluster: Cluster, job_id: str) -> tuple[bytes, Path | None]:
    """The stored spec of the measured job and the bundle a worker extracted for it."""
    spec = cluster.client().job(job_id).spec
    if not spec.bundle.digest:  # --entry path: nothing shipped
        return spec.SerializeToString(), None
    root = cluster.root / "w1" / "bundles" / spec.bundle.digest
    if not root.is_dir():
        raise SystemExit(f"bench: no extracted bundle at {root}")
    return spec.SerializeToString(), root


def cpu_cells(cpu: dict[str, float]) -> str:
    cells = [f"{cpu[n]:,.0f}" for n in ("master", "redis", "workers", "drivers", "client")]
    cells[3] += f" (JVMs {cpu['driver_jvms']:,.0f})"
    return " / ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--slots", type=int, default=2, help="slots per worker (default: the worker default, 2)")
    parser.add_argument("--mode", choices=["jobs", "split"], default="split")
    parser.add_argument("--inputs", type=int, default=-1,
                        help="input files of the split run (default: one per task; 0: none)")
    parser.add_argument("--entry", choices=["bundle", "path"], default="bundle",
                        help="ship noop.py as a bundle as the CLI does (default) or name a module on the workers' path")
    parser.add_argument("--peer", choices=["celery", "none"], default="celery",
                        help="run Celery with the same shape after each run (default) or not")
    parser.add_argument("--no-cli", action="store_true", help="skip the run through the CLI")
    parser.add_argument("--no-ceiling", action="store_true", help="skip the runner's ceiling (drivers, no master)")
    parser.add_argument("--ceiling-dir", default="", help="the ceiling's work directory (attempt logs) under this "
                        "directory, e.g. /dev/shm (default: the run's temporary directory)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each (alternating)")
    parser.add_argument("--worker-arg", action="append", default=[],
                        help="extra worker flag, e.g. --worker-arg=--prefetch-max=0 (a tuned configuration)")
    parser.add_argument("--profile", default="", help="directory for cProfile stats of master and workers")
    parser.add_argument("--redis-stats", action="store_true", help="print Redis' busiest commands")
    args = parser.parse_args()
    if args.mode == "jobs":
        args.inputs = 0
    elif args.inputs < 0:
        args.inputs = args.tasks
    cli = args.mode == "split" and args.entry == "bundle" and not args.no_cli
    load = os.getloadavg()
    speed_before = speed_ms()
    rows: list[tuple[dict[str, Any], tuple[float, float] | None, dict[str, Any] | None]] = []
    ceiling: dict[str, float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        shape = Shape(args, throughput_paths.make_app(Path(tmp) / "app", args.inputs))
        redis = start_redis(Path(tmp) / "redis")
        cluster = Cluster(redis.url, Path(tmp) / "cluster", profile_dir=args.profile, driver_conf="",
                          profile_processes=("master", "w1") if args.profile else ("master",))
        try:
            cluster.start_master("--log-level", "WARNING")
            for name in ("w1", "w2"):
                cluster.start_worker(name, slots=args.slots, runner="session",
                                     extra=("--log-level", "WARNING", *args.worker_arg))
            cluster.wait_workers(timeout=900)  # four JVMs warming on a loaded 2-core machine
            client = cluster.client()
            for _ in range(3):  # warm-up: the drivers' first tasks (and both workers' copy of the bundle)
                client.wait(first_run_id(client.submit(shape.entry, parallelism=4, base_dir=str(shape.app))),
                            timeout=120)
            start = throughput_paths.cli_start_s(cluster._env()) if cli else None
            for _ in range(args.repeat):
                ours = measure(args, cluster, redis, shape)
                peer = celery_peer(redis.port, args.tasks, Path(tmp)) if args.peer == "celery" else None
                rows.append((ours, peer, measure_cli(args, cluster, redis, shape) if cli else None))
            spec_bytes, bundle_root = stored_bundle(cluster, rows[-1][0]["job_id"])
        finally:
            cluster.stop()
            redis.stop()
        if not args.no_ceiling and args.mode == "split":
            ceiling_work = Path(tempfile.mkdtemp(dir=args.ceiling_dir)) if args.ceiling_dir else Path(tmp) / "ceiling"
            try:
                ceiling = throughput_paths.ceiling(spec_bytes, bundle_root, ceiling_work, args.tasks, 2, args.slots)
            finally:
                if args.ceiling_dir:
                    shutil.rmtree(ceiling_work, ignore_errors=True)
    speed_after = speed_ms()
    report(args, rows, ceiling, start, load, (speed_before, speed_after))
    return 0


def report(args: argparse.Namespace, rows: list[tuple[dict[str, Any], tuple[float, float] | None, dict[str, Any] | None]],
           ceiling: dict[str, float] | None, start: tuple[float, float] | None, load: tuple[float, float, float],
           speed: tuple[float, float]) -> None:
    extra = f" ({' '.join(args.worker_arg)})" if args.worker_arg else ""
    what = f"{args.mode}, {args.entry}, {args.inputs:,} inputs"
    print(f"load average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}; speed ms before / after "
          f"{speed[0]:.0f} / {speed[1]:.0f}")
    print("| path | tasks | slots | tasks/s | Celery 2 × 2 tasks/s | ratio | dispatch p50 / p99 ms | "
          "submit → finished p50 / p99 ms | CPU µs per task: master / redis / workers / drivers / client | "
          "Celery CPU µs per task |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ours, peer, via_cli in rows:
        peer_rate = f"{peer[0]:,.0f}" if peer else "–"
        peer_cpu = f"{peer[1] / args.tasks * 1e6:,.0f}" if peer else "–"
        ratio = f"{ours['tasks_s'] / peer[0]:.1f}×" if peer else "–"
        print(f"| in-process client, {what} | {args.tasks:,} | 2 × {args.slots}{extra} | {ours['tasks_s']:,.0f} "
              f"(seen done after {ours['seen_s']:.2f} s) | {peer_rate} | {ratio} | {ours['dispatch'][0]:.0f} / "
              f"{ours['dispatch'][1]:.0f} | {ours['e2e'][0]:.0f} / {ours['e2e'][1]:.0f} | {cpu_cells(ours['cpu_us'])} | "
              f"{peer_cpu} |")
        if via_cli:
            cli_ratio = f"{via_cli['tasks_s'] / peer[0]:.1f}×" if peer else "–"
            print(f"| CLI `{via_cli['argv']}` (start → exit {via_cli['wall_s']:.2f} s, printed "
                  f"{via_cli['printed_bytes']:,} bytes) | {args.tasks:,} | 2 × {args.slots}{extra} | "
                  f"{via_cli['tasks_s']:,.0f} | {peer_rate} | {cli_ratio} | – | – | {cpu_cells(via_cli['cpu_us'])} | "
                  f"{peer_cpu} |")
    if start:
        print(f"CLI start (`sparkyard --help`): median {start[0]:.2f} s, best {start[1]:.2f} s")
    if ceiling:
        best = max(o["tasks_s"] for o, _, _ in rows)
        print(f"runner's ceiling (2 feeders × {args.slots} warm drivers, no master): {ceiling['tasks_s']:,.0f} tasks/s; "
              f"CPU µs per task: feeders {ceiling['feeder_us']:,.0f}, drivers {ceiling['drivers_us']:,.0f} "
              f"(Python {ceiling['driver_python_us']:,.0f}, JVMs {ceiling['driver_jvm_us']:,.0f}); "
              f"the best in-process run above is {best / ceiling['tasks_s']:.0%} of it")


if __name__ == "__main__":
    sys.exit(main())
