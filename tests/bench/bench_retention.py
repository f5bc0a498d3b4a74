"""Retention: Redis memory stays flat while a 1 s job runs through 10,000 runs; bytes per job, run and task.

    .venv/bin/python tests/bench/bench_retention.py [--runs 10000] [--keep-runs 100] [--threads 4]

Part 1, flat memory — a fresh redis-server, a real master (``--keep-runs``, default 100) and a real worker
(session runner, 2 slots, one warm driver per slot), and a job submitted with ``--every 1s`` running the
no-op task. 10,000 real seconds would take almost three hours, so the runs are made faster this way: the
job keeps its own 1 s schedule, and ``--threads`` client threads each trigger it by hand (TriggerJob: the
same firing path, fire.lua, as a scheduled firing, and the same run, task and attempt records) and wait for
that run to end before triggering the next. Time is thus compressed about 100×, and so is the master's
retention rest (``retention_interval_s`` 50 ms instead of the default 5 s, set in a config file), so that
as many runs accumulate between two retention passes as would with the default in real time. Every 100
runs Redis ``INFO memory`` ``used_memory`` is sampled; once 10 × keep-runs runs are done (retention is in
its steady state long before) the samples' spread around their mean is reported (the target is ±10 %).

Part 2, bytes — the master's own ``RedisStore`` on the same Redis, another namespace: ``used_memory``
before and after 1,000 jobs waiting in the schedule (with an idempotency key, as the client sends), 1,000
ended one-task runs and 200 ended ten-task runs of one job (each task claimed and reported SUCCEEDED with a
result, a log path and its times, as a worker does). A run of k tasks costs R + k·T: T and R come from the
two run sizes. Then the same history is deleted by retention steps (keep 1, max age 0, the master's step
budget), each timed from the client (loopback).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis, wait_for  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from sparkyard import Client, FailedPrecondition  # noqa: E402
from sparkyard.keys import Keys  # noqa: E402
from sparkyard.master.leader import take_lead  # noqa: E402
from sparkyard.master.redis_store import RedisStore  # noqa: E402
from sparkyard.master.retention import JOBS_PER_STEP, STEP_BUDGET  # noqa: E402
from sparkyard.master.store_values import NewJob, Report, RetentionBounds  # noqa: E402
from sparkyard.spec import normalize  # noqa: E402
from sparkyard.v1 import sparkyard_pb2 as pb  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"
SAMPLE_EVERY = 100
FAR_FUTURE_MS = 4_000_000_000_000


def part_flat(runs: int, keep: int, threads: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis", appendonly=False)
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        config = Path(tmp) / "master.toml"
        config.write_text('[master]\nretention_interval_s = "50ms"\n')
        try:
            cluster.start_master("--config", str(config), "--keep-runs", str(keep), "--log-level", "WARNING")
            cluster.start_worker("w1", slots=2, runner="session")
            cluster.wait_workers()
            job = cluster.client().submit(NOOP, every="1s")
            r = redis.client()
            runs_key = Keys(cluster.namespace).job_runs(job.id)
            lock = threading.Lock()
            done = [0]
            samples: list[tuple[int, int, int]] = []  # (runs done, used_memory, runs kept)

            def drive() -> None:
                with Client(cluster.address) as client:
                    while True:
                        with lock:
                            if done[0] >= runs:
                                return
                        try:
                            run = client.trigger(job.id)
                        except FailedPrecondition:  # another thread triggered in the same millisecond
                            continue
                        client.wait(run.id, timeout=120)
                        with lock:
                            done[0] += 1
                            if done[0] % SAMPLE_EVERY == 0:
                                samples.append((done[0], int(r.info("memory")["used_memory"]), r.zcard(runs_key)))

            started = time.monotonic()
            pool = [threading.Thread(target=drive) for _ in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join()
            took = time.monotonic() - started
            wait_for(lambda: r.zcard(runs_key) <= keep + 2, 60, "retention to trim the job after the last run")
            steady = [m for n, m, _ in samples if n >= 10 * keep]
            mean = statistics.mean(steady)
            return {"runs": done[0], "took_s": took, "samples": samples, "steady_n": len(steady),
                    "min": min(steady), "max": max(steady), "mean": mean,
                    "spread": max(abs(m - mean) for m in steady) / mean,
                    "kept_max": max(k for n, _, k in samples if n >= 10 * keep),
                    "final_kept": r.zcard(runs_key)}
        finally:
            cluster.stop()
            redis.stop()


async def part_bytes() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp) / "redis", appendonly=False)
        client = Redis(port=server.port, decode_responses=True)
        try:
            store = RedisStore(client, Keys("bytes"))
            await take_lead(store.scripts, "bench-retention")

            async def used() -> int:
                return int((await client.info("memory"))["used_memory"])

            cron = normalize(pb.JobSpec(entrypoint=NOOP, trigger=pb.Trigger(cron=pb.Trigger.Cron(expr="0 3 * * *"))))
            before = await used()
            await store.submit_many([NewJob(f"j{n:021x}", cron, "abs", FAR_FUTURE_MS, uuid.uuid4().hex)
                                     for n in range(1, 1001)], 86_400_000)
            per_job = (await used() - before) / 1000
            every = pb.JobSpec(entrypoint=NOOP)
            every.trigger.every.interval.FromSeconds(1)
            every = normalize(every)
            job_id = "j" + "f" * 21
            await store.submit_many([NewJob(job_id, every, "abs", FAR_FUTURE_MS)], 60_000)

            async def ended_runs(count: int, tasks: int, first_ms: int) -> float:
                start = await used()
                for i in range(count):
                    run_id, _ = await store.fire(job_id, every, first_ms + i * 1000, expected_ms=None,
                                                 next_fire_ms=-1, overlap="allow", inputs=[()] * tasks)
                    claims = await store.claim("default", [(f"{run_id}.{k:05d}", "worker-1") for k in range(tasks)],
                                               lease_ms=60_000, timeout_grace_ms=0)
                    now = await store.time_ms()
                    await store.report([Report(c.task_id, c.token, "SUCCEEDED", result_json="1", started_ms=now,
                                               finished_ms=now, log_path=f"/var/sparkyard/w/logs/{c.task_id}.1.log")
                                        for c in claims])
                return (await used() - start) / count

            one = await ended_runs(1000, 1, 1_000_000)
            ten = await ended_runs(200, 10, 2_000_000_000)
            per_task = (ten - one) / 9
            steps = []
            cursor, more = 0, True
            bounds = RetentionBounds(keep_runs=1, max_age_ms=0, jobs_per_step=JOBS_PER_STEP, budget=STEP_BUDGET)
            while more or cursor:
                t0 = time.perf_counter()
                step = await store.purge_history(cursor, bounds)
                steps.append((time.perf_counter() - t0) * 1000)
                cursor, more = step.cursor, step.more
            return {"per_job": per_job, "per_run": one - per_task, "per_task": per_task, "steps": len(steps),
                    "step_p50": statistics.median(steps), "step_max": max(steps)}
        finally:
            await client.aclose()
            server.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--keep-runs", type=int, default=100)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    b = asyncio.run(part_bytes())
    print("| Redis bytes per job (scheduled) | per ended run (without its tasks) | per ended task (one attempt) |")
    print("|---|---|---|")
    print(f"| {b['per_job']:,.0f} | {b['per_run']:,.0f} | {b['per_task']:,.0f} |")
    print(f"retention steps (budget {STEP_BUDGET} keys) deleting 1,200 runs / 3,000 tasks: {b['steps']:.0f} steps, "
          f"p50 {b['step_p50']:.2f} ms, max {b['step_max']:.2f} ms per step")
    f = part_flat(args.runs, args.keep_runs, args.threads)
    print(f"{f['runs']:,} runs in {f['took_s']:.0f} s; used_memory every {SAMPLE_EVERY} runs (runs done: MiB, runs kept):")
    print(", ".join(f"{n}: {m / 2**20:.2f} ({k})" for n, m, k in f["samples"]))  # type: ignore[attr-defined]
    print(f"steady state (from {10 * args.keep_runs:,} runs, {f['steady_n']} samples): used_memory "
          f"{f['min'] / 2**20:.2f}–{f['max'] / 2**20:.2f} MiB, mean {f['mean'] / 2**20:.2f} MiB, "
          f"largest deviation {f['spread']:.1%} (target ±10 %); runs kept at most {f['kept_max']}, "
          f"{f['final_kept']} after the last run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
