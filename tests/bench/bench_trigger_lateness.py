"""End-to-end trigger lateness: scheduled_at → attempt started on the worker, with many pending jobs.

    .venv/bin/python tests/bench/bench_trigger_lateness.py [--pending 1000,100000] [--probes 200]

For each pending count P: a fresh Redis, master and one session-runner worker (4 slots). P jobs are
submitted (bulk SubmitJobs) with `--at` times 1–2 h ahead and the master's preload horizon set to 3 h, so
all P timers sit in the timing wheel. Then `--probes` trivial jobs are submitted to fire every 50 ms
starting 3 s later; lateness of each probe = its attempt's started_at (worker clock) − its run's
scheduled_at, and fire lateness = fired_at − scheduled_at. The master's RSS and timer count are read
from /proc and GetStatus. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis  # noqa: E402
from sparkyard.client import build_spec, first_run_id  # noqa: E402
from sparkyard.v1 import sparkyard_pb2 as pb  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"
BULK = 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def one(pending: int, probes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis", appendonly=False)
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        try:
            cluster.start_master("--preload-horizon", "10800", "--log-level", "WARNING")
            cluster.start_worker("w", slots=4, runner="session")
            cluster.wait_workers()
            client = cluster.client()
            warm = client.submit(NOOP)
            client.wait(first_run_id(warm), timeout=120)
            now = time.time()
            t0 = time.perf_counter()
            for start in range(0, pending, BULK):
                specs = [build_spec(NOOP, at=now + 3600 + (start + i) * 3600 / max(1, pending))
                         for i in range(min(BULK, pending - start))]
                client.submit_many(specs)
            submit_s = time.perf_counter() - t0
            status = client.status()
            first = time.time() + 3
            jobs = client.submit_many([build_spec(NOOP, at=first + i * 0.05) for i in range(probes)])
            runs = []
            for job in jobs:
                run, timed_out = client.wait(first_run_id(job), timeout=120)
                assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
                runs.append(run)
            assert cluster.master is not None
            rss = rss_mb(cluster.master.pid)
            redis_rss = rss_mb(redis.process.pid)
        finally:
            cluster.stop()
            redis.stop()
    ms = lambda ts: ts.ToMilliseconds()  # noqa: E731
    start_late = [ms(r.tasks[0].attempts[0].started_at) - ms(r.scheduled_at) for r in runs]
    fire_late = [ms(r.fired_at) - ms(r.scheduled_at) for r in runs]
    return {"pending": pending, "timers": status.timers_pending, "submit_s": submit_s,
            "p50": statistics.median(start_late), "p99": pct(start_late, 0.99), "max": max(start_late),
            "fire_p50": statistics.median(fire_late), "fire_p99": pct(fire_late, 0.99), "rss": rss,
            "redis_rss": redis_rss}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pending", default="1000,100000")
    parser.add_argument("--probes", type=int, default=200)
    args = parser.parse_args()
    rows = [one(int(p), args.probes) for p in args.pending.split(",")]
    print("| pending jobs | timers in wheel | bulk submit s | start lateness p50 / p99 / max ms | "
          "fire lateness p50 / p99 ms | master RSS MB | redis RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['pending']:,} | {r['timers']:,} | {r['submit_s']:.1f} | {r['p50']:.0f} / {r['p99']:.0f} / "
              f"{r['max']:.0f} | {r['fire_p50']:.0f} / {r['fire_p99']:.0f} | {r['rss']:.0f} | {r['redis_rss']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
