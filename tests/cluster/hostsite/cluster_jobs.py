"""Entrypoints installed on the worker hosts of tests/cluster (this directory is on their PYTHONPATH).

Submitted as ``cluster_jobs:FUNC``: the client needs no file of its own, and the workers, which cannot see
the client's submit directory, import it from here.
"""

from __future__ import annotations

import os
import time
from typing import Any


def whoami(spark: Any, ctx: Any) -> dict[str, Any]:
    """A small Spark job; returns which worker ran which task."""
    n = spark.range(10).count()
    print(f"task {ctx.task_index} counted {n} on worker {ctx.worker_id}", flush=True)
    return {"worker": ctx.worker_id, "task": ctx.task_index, "attempt": ctx.attempt, "count": n}


def path_exists(spark: Any, ctx: Any) -> dict[str, Any]:
    """Whether the worker sees ``ctx.args[0]`` (a path on the client host)."""
    return {"worker": ctx.worker_id, "exists": os.path.exists(ctx.args[0]), "cwd": os.getcwd()}


def hold_on(spark: Any, ctx: Any) -> dict[str, Any]:
    """On worker ``ctx.args[0]``, a first attempt holds for ``ctx.args[1]`` seconds; everything else returns
    at once. Sleeps in short steps so a cancel or self-fencing interrupts it promptly."""
    victim, seconds = ctx.args[0], float(ctx.args[1])
    if ctx.worker_id == victim and ctx.attempt == 1:
        print(f"holding for {seconds:g} s", flush=True)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
    return {"worker": ctx.worker_id, "task": ctx.task_index, "attempt": ctx.attempt}
