"""Entrypoints installed on the worker hosts of tests/cluster (this directory is on their PYTHONPATH).

Submitted as ``cluster_jobs:FUNC``: the client needs no file of its own, and the workers, which cannot see
the client's submit directory, import it from here.
"""

from __future__ import annotations

import json
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


def ledger(spark: Any, ctx: Any) -> dict[str, Any]:
    """Records this execution in the ledger file ``ctx.args[0]``, independently of the scheduler: a ``start``
    line, a ``beat`` line every 0.1 s while it works for ``ctx.args[1]`` seconds, an ``end`` line. An optional
    ``ctx.args[2]`` ``WORKER=SECONDS`` makes a first attempt on that worker work that long instead (the one a
    test cuts off).

    The fault suite's checker (tests/cluster/ledger.py) reads it to see what really ran, when and under which
    fencing token, whatever the scheduler recorded. Every line is one ``os.write`` to a file opened with
    O_APPEND, so lines of attempts on different hosts never interleave."""
    path, seconds = ctx.args[0], float(ctx.args[1])
    if len(ctx.args) > 2:
        victim, _, held = ctx.args[2].partition("=")
        if ctx.worker_id == victim and ctx.attempt == 1:
            seconds = float(held)
    scheduled_ms = int(ctx.scheduled_at.timestamp() * 1000)

    def note(event: str) -> None:
        line = json.dumps({"event": event, "job": ctx.job_id, "run": ctx.run_id, "task": ctx.task_id,
                           "token": ctx.fencing_token, "worker": ctx.worker_id, "scheduled_ms": scheduled_ms,
                           "at": time.time()})
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    note("start")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        note("beat")
    note("end")
    return {"worker": ctx.worker_id, "task": ctx.task_index, "token": ctx.fencing_token}
