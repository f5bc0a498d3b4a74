"""The runner's own ceiling for tests/bench/bench_throughput.py: warm session drivers fed with no master.

    python tests/bench/throughput_ceiling.py SPEC_FILE BUNDLE_ROOT WORK_DIR --tasks N --slots S

One process as a worker would be, minus everything that talks to a master: a ``SessionRunner`` with S warm
drivers (the worker's own runner, its own driver processes) is handed N attempts of the job whose stored
``JobSpec`` is in SPEC_FILE (the same bundled no-op entrypoint, placed in the bundle the worker extracted,
BUNDLE_ROOT, '' when it ships none, one input each), all at once, and runs them to the end. Prints one JSON line: the time of the
first ``begin`` and of the last outcome (it prints ``ready`` once its drivers are warm and begins when
a line arrives on stdin, so the parent starts every feeder at once), this process's own CPU seconds over that stretch and its drivers'
(their Python and their JVMs, also apart). What it does not do — leases, fencing tokens, reports, gRPC, Redis — is what the
throughput benchmark's distance to this ceiling is made of.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import psutil

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.children import Children
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.runner.base import AttemptRun, Outcome
from sparkyard.worker.runner.session import SessionRunner
from sparkyard.worker.workspace import workspace

READY_TIMEOUT_S = 300.0
RESULT_MAX_BYTES = 1 << 20


def drivers_cpu_s() -> tuple[float, float]:
    """CPU seconds so far of this process's descendants: the warm drivers' Python, and their JVMs."""
    python = jvm = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
            is_jvm = child.name() == "java"
        except psutil.Error:
            continue
        if is_jvm:
            jvm += times.user + times.system
        else:
            python += times.user + times.system
    return python, jvm


async def feed(spec: pb.JobSpec, bundle_root: Path | None, work: Path, tasks: int, slots: int) -> dict[str, float]:
    logs = LogFiles(work)
    runner = SessionRunner("local[1]", slots, work, Children(work), logs=logs)
    await runner.start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while runner.readiness()[0] != pb.READINESS_READY:
        if time.monotonic() > deadline:
            raise SystemExit(f"throughput_ceiling: drivers not ready: {runner.readiness()[1]}")
        await asyncio.sleep(0.2)  # warming JVMs, seconds each; polled with a deadline
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)  # every feeder starts at once: the parent says go
    place = workspace(spec, bundle_root, work / "scratch")
    done = asyncio.get_running_loop().create_future()
    left = [tasks]
    failed: list[str] = []

    def finished(outcome: Outcome) -> None:
        if outcome.state != "SUCCEEDED":
            failed.append(outcome.error)
        left[0] -= 1
        if not left[0]:
            done.set_result(None)

    own0, drivers0 = time.process_time(), drivers_cpu_s()
    began = time.time()
    for i in range(tasks):
        a = pb.TaskAssignment(task_id=f"ceiling.{i}", run_id="ceiling", job_id="ceiling", index=i, task_count=tasks,
                              attempt=1, fencing_token=i + 1, spec=spec)
        a.inputs.add(value=f"/in/{i}")
        a.scheduled_at.FromMilliseconds(int(began * 1000))
        run = AttemptRun(a, "ceiling", logs.path_for(a.task_id, 1, began), str(work / "attempts"), RESULT_MAX_BYTES,
                         place)
        runner.begin(run, finished)
    await done
    ended = time.time()
    own, drivers = time.process_time() - own0, drivers_cpu_s()
    await runner.close()
    if failed:
        raise SystemExit(f"throughput_ceiling: {len(failed)} attempts failed, first: {failed[0]}")
    python, jvm = drivers[0] - drivers0[0], drivers[1] - drivers0[1]
    return {"began": began, "ended": ended, "own_cpu_s": own, "drivers_cpu_s": python + jvm,
            "driver_python_cpu_s": python, "driver_jvm_cpu_s": jvm}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("spec_file", type=Path)
    parser.add_argument("bundle_root", help="the extracted bundle ('' for a job that ships none)")
    parser.add_argument("work_dir", type=Path)
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--slots", type=int, default=2)
    args = parser.parse_args()
    spec = pb.JobSpec.FromString(args.spec_file.read_bytes())
    del spec.split.inputs[:]  # as the master sends it: each assignment carries its own inputs only
    args.work_dir.mkdir(parents=True, exist_ok=True)
    bundle_root = Path(args.bundle_root) if args.bundle_root else None
    print(json.dumps(asyncio.run(feed(spec, bundle_root, args.work_dir, args.tasks, args.slots))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
