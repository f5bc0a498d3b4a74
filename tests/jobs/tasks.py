"""Entrypoints used by the integration tests (real Spark code, run by real workers)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


def count(spark: Any, ctx: Any) -> dict[str, Any]:
    """A trivial Spark job: count a small range."""
    n = spark.range(int(ctx.args[0]) if ctx.args else 10).count()
    print(f"counted {n} in task {ctx.task_id}")
    ctx.logger.info("count done")
    return {"count": n, "task": ctx.task_id, "attempt": ctx.attempt, "token": ctx.fencing_token,
            "worker": ctx.worker_id, "inputs": ctx.input_values}


def noop(spark: Any, ctx: Any) -> int:
    """Returns at once without touching Spark (dispatch overhead only)."""
    return ctx.task_index


def fail_first(spark: Any, ctx: Any) -> dict[str, Any]:
    """Fails on attempts below ctx.args[0] (default 2), then succeeds."""
    succeed_at = int(ctx.args[0]) if ctx.args else 2
    if ctx.attempt < succeed_at:
        raise RuntimeError(f"planned failure on attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


def always_fail(spark: Any, ctx: Any) -> None:
    raise ValueError("this task always fails")


def sleep_in_spark(spark: Any, ctx: Any) -> str:
    """Sleeps inside a Spark job for ctx.args[0] seconds (cancellable with the job tag)."""
    seconds = float(ctx.args[0]) if ctx.args else 60.0
    marker = os.environ.get("SPARKYARD_TEST_MARKERS") or (ctx.args[1] if len(ctx.args) > 1 else "")
    if marker:
        Path(marker).mkdir(parents=True, exist_ok=True)
        (Path(marker) / f"{ctx.task_id}.a{ctx.attempt}.started").write_text(json.dumps({"pid": os.getpid()}))

    def nap(_: Any) -> None:
        time.sleep(seconds)

    spark.sparkContext.parallelize([1], 1).foreach(nap)
    return f"slept {seconds}"


def sleep_python(spark: Any, ctx: Any) -> str:
    """Sleeps in Python (not in Spark) in short steps, for ctx.args[0] seconds; writes a marker when started
    and one when done."""
    seconds = float(ctx.args[0]) if ctx.args else 60.0
    print(f"sleeping {seconds:g} s", flush=True)
    if len(ctx.args) > 1:
        Path(ctx.args[1]).mkdir(parents=True, exist_ok=True)
        (Path(ctx.args[1]) / f"{ctx.task_id}.a{ctx.attempt}.started").write_text(str(ctx.fencing_token))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)
    if len(ctx.args) > 1:
        (Path(ctx.args[1]) / f"{ctx.task_id}.a{ctx.attempt}.done").write_text(str(ctx.fencing_token))
    return f"slept {seconds}"


def big_result(spark: Any, ctx: Any) -> str:
    return "x" * (2 * 1024 * 1024)


def exit_hard(spark: Any, ctx: Any) -> None:
    """Ends its process at once, as a crashing native library or a stray os._exit would."""
    os._exit(int(ctx.args[0]) if ctx.args else 3)


def segfault(spark: Any, ctx: Any) -> None:
    """Reads address 0 through ctypes: a real SIGSEGV in the process running the task."""
    import ctypes

    ctypes.string_at(0)


def hog_memory(spark: Any, ctx: Any) -> int:
    """Touches ctx.args[0] MiB of memory and holds it for up to ctx.args[1] seconds."""
    block = b"x" * (int(ctx.args[0]) << 20)
    deadline = time.monotonic() + (float(ctx.args[1]) if len(ctx.args) > 1 else 30.0)
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return len(block)


def sleep_uninterruptibly(spark: Any, ctx: Any) -> str:
    """One long time.sleep: a cancel cannot interrupt it, only killing the process can."""
    if len(ctx.args) > 1:
        Path(ctx.args[1]).mkdir(parents=True, exist_ok=True)
        (Path(ctx.args[1]) / f"{ctx.task_id}.a{ctx.attempt}.started").write_text(str(os.getpid()))
    time.sleep(float(ctx.args[0]) if ctx.args else 3600.0)
    return "woke up"


def driver_pid(spark: Any, ctx: Any) -> int:
    """The pid of the process that runs the task (never the worker's)."""
    return os.getpid()


def sleep_long_then_short(spark: Any, ctx: Any) -> str:
    """Attempt 1 sleeps ctx.args[0] seconds, later attempts ctx.args[1]; writes a start marker in ctx.args[2]."""
    seconds = float(ctx.args[0] if ctx.attempt == 1 else ctx.args[1])
    Path(ctx.args[2]).mkdir(parents=True, exist_ok=True)
    (Path(ctx.args[2]) / f"{ctx.task_id}.a{ctx.attempt}.started").write_text(str(ctx.fencing_token))
    time.sleep(seconds)
    return f"slept {seconds:g}"


def print_until(spark: Any, ctx: Any) -> str:
    """Prints a numbered line every 0.1 s until the file ctx.args[0] exists (at most 120 s): a log to follow."""
    stop = Path(ctx.args[0])
    deadline = time.monotonic() + 120
    n = 0
    while not stop.exists() and time.monotonic() < deadline:
        n += 1
        print(f"tick {n}", flush=True)
        time.sleep(0.1)
    print(f"done after {n} ticks", flush=True)
    return f"{n} ticks"


def scheduled_at(spark: Any, ctx: Any) -> str:
    """Sleeps ctx.args[0] seconds (default 0), then returns the run's scheduled time (what a backfill sets)."""
    time.sleep(float(ctx.args[0]) if ctx.args else 0.0)
    return ctx.scheduled_at.isoformat()


def fail_on(spark: Any, ctx: Any) -> str:
    """Fails on the input ctx.args[0] until the file ctx.args[1] exists (a bug fixed between a run and its
    rerun); returns its input and the run's scheduled time."""
    if ctx.args[0] in ctx.input_values and not Path(ctx.args[1]).exists():
        raise RuntimeError(f"input {ctx.args[0]} is broken")
    return f"{','.join(ctx.input_values)}@{ctx.scheduled_at.isoformat()}"


def sleep_in_udf(spark: Any, ctx: Any) -> int:
    """Sleeps ctx.args[0] seconds inside a Python UDF, on the Spark side (DataFrame API only, so it runs
    under every runner); the UDF writes a marker into the directory ctx.args[1] when it starts."""
    from pyspark.sql.functions import udf

    seconds = float(ctx.args[0])
    marker = Path(ctx.args[1]) / f"{ctx.task_id}.a{ctx.attempt}.started"

    def nap(x: int) -> int:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(str(os.getpid()))
        time.sleep(seconds)
        return x

    return int(spark.range(1).select(udf(nap, "long")("id")).collect()[0][0])
