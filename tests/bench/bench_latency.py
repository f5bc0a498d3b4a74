"""submit → SUCCEEDED of a trivial Spark task, in each runner, against a bare spark-submit baseline.

    .venv/bin/python tests/bench/bench_latency.py [--session 30] [--submit 3] [--baseline 2]

Also reports how long a worker with the default 2 slots takes to be READY and its idle memory (the worker
process, and with its warm driver processes and their JVMs). Starts a real redis-server, a master and
one worker on free loopback ports; submits
trivial tasks one at a time (count a 100-row range) and measures, per task, the client's wall time from
the submit call to the end of its wait, and where that time went (from the run and attempt records):
scheduled→fired, fired→leased, leased→started on the worker, started→finished, finished→client saw it.
The baseline is `spark-submit --master local[1]` of the same trivial program, timed in the same run.
Prints a markdown table (paste it into docs/benchmarks.md with the date).
"""

from __future__ import annotations

import argparse
import psutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis  # noqa: E402
from sparkyard.client import first_run_id  # noqa: E402
from sparkyard.worker.runner.submit import spark_submit_path  # noqa: E402

TRIVIAL = "from pyspark.sql import SparkSession\nprint(SparkSession.builder.getOrCreate().range(100).count())\n"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure(cluster: Cluster, runner: str, n: int) -> dict[str, list[float]]:
    client = cluster.client()
    phases: dict[str, list[float]] = {k: [] for k in ("total", "fire", "lease", "start", "run", "report")}
    for _ in range(n):
        t0 = time.time()
        job = client.submit(f"{EXAMPLES / 'tasks.py'}:count", args=["100"], runner=runner)
        run, timed_out = client.wait(first_run_id(job), timeout=300)
        t1 = time.time()
        assert not timed_out and run.state == 3, run
        a = run.tasks[0].attempts[0]
        ms = lambda ts: ts.ToMilliseconds()  # noqa: E731
        phases["total"].append((t1 - t0) * 1000)
        phases["fire"].append(ms(run.fired_at) - ms(run.scheduled_at))
        phases["lease"].append(ms(a.leased_at) - ms(run.fired_at))
        phases["start"].append(ms(a.started_at) - ms(a.leased_at))
        phases["run"].append(ms(a.finished_at) - ms(a.started_at))
        phases["report"].append(t1 * 1000 - ms(a.finished_at))
    return phases


def baseline(n: int) -> list[float]:
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "trivial.py"
        script.write_text(TRIVIAL)
        for _ in range(n):
            t0 = time.time()
            subprocess.run([spark_submit_path(), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                            str(script)], check=True, capture_output=True, cwd=tmp,
                           env={**__import__("os").environ, "PYSPARK_PYTHON": sys.executable})
            times.append((time.time() - t0) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--session", type=int, default=30, help="tasks through the session runner")
    parser.add_argument("--submit", type=int, default=3, help="tasks through the submit runner")
    parser.add_argument("--baseline", type=int, default=2, help="bare spark-submit runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis")
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        try:
            cluster.start_master()
            started = time.monotonic()
            worker = cluster.start_worker("session-worker", slots=2, runner="session", group="")  # the defaults
            cluster.wait_workers()
            ready_s = time.monotonic() - started
            idle = psutil.Process(worker.pid)
            worker_rss = idle.memory_info().rss
            tree_rss = worker_rss + sum(p.memory_info().rss for p in idle.children(recursive=True))
            measure(cluster, "session", 2)  # warm-up: the session's first job compiles and JITs
            results = {"session": measure(cluster, "session", args.session)}
            if args.submit:
                results["submit"] = measure(cluster, "submit", args.submit)
        finally:
            cluster.stop()
            redis.stop()
    base = baseline(args.baseline) if args.baseline else []
    print(f"worker with the default 2 slots (session runner): READY {ready_s:.1f} s after start; idle RSS "
          f"worker {worker_rss / 2**20:.0f} MiB, worker + drivers + JVMs {tree_rss / 2**20:.0f} MiB\n")
    print("| runner | n | submit→SUCCEEDED p50 / p90 / max ms | scheduled→fired | fired→leased | "
          "leased→started | started→finished | finished→client | vs bare spark-submit |")
    print("|---|---|---|---|---|---|---|---|---|")
    base_p50 = statistics.median(base) if base else 0
    for runner, ph in results.items():
        t = ph["total"]
        ratio = f"{statistics.median(t) / base_p50:.3f}×" if base_p50 else "–"
        print(f"| {runner} | {len(t)} | {statistics.median(t):.0f} / {pct(t, 0.9):.0f} / {max(t):.0f} | "
              + " | ".join(f"{statistics.median(ph[k]):.0f}" for k in ("fire", "lease", "start", "run", "report"))
              + f" | {ratio} |")
    if base:
        print(f"| bare spark-submit local[1] | {len(base)} | {statistics.median(base):.0f} / {pct(base, 0.9):.0f} / "
              f"{max(base):.0f} | – | – | – | – | – | 1× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
