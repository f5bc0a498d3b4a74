"""What fenced output costs: ``ctx.output()`` and ``ctx.commit()`` on a filesystem, and the confirmation a
commit waits for (task → worker's fence desk → master's CheckFence → Redis) in each runner.

    .venv/bin/python tests/bench/bench_fenced_output.py [--dir /tmp] [--commits 500] [--asks 200]

The filesystem part stages, writes one small file and commits ``--commits`` times in this process, with a
confirmation that answers at once (so it is the lock, the record's fsync, the renames and the sweep). The
round trip starts a real redis-server, a master and one session-runner worker on free loopback ports and
runs one task per runner that asks ``--asks`` times. Prints a markdown table for docs/fenced-output.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis  # noqa: E402
from sparkyard.client import first_run_id  # noqa: E402
from sparkyard.worker.fenced_output import AttemptOutputs  # noqa: E402


def filesystem(directory: str, commits: int) -> tuple[float, float]:
    """Mean ms of output() and of commit() (confirmation excluded)."""
    staged, published = [], []
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        final = Path(tmp) / "out"
        for token in range(1, commits + 1):
            outputs = AttemptOutputs()
            started = time.perf_counter()
            staging = outputs.output(final, token)
            staged.append(time.perf_counter() - started)
            os.makedirs(staging)
            Path(staging, "part-0").write_text(str(token))
            started = time.perf_counter()
            outputs.commit(token, "bench", 1, lambda: (True, ""))
            published.append(time.perf_counter() - started)
    return statistics.mean(staged) * 1000, statistics.mean(published) * 1000


def round_trips(asks: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis", appendonly=False)
        cluster = Cluster(redis.url, Path(tmp) / "cluster")
        try:
            client = cluster.start_with_worker("w", 1)
            out = {}
            for runner in ("session", "submit"):
                job = client.submit(f"{EXAMPLES / 'tasks.py'}:ask_fence", args=[str(asks)], runner=runner)
                run, _ = client.wait(first_run_id(job), timeout=300)
                out[runner] = json.loads(run.tasks[0].result_json)
            return out
        finally:
            cluster.stop()
            redis.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=tempfile.gettempdir(), help="filesystem to publish on")
    parser.add_argument("--commits", type=int, default=500)
    parser.add_argument("--asks", type=int, default=200)
    args = parser.parse_args()
    stage_ms, commit_ms = filesystem(args.dir, args.commits)
    print(f"| what | figure |\n|---|---|\n| `output()` on {args.dir}, mean of {args.commits} | {stage_ms:.1f} ms |")
    print(f"| `commit()` on {args.dir} without the confirmation, mean of {args.commits} | {commit_ms:.1f} ms |")
    for runner, figures in round_trips(args.asks).items():
        print(f"| confirmation round trip, {runner} runner, {args.asks} asks | p50 {figures['p50_ms']:.1f} ms, "
              f"p99 {figures['p99_ms']:.1f} ms |")


if __name__ == "__main__":
    main()
