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
    _record(ctx, path, seconds)
    return {"worker": ctx.worker_id, "task": ctx.task_index, "token": ctx.fencing_token}


def _record(ctx: Any, path: str, seconds: float) -> None:
    """The ledger lines of one execution (see :func:`ledger`)."""
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


def flaky_ledger(spark: Any, ctx: Any) -> dict[str, Any]:
    """:func:`ledger` (args: the file, seconds), whose first attempt fails once it has run: a task that
    succeeds only on a retry (the soak's retried failing tasks)."""
    _record(ctx, ctx.args[0], float(ctx.args[1]))
    if ctx.attempt == 1:
        raise RuntimeError("the first attempt fails on purpose (a retried failing task)")
    return {"worker": ctx.worker_id, "token": ctx.fencing_token}


def fenced_ledger(spark: Any, ctx: Any) -> dict[str, Any]:
    """:func:`ledger` (args: the file, seconds), then its token written as fenced output at ``ctx.args[2]``
    and committed (docs/fenced-output.md): the soak checks the published record is the token of the task's
    SUCCEEDED attempt, never a stale one's."""
    staging = ctx.output(ctx.args[2])
    os.makedirs(staging)
    with open(os.path.join(staging, "token.json"), "w") as f:
        json.dump({"token": ctx.fencing_token, "attempt": ctx.attempt}, f)
    _record(ctx, ctx.args[0], float(ctx.args[1]))
    ctx.commit()
    return {"worker": ctx.worker_id, "token": ctx.fencing_token}
