"""Pipelines at the default configuration: step-to-step latency, a 1,000-step pipeline, 10,000 held.

    .venv/bin/python tests/bench/bench_pipeline.py [--chain 20] [--chain-runs 3] [--wide 100] [--deep 10]
                                                   [--held 10000]

Starts a real redis-server, a master and two workers with the defaults (session runner, 2 slots each: the
shape of `sparkyard local`) on free loopback ports, and the pipelines through the Python client as a
definition file would make them (`Pipeline(...).to_spec()`, the step's code shipped as `apply` ships it).

1. Step-to-step latency: a chain of ``--chain`` no-op steps, run ``--chain-runs`` times; for each edge, the
   downstream step's attempt start (on the worker) minus the upstream step's attempt end (on the worker),
   split into the scheduler's part (upstream end → downstream leased: the result's report, the Lua release,
   the claim) and the runner's own start (leased → started).
2. A pipeline of ``--wide`` chains of ``--deep`` no-op steps (``wide × deep`` = 1,000 steps by default, the
   most a pipeline may have; the ``wide`` first steps all ready when the run starts): its wall time and the
   master's CPU per step (psutil, over the run).
3. ``--held`` pipelines of 3 steps on a daily cron, submitted in bulk: the master's RSS and Redis'
   used_memory per pipeline held.

Prints markdown (paste it into docs/benchmarks.md with the date).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import psutil
import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis  # noqa: E402
from sparkyard.client import Client  # noqa: E402
from sparkyard.pipeline import Pipeline  # noqa: E402
from sparkyard.v1 import sparkyard_pb2 as pb  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def submit(client: Client, pipeline: Pipeline) -> pb.Job:
    spec = pipeline.to_spec()
    return client.submit_spec(spec).job


def run_to_end(client: Client, job_id: str) -> pb.Run:
    run, timed_out = client.wait(client.trigger(job_id).id, timeout=1800)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    return run


def chain_latency(client: Client, steps: int, runs: int) -> dict[str, list[float]]:
    p = Pipeline("bench-chain")
    previous = None
    for i in range(steps):
        previous = p.step(f"s{i}", NOOP, after=[previous] if previous else [])
    job = submit(client, p)
    out: dict[str, list[float]] = {"edge": [], "release": [], "runner": []}
    for _ in range(runs):
        run = run_to_end(client, job.id)
        attempts = [client.run(s.run_id).tasks[0].attempts[-1] for s in run.steps]
        for up, down in zip(attempts, attempts[1:]):
            end, leased, started = (up.finished_at.ToMilliseconds(), down.leased_at.ToMilliseconds(),
                                    down.started_at.ToMilliseconds())
            out["edge"].append(started - end)
            out["release"].append(leased - end)
            out["runner"].append(started - leased)
    return out


def wide_pipeline(client: Client, master: psutil.Process, wide: int, deep: int) -> tuple[float, float, int]:
    p = Pipeline("bench-wide")
    for c in range(wide):
        previous = p.step(f"c{c}_0", NOOP)
        for d in range(1, deep):
            previous = p.step(f"c{c}_{d}", NOOP, after=[previous])
    job = submit(client, p)
    cpu0, t0 = sum(master.cpu_times()[:2]), time.time()
    run = run_to_end(client, job.id)
    wall, cpu = time.time() - t0, sum(master.cpu_times()[:2]) - cpu0
    return wall, cpu, len(run.steps)


def held(client: Client, master: psutil.Process, store: redis.Redis, n: int) -> tuple[float, float]:
    rss0, mem0 = master.memory_info().rss, int(store.info("memory")["used_memory"])
    specs = []
    for i in range(n):
        p = Pipeline(f"held-{i}", cron=f"{i % 60} {i // 60 % 24} * * *", base_dir=EXAMPLES)
        a = p.step("a", NOOP)
        p.step("b", NOOP, after=[a])
        p.step("c", NOOP, after=[a])
        spec = p.to_spec()
        specs.append(spec)
    for start in range(0, n, 500):
        client.submit_many(specs[start:start + 500])
    time.sleep(2)  # let the master settle (arming the first fire times) before reading its memory
    rss, mem = master.memory_info().rss, int(store.info("memory")["used_memory"])
    return (rss - rss0) / n, (mem - mem0) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument("--chain-runs", type=int, default=3)
    parser.add_argument("--wide", type=int, default=100)
    parser.add_argument("--deep", type=int, default=10)
    parser.add_argument("--held", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp) / "redis")
        cluster = Cluster(server.url, Path(tmp) / "cluster", driver_conf="")
        try:
            cluster.start_master()
            for w in ("w1", "w2"):
                cluster.start_worker(w, slots=2, runner="session", group="")
            cluster.wait_workers()
            client = cluster.client()
            master = psutil.Process(cluster.master.pid)
            lat = chain_latency(client, args.chain, args.chain_runs)
            print(f"## Pipelines ({time.strftime('%Y-%m-%d')}, 2 workers x 2 slots, session runner)\n")
            print("| step to step (ms) | p50 | p99 | max |\n| --- | --- | --- | --- |")
            for key, label in (("edge", "upstream end → downstream started"),
                               ("release", "… of which end → leased (report, Lua release, claim)"),
                               ("runner", "… of which leased → started (the runner's start)")):
                v = lat[key]
                print(f"| {label} | {pct(v, 0.5):.0f} | {pct(v, 0.99):.0f} | {max(v):.0f} |")
            print(f"\n({len(lat['edge'])} edges: a chain of {args.chain} no-op steps, {args.chain_runs} runs)\n")
            wall, cpu, steps = wide_pipeline(client, master, args.wide, args.deep)
            print(f"{steps} no-op steps ({args.wide} chains x {args.deep}): {wall:.1f} s, "
                  f"{steps / wall:.0f} steps/s, master CPU {cpu / steps * 1e6:.0f} µs per step\n")
            store = redis.Redis.from_url(server.url)
            rss, mem = held(client, master, store, args.held)
            print(f"{args.held} pipelines of 3 steps held (daily cron): master RSS +{rss / 1024:.1f} KiB and Redis "
                  f"+{mem / 1024:.1f} KiB per pipeline")
        finally:
            cluster.stop()
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
