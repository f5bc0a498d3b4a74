"""The user's paths of tests/bench/bench_throughput.py: the shipped entrypoint, the CLI, and the runner's ceiling.

* :func:`make_app` writes what a user submits from: ``noop.py`` (its ``main`` returns at once, touching no
  Spark) and ``in/`` with one small input file per task. Submitted from that directory, the client ships
  ``noop.py`` as a bundle, exactly as ``sparkyard submit noop.py:main`` does.
* :func:`cli_run` runs ``sparkyard submit noop.py:main --inputs 'in/*' --parallelism N --wait --json`` as
  a user would, timed from the command's start to its exit, with the CPU the CLI process used.
* :func:`cli_start_s` times ``sparkyard --help`` (start-up: imports and argument parsing).
* :func:`ceiling` runs tests/bench/throughput_ceiling.py: the same attempts through warm drivers with
  no master (one feeder process per worker of the cluster measured).
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent
NOOP_SOURCE = '''"""A no-op task: returns at once without touching Spark (the scheduler's own cost is what is left)."""


def main(spark, ctx):
    return ctx.task_index
'''


def make_app(root: Path, inputs: int) -> Path:
    """The directory a user submits from: ``noop.py`` and ``in/`` holding ``inputs`` files."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "noop.py").write_text(NOOP_SOURCE)
    data = root / "in"
    data.mkdir(exist_ok=True)
    for i in range(inputs):
        (data / f"part-{i:05d}.txt").write_text(f"{i}\n")
    return root


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli_run(app: Path, address: str, tasks: int, inputs: int, env: dict[str, str]) -> dict[str, Any]:
    """``sparkyard submit … --wait --json`` from ``app``: wall seconds start → exit, the CLI's CPU seconds,
    the bytes it printed and the run it printed."""
    argv = [str(BIN / "sparkyard"), "submit", "noop.py:main", "--parallelism", str(tasks), "--wait", "--json",
            "--master", address]
    if inputs:
        argv[3:3] = ["--inputs", "in/*"]
    cpu0 = _children_cpu_s()
    began = time.time()
    done = subprocess.run(argv, cwd=app, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"bench: the CLI submit exited {done.returncode}: {done.stderr.decode(errors='replace')}")
    run = json.loads(done.stdout)
    return {"began": began, "wall_s": ended - began, "cli_cpu_s": _children_cpu_s() - cpu0,
            "printed_bytes": len(done.stdout), "run": run, "argv": " ".join(argv[1:-2])}


def cli_start_s(env: dict[str, str], times: int = 5) -> tuple[float, float]:
    """(median, min) wall seconds of ``sparkyard --help``: the CLI's start-up."""
    taken = []
    for _ in range(times):
        began = time.perf_counter()
        subprocess.run([str(BIN / "sparkyard"), "--help"], env=env, stdout=subprocess.DEVNULL, check=True)
        taken.append(time.perf_counter() - began)
    return statistics.median(taken), min(taken)


def ceiling(spec_bytes: bytes, bundle_root: Path | None, work: Path, tasks: int, workers: int, slots: int) -> dict[str, float]:
    """Tasks/s and CPU per task of ``workers`` feeder processes × ``slots`` warm drivers, no master."""
    work.mkdir(parents=True, exist_ok=True)
    spec_file = work / "spec.bin"
    spec_file.write_bytes(spec_bytes)
    share = [tasks // workers + (1 if i < tasks % workers else 0) for i in range(workers)]
    procs = [subprocess.Popen([sys.executable, str(HERE / "throughput_ceiling.py"), str(spec_file), str(bundle_root or ""),
                               str(work / f"feeder{i}"), "--tasks", str(n), "--slots", str(slots)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
             for i, n in enumerate(share)]
    for proc in procs:  # the drivers of every feeder warm first
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit(f"bench: the ceiling's feeder exited {proc.wait()} before its drivers were ready")
    outs = []
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        out, _ = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise SystemExit(f"bench: the ceiling's feeder exited {proc.returncode}")
        outs.append(json.loads(out.strip().splitlines()[-1]))
    rate = tasks / max(0.001, max(o["ended"] for o in outs) - min(o["began"] for o in outs))

    def per_task_us(field: str) -> float:
        return sum(o[field] for o in outs) / tasks * 1e6

    return {"tasks_s": rate, "feeder_us": per_task_us("own_cpu_s"), "drivers_us": per_task_us("drivers_cpu_s"),
            "driver_python_us": per_task_us("driver_python_cpu_s"), "driver_jvm_us": per_task_us("driver_jvm_cpu_s")}
