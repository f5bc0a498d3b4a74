"""A job's Spark resources: spark-submit's ``--driver-memory``, ``--executor-memory``, ``--executor-cores``
and ``--num-executors``, kept in the job spec under the same names.

They are the application's size, fixed when its SparkContext starts. The submit runner starts one
application per attempt and hands them to ``spark-submit`` as they are; a warm driver of the session
runner started its application before any attempt came, so it can honour none of them. Rather than drop
them silently, the session runner writes :func:`warm_driver_notice` into the attempt's log and the CLI
prints it at submit. Sizes are checked here, where the client and the master both look, so a typo is
refused when the job is submitted, not when Spark first reads it on a worker.
"""

from __future__ import annotations

import re

from sparkyard.errors import quote
from sparkyard.v1 import sparkyard_pb2 as pb

# spark-submit's memory syntax (JavaUtils.byteStringAs): a whole number and an optional unit; no unit is MiB.
SIZE = re.compile(r"[0-9]+([kmgtp]b?)?", re.IGNORECASE)
MAX_SIZE_LENGTH = 20
# Bounds of the counts: a typo of several digits is refused, any real cluster fits.
MAX_EXECUTOR_CORES = 1024
MAX_NUM_EXECUTORS = 100_000

# Spec field → spark-submit option, in the order spark-submit's help lists them.
FLAGS = {"driver_memory": "--driver-memory", "executor_memory": "--executor-memory",
         "executor_cores": "--executor-cores", "num_executors": "--num-executors"}
# Why a warm driver cannot apply each of them.
_WARM_REASONS = {
    "driver_memory": "the driver's JVM is already running",
    "executor_memory": "the driver's application asked for its executors when it started",
    "executor_cores": "the driver's application asked for its executors when it started",
    "num_executors": "the driver's application asked for its executors when it started",
}


def size_problem(value: str) -> str:
    """What is wrong with a spark-submit memory size ('' for nothing, and for no size)."""
    if not value:
        return ""
    if len(value) > MAX_SIZE_LENGTH or not SIZE.fullmatch(value):
        return f"{quote(value)} is not a size like 512m or 2g (a whole number, then k, m, g, t or p)"
    return ""


def check(spec: pb.JobSpec) -> tuple[str, str]:
    """The first bad resource field of ``spec`` and what is wrong with it; ('', '') when all are fine."""
    for name in ("driver_memory", "executor_memory"):
        problem = size_problem(getattr(spec, name))
        if problem:
            return name, problem
    for name, most in (("executor_cores", MAX_EXECUTOR_CORES), ("num_executors", MAX_NUM_EXECUTORS)):
        value = getattr(spec, name)
        if not 0 <= value <= most:
            return name, f"{value} is outside 0..{most} (0: Spark's default)"
    return "", ""


def given(spec: pb.JobSpec) -> dict[str, str]:
    """The resources the job sets, as spark-submit option → value."""
    return {flag: str(getattr(spec, name)) for name, flag in FLAGS.items() if getattr(spec, name)}


def submit_args(spec: pb.JobSpec) -> list[str]:
    """The spark-submit arguments that apply the job's resources."""
    return [arg for flag, value in given(spec).items() for arg in (flag, value)]


def submit_notice(spec: pb.JobSpec) -> str:
    """What a user is told when a stored job names the session runner and sets resources ('' if nothing)."""
    return warm_driver_notice(spec) if spec.runner == pb.RUNNER_SESSION else ""


def warm_driver_notice(spec: pb.JobSpec) -> str:
    """Which of the job's resources a warm driver (the session runner) cannot honour, and why ('' if none)."""
    names = [name for name in FLAGS if getattr(spec, name)]
    if not names:
        return ""
    said = "; ".join(f"{FLAGS[n]} {getattr(spec, n)} ({_WARM_REASONS[n]})" for n in names)
    return (f"the session runner cannot honour {said}: its warm drivers share one Spark application sized by the "
            "worker's --conf; use --runner submit to give this job an application of its own")
