"""Redis cost of the hot path, per task: the Lua scripts a one-task job goes through, measured alone.

    .venv/bin/python tests/bench/bench_scripts.py [--jobs 10000] [--batch 256] [--repeat 3]

A fresh redis-server (AOF on, as the embedded one) and the master's own ``RedisStore``; no master process, no
workers. Phase by phase: ``--jobs`` one-task jobs are bulk-submitted to fire now (1,000 per call: submit.lua makes
their runs), and ``--jobs`` more with a schedule entry, which are then fired as the preloader fires due
entries (``fire.lua``, 500 to a pipeline: the path of scheduled jobs and of a burst due in the same second);
every task is peeked and claimed (``--batch`` per call, as the slot scheduler does) and reported SUCCEEDED
(as a worker batch, ``--batch`` per call: an attempt shorter than the worker's start-report delay reports
its start with its result). Then one run split into ``--jobs`` tasks of one input each (the shape of
``bench_throughput.py``) goes through the same phases: its tasks share one run. Each phase's redis-server CPU time (from /proc,
so AOF writing and networking are included) and the time spent inside the scripts (INFO commandstats) are
divided by the number of tasks it handled. The specs carry no bundle (the entrypoint is on the path, as in
``bench_throughput.py``): bundles cost the upload, not the scripts measured here. The split shows which
script to work on.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import EXAMPLES, start_redis  # noqa: E402
from redis.asyncio import Redis  # noqa: E402
from sparkyard.client import build_spec  # noqa: E402
from sparkyard.keys import Keys  # noqa: E402
from sparkyard.master.splitter import split_job  # noqa: E402
from sparkyard.master.leader import take_lead  # noqa: E402
from sparkyard.master.redis_store import RedisStore  # noqa: E402
from sparkyard.master.preloader import FIRE_BATCH  # noqa: E402
from sparkyard.master.store_outcomes import FireStatus  # noqa: E402
from sparkyard.master.store_values import FireRequest, NewJob, Report  # noqa: E402
from sparkyard import ids  # noqa: E402
from sparkyard.spec import normalize  # noqa: E402
from sparkyard.v1 import sparkyard_pb2 as pb  # noqa: E402

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"
BULK = 1000


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


async def one_round(store: RedisStore, pid: int, jobs: int, batch: int, now_ms: int) -> dict[str, float]:
    """Redis CPU µs per task of each phase, for ``jobs`` one-task jobs fired in their submit and ``jobs`` fired
    from the schedule."""
    spec = normalize(build_spec(NOOP))
    spec.ClearField("bundle")
    tasks = split_job(spec)
    new = [NewJob(ids.new_job_id(now_ms), spec, "abs", now_ms, ids.new_job_id(now_ms), fire_now=tasks)
           for _ in range(jobs)]
    due_ms = now_ms + 3_600_000  # an hour ahead: fired below, by hand, as if that hour had come
    scheduled = [NewJob(ids.new_job_id(now_ms), spec, "abs", due_ms, ids.new_job_id(now_ms)) for _ in range(jobs)]
    claimed: list[tuple[str, int]] = []
    out: dict[str, float] = {}

    async def script_us() -> float:
        stats = await store.redis.info("commandstats")
        return float(stats.get("cmdstat_evalsha", {}).get("usec", 0)) + float(stats.get("cmdstat_eval", {}).get("usec", 0))

    async def phase(name: str, body: Callable[[], Awaitable[None]], per: int) -> None:
        before, inside = cpu_s(pid), await script_us()
        await body()
        out[name] = (cpu_s(pid) - before) * 1e6 / per
        out[f"{name} (inside scripts)"] = (await script_us() - inside) / per

    async def submit(which: list[NewJob]) -> None:
        for start in range(0, jobs, BULK):
            assert all(not r.bundle_missing for r in await store.submit_many(which[start:start + BULK], 86_400_000))

    async def fire() -> None:
        for start in range(0, jobs, FIRE_BATCH):
            fired = await store.fire_many([FireRequest(j.job_id, spec, due_ms, due_ms, -1, "allow", tasks)
                                           for j in scheduled[start:start + FIRE_BATCH]])
            assert all(f.result.status is FireStatus.CREATED for f in fired), [f for f in fired if f.result.status is not FireStatus.CREATED][:2]

    async def claim_all(group: str, into: list[tuple[str, int]]) -> None:
        while True:
            ready = await store.peek_ready(group, batch)
            if not ready:
                return
            pairs = [(r.task_id, "w1" if i % 2 else "w2") for i, r in enumerate(ready)]
            claims = await store.claim(group, pairs, lease_ms=15_000, timeout_grace_ms=5_000)
            into.extend((c.task_id, c.token) for c in claims)

    async def report_all(tasks: list[tuple[str, int]]) -> None:
        # What a worker sends for attempts shorter than its start report's delay: the result alone.
        for start in range(0, len(tasks), batch):
            chunk = tasks[start:start + batch]
            await store.report([Report(t, tok, "SUCCEEDED", result_json="null", started_ms=now_ms,
                                       finished_ms=now_ms, log_path="/tmp/x.log") for t, tok in chunk])

    async def claim() -> None:
        await claim_all(spec.group, claimed)

    async def report() -> None:
        await report_all(claimed)

    # One run split into ``jobs`` tasks, one input each (the shape of issue #23's throughput runs): its tasks
    # share one run hash, which the claim and the report read per call, not per task.
    split_spec = normalize(build_spec(NOOP))
    split_spec.ClearField("bundle")
    split_spec.split.parallelism = jobs
    split_spec.split.inputs.extend(pb.SplitInput(value=f"/data/in/part-{i:06d}") for i in range(jobs))
    split_run = NewJob(ids.new_job_id(now_ms), split_spec, "abs", now_ms, ids.new_job_id(now_ms),
                       fire_now=split_job(split_spec))
    split_claimed: list[tuple[str, int]] = []

    async def submit_split() -> None:
        assert not (await store.submit_many([split_run], 86_400_000))[0].bundle_missing

    async def claim_split() -> None:
        await claim_all(split_spec.group, split_claimed)

    async def report_split() -> None:
        await report_all(split_claimed)

    await phase("submit, fired in it (submit.lua)", lambda: submit(new), jobs)
    await phase("submit, scheduled (submit.lua)", lambda: submit(scheduled), jobs)
    await phase("fire from the schedule (fire.lua)", fire, jobs)
    await phase("peek + claim", claim, 2 * jobs)
    await phase("report", report, 2 * jobs)
    assert len(claimed) == 2 * jobs, f"claimed {len(claimed)} of {2 * jobs}"
    await phase("one split run: submit (submit.lua)", submit_split, jobs)
    await phase("one split run: peek + claim", claim_split, jobs)
    await phase("one split run: report", report_split, jobs)
    assert len(split_claimed) == jobs, f"claimed {len(split_claimed)} of the split run's {jobs}"
    return out


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp) / "redis", appendonly=not args.no_aof)
        try:
            redis = Redis(port=server.port, decode_responses=True)
            store = RedisStore(redis, Keys())
            await take_lead(store.scripts, "bench-scripts")
            now_ms = int((await redis.time())[0]) * 1000
            rounds = [await one_round(store, server.process.pid, args.jobs, args.batch, now_ms)
                      for _ in range(args.repeat)]
            await redis.aclose()
        finally:
            server.stop()
    print(f"| phase | Redis CPU µs per task (median of {args.repeat}; each round {args.jobs:,} jobs) |")
    print("|---|---|")
    for name in rounds[0]:
        print(f"| {name} | {statistics.median(r[name] for r in rounds):.0f} |")
    paths = {"one-task jobs": ("submit, fired in it (submit.lua)", "peek + claim", "report"),
             "one split run": ("one split run: submit (submit.lua)", "one split run: peek + claim",
                               "one split run: report")}
    for label, phases in paths.items():
        total = statistics.median(sum(r[name] for name in phases) for r in rounds)
        print(f"| total, {label} (submitted to fire now, claimed, reported) | {total:.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-aof", action="store_true", help="measure without the append-only file")
    asyncio.run(main_async(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
