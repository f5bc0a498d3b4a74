"""Entrypoints used by the integration tests (real Spark code, run by real workers)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from sparkyard.worker.fenced_output import OutputError, StaleOutput


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


def fail_first_when(spark: Any, ctx: Any) -> dict[str, Any]:
    """Attempt 1 waits for the file ctx.args[0] (at most 120 s), then fails; later attempts succeed at once."""
    if ctx.attempt == 1:
        gate = Path(ctx.args[0])
        deadline = time.monotonic() + 120
        print(f"waiting for {gate}", flush=True)
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError("planned failure on attempt 1")
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


def _publish_marker(path: Path, text: str) -> None:
    """Write a marker a test polls for whole (a reader never sees it half written)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def fenced_write(spark: Any, ctx: Any) -> str:
    """Writes its token with Spark into ctx.output(args[1]) and commits; the first attempt waits for
    <args[0]>/go before it commits (a test pauses it there). Each attempt records how its commit (and what
    Spark reads back from the final path), and a second commit, went in <args[0]>/outcome.a<attempt>."""
    shared, final = Path(ctx.args[0]), ctx.args[1]
    staging = ctx.output(final)
    spark.createDataFrame([(ctx.fencing_token, ctx.attempt)], "token long, attempt int").coalesce(1).write.json(staging)
    _publish_marker(shared / f"staged.a{ctx.attempt}", str(os.getpid()))
    while ctx.attempt == 1 and not (shared / "go").exists():
        time.sleep(0.05)
    try:
        ctx.commit()
        (row,) = spark.read.json(final).collect()  # readers read the final path: a link to the version
        outcome = f"committed; read back token {row['token']}"
    except StaleOutput as exc:
        outcome = f"refused: {exc}"
    try:
        ctx.commit()
    except OutputError as exc:
        outcome += f"\nagain: {exc}"
    _publish_marker(shared / f"outcome.a{ctx.attempt}", outcome)
    return outcome


def ask_fence(spark: Any, ctx: Any) -> dict[str, float]:
    """Asks the worker's fence desk ctx.args[0] times whether this attempt's token is current (the
    confirmation ctx.commit() waits for: task → worker → master → Redis); p50 and p99 in ms."""
    from sparkyard.worker.fence_desk import ask_worker

    times = []
    for _ in range(int(ctx.args[0])):
        started = time.perf_counter()
        current, reason = ask_worker(ctx.fence, ctx.task_id, ctx.fencing_token)
        times.append((time.perf_counter() - started) * 1000)
        if not current:
            raise RuntimeError(f"the worker says the token is not current: {reason}")
    times.sort()
    return {"p50_ms": times[len(times) // 2], "p99_ms": times[int(len(times) * 0.99) - 1]}


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


def gated_spark_job(spark: Any, ctx: Any) -> str:
    """Once the file ctx.args[0] exists, returns at once on the driver; before that runs a Spark job whose
    Python UDF waits up to 300 s for it (on a cluster without workers: waits for an executor that never
    comes). Returns the attempt that got through."""
    from pyspark.sql.functions import udf

    gate = Path(ctx.args[0])

    def wait(x: int) -> int:
        deadline = time.monotonic() + 300
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        return x

    if not gate.exists():
        spark.range(1).select(udf(wait, "long")("id")).collect()
    return f"through on attempt {ctx.attempt}"


def echo_args(spark: Any, ctx: Any) -> list[str]:
    """Returns its args as the task saw them (a pipeline step's {ds} filled in)."""
    return list(ctx.args)


def upstream_echo(spark: Any, ctx: Any) -> dict[str, Any]:
    """Returns what a pipeline step got from its upstream steps (ctx.upstream)."""
    return dict(ctx.upstream)


def skip_step(spark: Any, ctx: Any) -> None:
    """Skips itself (a pipeline step with nothing to do)."""
    ctx.skip("nothing new")
    raise AssertionError("ctx.skip() returned")


def jvm_class_archive(spark: Any, ctx: Any) -> dict[str, Any]:
    """What the driver's JVM was started with and which class archives (.jsa) it has mapped: its Java options as
    Spark has them, the system property ``sparkyard.mine`` (a job's own option), the archives in its maps."""
    from pyspark import SparkContext

    gateway = getattr(SparkContext._gateway, "proc", None)  # a warm driver's JVM (spark-submit execs it)
    jvm_pid = gateway.pid if gateway is not None else os.getppid()  # under spark-submit the JVM started Python
    with open(f"/proc/{jvm_pid}/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")})
    return {"driver": os.getpid(), "jvm": jvm_pid, "mapped": mapped,
            "options": spark.sparkContext.getConf().get("spark.driver.extraJavaOptions", ""),
            "mine": spark.sparkContext._jvm.System.getProperty("sparkyard.mine")}
