"""A job's Spark resources: spark-submit's ``--driver-memory``, ``--executor-memory``, ``--executor-cores``
and ``--num-executors``, kept in the job spec under the same names.

They are the application's size, fixed when its SparkContext starts. The submit runner starts one
application per attempt and hands them to ``spark-submit`` as they are. The session runner gives them to
its drivers as the Spark conf keys spark-submit sets for them (:func:`spark_conf`): a warm driver started
with other sizes refuses the attempt and a fresh driver started with them runs it (worker/warm_conf.py).
The connect runner's server started its application before any attempt came, so it can honour none of
them; rather than drop them silently, it writes :func:`shared_app_notice` into the attempt's log and the
CLI prints it at submit. Sizes are checked here, where the client and the master both look, so a typo is
refused when the job is submitted, not when Spark first reads it on a worker.
"""

from __future__ import annotations

import re

from sparkyard.errors import quote
from sparkyard.runners import runner_name
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
# Spec field → the Spark conf key spark-submit sets for that option.
CONF_KEYS = {"driver_memory": "spark.driver.memory", "executor_memory": "spark.executor.memory",
             "executor_cores": "spark.executor.cores", "num_executors": "spark.executor.instances"}
# The cluster managers spark-submit gives each option to (its OptionAssigner table; None: every one); the
# others it ignores (local mode has no executors of their own to size).
_MANAGERS: dict[str, tuple[str, ...] | None] = {
    "driver_memory": None, "executor_memory": ("standalone", "yarn", "k8s"),
    "executor_cores": ("standalone", "yarn", "k8s"), "num_executors": ("yarn", "k8s")}
# The runners whose attempts share a Spark application started before them: what holds it, and why it cannot
# take a job's driver memory and its executor sizes.
_SHARED_APP = {
    "connect": ("its attempts share the Spark Connect server's application", "the server's JVM is already running",
                "the server's application asked for its executors when it started"),
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


def _cluster_manager(master: str) -> str:
    for prefix, manager in (("local", "local"), ("spark://", "standalone"), ("yarn", "yarn"), ("k8s://", "k8s")):
        if master.startswith(prefix):
            return manager
    return "other"


def spark_conf(spec: pb.JobSpec, master: str) -> dict[str, str]:
    """The job's Spark conf as spark-submit's line gives it to an application on ``master``: its ``--conf``,
    then those of its resources that spark-submit passes to that cluster manager, under their conf keys,
    winning over the same keys given with ``--conf`` (as spark-submit's options do)."""
    manager = _cluster_manager(master)
    sizes = {CONF_KEYS[name]: str(getattr(spec, name)) for name, managers in _MANAGERS.items()
             if getattr(spec, name) and (managers is None or manager in managers)}
    return {**dict(spec.conf), **sizes}


def submit_args(spec: pb.JobSpec) -> list[str]:
    """The spark-submit arguments that apply the job's resources."""
    return [arg for flag, value in given(spec).items() for arg in (flag, value)]


# The spec fields submit_notice reads (a client that asks for part of a submitted job asks for these).
NOTICE_FIELDS = ("runner", *FLAGS)


def submit_notice(spec: pb.JobSpec) -> str:
    """What a user is told when a stored job names a runner with a shared application and sets resources
    ('' if nothing)."""
    runner = runner_name(spec.runner)
    return shared_app_notice(spec, runner) if runner in _SHARED_APP else ""


def shared_app_notice(spec: pb.JobSpec, runner: str) -> str:
    """Which of the job's resources ``runner`` (connect, whose attempts share an application started
    before them) cannot honour, and why ('' if the job sets none)."""
    names = [name for name in FLAGS if getattr(spec, name)]
    if not names:
        return ""
    holder, driver_reason, executor_reason = _SHARED_APP[runner]
    said = "; ".join(f"{FLAGS[n]} {getattr(spec, n)} ({driver_reason if n == 'driver_memory' else executor_reason})"
                     for n in names)
    return (f"the {runner} runner cannot honour {said}: {holder}, sized by the worker's --conf; use --runner "
            "submit to give this job an application of its own")
