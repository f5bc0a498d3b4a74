"""submit → SUCCEEDED of a trivial Spark task, in each runner, against a bare spark-submit baseline.

    .venv/bin/python tests/bench/bench_latency.py [--session 30] [--submit 3] [--baseline 2] [--connect 30]

Also reports how long a worker with the default 2 slots takes to be READY and its idle memory (the worker
process, and with its warm driver processes and their JVMs). Starts a real redis-server, a master and
one worker on free loopback ports; submits
trivial tasks one at a time (count a 100-row range) and measures, per task, the client's wall time from
the submit call to the end of its wait, and where that time went (from the run and attempt records):
scheduled→fired, fired→leased, leased→started on the worker, started→finished, finished→client saw it.
The baseline is `spark-submit --master local[1]` of the same trivial program, timed in the same run.
With ``--connect N`` a second worker (group ``connect``, the connect runner with its own Spark Connect
server) runs N more; reported besides: its server's start, its READY time and idle memory (worker,
clients, server JVM), and what a remote session costs by itself (create, tag, release; and with one
trivial query), timed from this process against that server.
Prints a markdown table (paste it into docs/benchmarks.md with the date).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis  # noqa: E402
from sparkyard.client import first_run_id  # noqa: E402
from sparkyard.worker.spark_home import spark_submit_path  # noqa: E402

TRIVIAL = "from pyspark.sql import SparkSession\nprint(SparkSession.builder.getOrCreate().range(100).count())\n"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure(cluster: Cluster, runner: str, n: int, group: str = "default") -> dict[str, list[float]]:
    client = cluster.client()
    phases: dict[str, list[float]] = {k: [] for k in ("total", "fire", "lease", "start", "run", "report")}
    for _ in range(n):
        t0 = time.time()
        job = client.submit(f"{EXAMPLES / 'tasks.py'}:count", args=["100"], runner=runner, group=group)
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


def tree_mib(pid: int) -> tuple[float, float]:
    """RSS of a process alone and with all its descendants (MiB)."""
    root = psutil.Process(pid)
    alone = root.memory_info().rss
    return alone / 2**20, (alone + sum(p.memory_info().rss for p in root.children(recursive=True))) / 2**20


def session_cost(url: str, n: int) -> dict[str, list[float]]:
    """What the connect runner does per attempt, timed alone: a new remote session, its tag, its release;
    and the same with one trivial query in between (ms)."""
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    from pyspark.sql.connect.session import SparkSession

    costs: dict[str, list[float]] = {"session": [], "session+query": []}
    for i in range(2 * n):
        t0 = time.perf_counter()
        session = SparkSession.builder.remote(url).create()
        session.addTag("bench")
        if i % 2:
            session.range(100).count()
        session.interruptAll()
        session.stop()
        costs["session+query" if i % 2 else "session"].append((time.perf_counter() - t0) * 1000)
    return costs


def connect_worker(cluster: Cluster, n: int) -> tuple[dict[str, list[float]], list[str]]:
    """The connect runner's figures: its latency phases and the lines describing its start and memory."""
    started = time.monotonic()
    worker = cluster.start_worker("connect-worker", slots=2, runner="connect", group="connect")
    cluster.wait_workers("connect-worker")
    ready_s = time.monotonic() - started
    found = re.search(r"Spark Connect server ready at (\S+) in ([\d.]+)s \(pid (\d+)\)", worker.log())
    assert found, worker.log()[-2000:]
    url, server_s, server_pid = found.group(1), float(found.group(2)), int(found.group(3))
    alone, tree = tree_mib(worker.pid)
    server_alone, _ = tree_mib(server_pid)
    measure(cluster, "connect", 2, group="connect")  # warm-up: the server's first query compiles and JITs
    phases = measure(cluster, "connect", n, group="connect")
    costs = session_cost(url, n)
    lines = [f"worker with the default 2 slots (connect runner): its server accepted connections {server_s:.1f} s "
             f"after it was started; worker READY {ready_s:.1f} s after start; idle RSS worker {alone:.0f} MiB, "
             f"server JVM {server_alone:.0f} MiB, worker + clients + server {tree:.0f} MiB"]
    for name, values in costs.items():
        lines.append(f"remote {name} (create, tag, release): p50 {statistics.median(values):.1f} ms, "
                     f"p90 {pct(values, 0.9):.1f} ms over {len(values)}")
    return phases, lines


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--session", type=int, default=30, help="tasks through the session runner")
    parser.add_argument("--submit", type=int, default=3, help="tasks through the submit runner")
    parser.add_argument("--baseline", type=int, default=2, help="bare spark-submit runs")
    parser.add_argument("--connect", type=int, default=0, help="tasks through the connect runner (own worker)")
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
            worker_mib, with_drivers_mib = tree_mib(worker.pid)
            measure(cluster, "session", 2)  # warm-up: the session's first job compiles and JITs
            results = {"session": measure(cluster, "session", args.session)}
            if args.submit:
                results["submit"] = measure(cluster, "submit", args.submit)
            connect_lines: list[str] = []
            if args.connect:
                results["connect"], connect_lines = connect_worker(cluster, args.connect)
        finally:
            cluster.stop()
            redis.stop()
    base = baseline(args.baseline) if args.baseline else []
    print(f"worker with the default 2 slots (session runner): READY {ready_s:.1f} s after start; idle RSS "
          f"worker {worker_mib:.0f} MiB, worker + drivers + JVMs {with_drivers_mib:.0f} MiB")
    print("\n".join(connect_lines) + "\n")
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
