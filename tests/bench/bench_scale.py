"""Scale: many active cron jobs in one master; many jobs due in the same second.

    .venv/bin/python tests/bench/bench_scale.py [--cron 100000] [--same-second 10000]

Part 1 — a fresh Redis and master; ``--cron`` jobs are bulk-submitted with daily cron schedules spread
over the day (so they stay active, none firing during the measurement). Reported: submit time, master RSS
and Redis ``used_memory`` before and after.

Part 2 — ``--same-second`` jobs are submitted with the same ``--at`` instant T (a few seconds ahead). Two
protocol-level workers (no Spark: they finish every task at once) offer enough free slots. Reported, from
the attempt records: how long after T the last task was leased ("dispatched") and the p50/p99.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, Cluster, start_redis, wait_for  # noqa: E402
from sparkyard.channel import open_channel  # noqa: E402
from sparkyard.client import build_spec, first_run_id  # noqa: E402
from sparkyard.config import ClientConfig  # noqa: E402
from sparkyard.v1 import sparkyard_pb2 as pb  # noqa: E402
from sparkyard.v1 import sparkyard_pb2_grpc as pbg  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"
BULK = 1000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def fast_worker(address: str, worker_id: str, slots: int, stop: asyncio.Event) -> None:
    """Speaks the worker protocol and finishes every task at once (measures the master, not Spark)."""
    outbox: asyncio.Queue[pb.WorkerMessage | None] = asyncio.Queue()
    outbox.put_nowait(pb.WorkerMessage(register=pb.Register(worker_id=worker_id, slots=slots)))

    async def requests():  # type: ignore[no-untyped-def]
        while (message := await outbox.get()) is not None:
            yield message

    async def heartbeat() -> None:
        while not stop.is_set():
            outbox.put_nowait(pb.WorkerMessage(heartbeat=pb.Heartbeat(free_slots=slots)))
            await asyncio.sleep(0.5)

    async with open_channel(address, ClientConfig(), asynchronous=True) as channel:
        call = pbg.WorkerServiceStub(channel).Connect(requests())
        beat = asyncio.create_task(heartbeat())
        reader = asyncio.ensure_future(call.read())
        stopper = asyncio.ensure_future(stop.wait())
        while True:
            done, _ = await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if stopper in done:
                break
            message = reader.result()
            if message is grpc.aio.EOF:
                break
            if message.WhichOneof("kind") == "batch":
                now = int(time.time() * 1000)
                results = []
                for task in message.batch.tasks:
                    result = pb.TaskResult(task_id=task.task_id, fencing_token=task.fencing_token,
                                           outcome=pb.ATTEMPT_SUCCEEDED)
                    result.started_at.FromMilliseconds(now)
                    result.finished_at.FromMilliseconds(now)
                    results.append(result)
                outbox.put_nowait(pb.WorkerMessage(reports=pb.Reports(results=results)))
            reader = asyncio.ensure_future(call.read())
        beat.cancel()
        reader.cancel()
        outbox.put_nowait(None)


def part_cron(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis")
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        try:
            cluster.start_master("--log-level", "WARNING")
            assert cluster.master is not None
            client = cluster.client()
            r = redis.client()
            master0, redis0 = rss_mb(cluster.master.pid), int(r.info("memory")["used_memory"]) / 2**20
            t0 = time.perf_counter()
            for start in range(0, n, BULK):
                specs = []
                for i in range(start, min(n, start + BULK)):
                    minute, hour = i % 60, (i // 60) % 24
                    specs.append(build_spec(NOOP, cron=f"{minute} {hour} * * *", tz="Europe/Berlin"))
                client.submit_many(specs)
            submit_s = time.perf_counter() - t0
            active = r.zcard("sy:schedule")
            return {"jobs": n, "active": active, "submit_s": submit_s, "master_before": master0,
                    "master_after": rss_mb(cluster.master.pid), "redis_before": redis0,
                    "redis_after": int(r.info("memory")["used_memory"]) / 2**20}
        finally:
            cluster.stop()
            redis.stop()


def part_same_second(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis")
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        try:
            cluster.start_master("--log-level", "WARNING")
            client = cluster.client()
            stop = asyncio.Event()
            loop = asyncio.new_event_loop()
            workers = [loop.create_task(fast_worker(cluster.address, f"fast{i}", n, stop)) for i in range(2)]
            import threading

            thread = threading.Thread(target=loop.run_forever, daemon=True)
            thread.start()
            wait_for(lambda: len(client.workers()) == 2, 30, "the fast workers")
            at = int(time.time()) + 8  # a whole second, far enough ahead for the submit to finish
            jobs = []
            for start in range(0, n, BULK):
                jobs += client.submit_many([build_spec(NOOP, at=at) for _ in range(min(BULK, n - start))])
            assert time.time() < at, "submitting took longer than the lead time"
            r = redis.client()
            run_keys = [f"sy:run:{first_run_id(j)}" for j in jobs]

            def all_done() -> bool:
                pipe = r.pipeline(transaction=False)
                for key in run_keys[-200:]:
                    pipe.hget(key, "state")
                return all(s == "SUCCEEDED" for s in pipe.execute()) and client.status().leased == 0

            wait_for(all_done, 120, "all runs to succeed", interval=0.1)
            pipe = r.pipeline(transaction=False)
            for job in jobs:  # the (only) attempt of each task is in the task hash (common/keys.py)
                pipe.hget(f"sy:task:{first_run_id(job)}.00000", "att_leased_ms")
            leased = [int(x) - at * 1000 for x in pipe.execute()]
            loop.call_soon_threadsafe(stop.set)
            time.sleep(0.5)  # let the fake workers close their streams
            loop.call_soon_threadsafe(loop.stop)
            del workers
            ordered = sorted(leased)
            return {"jobs": n, "p50": statistics.median(leased), "p99": ordered[int(0.99 * (len(ordered) - 1))],
                    "max": ordered[-1]}
        finally:
            cluster.stop()
            redis.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cron", type=int, default=100_000)
    parser.add_argument("--same-second", type=int, default=10_000)
    args = parser.parse_args()
    if args.cron:
        c = part_cron(args.cron)
        print("| active cron jobs | submit s | master RSS MB before → after | Redis used_memory MB before → after |")
        print("|---|---|---|---|")
        print(f"| {c['active']:,.0f} | {c['submit_s']:.1f} | {c['master_before']:.0f} → {c['master_after']:.0f} | "
              f"{c['redis_before']:.1f} → {c['redis_after']:.1f} |")
    if args.same_second:
        s = part_same_second(args.same_second)
        print("| jobs due in the same second | leased after the fire second p50 / p99 / max ms |")
        print("|---|---|")
        print(f"| {s['jobs']:,.0f} | {s['p50']:.0f} / {s['p99']:.0f} / {s['max']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
