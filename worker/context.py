"""What a task's code receives: ``main(spark, ctx)`` with ``ctx`` a :class:`TaskContext`.

``ctx.fencing_token`` is there so sinks can be idempotent: a writer that records the token with its
output (or refuses a token lower than the last one it saw) cannot be overwritten by a stale attempt.

A plain script (an entrypoint without ``:function``) gets the same context from
:func:`current_context`; under the submit runner it is also in the environment (``SPARKYARD_TASK`` as
JSON plus the variables :meth:`TaskContext.env` lists, README.md's table) and ``sys.argv[1:]`` holds the
job's args.

``ctx.output(path)`` and ``ctx.commit()`` are fenced output (docs/fenced-output.md): the task writes where
``output`` says, and ``commit`` publishes that to ``path`` only while the attempt's token is current.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sparkyard.timeutil import rfc3339_ms
from sparkyard.worker.fence_desk import ask_worker
from sparkyard.worker.fenced_output import AttemptOutputs

ENV_TASK = "SPARKYARD_TASK"
# The result of a task that called ctx.skip(): {"$skip": reason} (report.lua recognises this prefix).
SKIP_KEY = "$skip"


class StepSkipped(Exception):
    """Raised by ``ctx.skip()``: the task ends SUCCEEDED with the result ``{"$skip": reason}``, and a pipeline
    step all of whose tasks skipped is SKIPPED (its downstream steps decide by their trigger rules)."""


@dataclass(frozen=True)
class Input:
    """One input of the task's slice (opaque to Sparkyard) and its resource mark."""

    value: str
    mark: str = ""


@dataclass(frozen=True)
class TaskContext:
    job_id: str
    run_id: str
    task_id: str
    task_index: int
    task_count: int
    inputs: tuple[Input, ...]
    args: tuple[str, ...]
    attempt: int
    fencing_token: int
    scheduled_at: datetime
    worker_id: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    fence: str = ""  # the address of the worker's fence desk (worker/fence_desk.py)
    upstream: dict[str, Any] = field(default_factory=dict)  # a pipeline step: its upstream steps' results
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("sparkyard.task"), compare=False)
    _outputs: AttemptOutputs = field(default_factory=AttemptOutputs, compare=False, repr=False)

    @property
    def input_values(self) -> list[str]:
        return [i.value for i in self.inputs]

    def output(self, path: str | os.PathLike[str]) -> str:
        """Where to write what ``ctx.commit()`` will publish at ``path`` (a local or POSIX shared filesystem
        path): a directory beside it that does not exist yet, so Spark's default save mode creates it."""
        return self._outputs.output(path, self.fencing_token)

    def commit(self) -> list[str]:
        """Publish every ``output()`` of this attempt atomically to its path, unless a newer attempt of
        the task has begun writing or published it, or the worker or master says this attempt's token
        is no longer current: then :class:`StaleOutput` is raised and nothing is published."""
        return self._outputs.commit(self.fencing_token, self.task_id, self.attempt,
                                    lambda: ask_worker(self.fence, self.task_id, self.fencing_token))

    def skip(self, reason: str = "") -> None:
        """End the task here as skipped (docs/pipelines.md): nothing after this line runs."""
        raise StepSkipped(reason)

    def to_json(self) -> str:
        return json.dumps(self._fields())

    def _fields(self) -> dict[str, Any]:
        # Written out instead of dataclasses.asdict, which deep-copies every field: this runs per attempt.
        return {
            "job_id": self.job_id, "run_id": self.run_id, "task_id": self.task_id, "task_index": self.task_index,
            "task_count": self.task_count, "inputs": [{"value": i.value, "mark": i.mark} for i in self.inputs],
            "args": list(self.args), "attempt": self.attempt, "fencing_token": self.fencing_token,
            "scheduled_at": self.scheduled_at.isoformat(), "worker_id": self.worker_id, "labels": self.labels,
            "fence": self.fence, "upstream": self.upstream,
        }

    @classmethod
    def from_json(cls, text: str, logger: logging.Logger | None = None) -> TaskContext:
        d: dict[str, Any] = json.loads(text)
        return cls(
            job_id=d["job_id"], run_id=d["run_id"], task_id=d["task_id"], task_index=int(d["task_index"]),
            task_count=int(d["task_count"]), inputs=tuple(Input(**i) for i in d.get("inputs", [])),
            args=tuple(d.get("args", [])), attempt=int(d["attempt"]), fencing_token=int(d["fencing_token"]),
            scheduled_at=datetime.fromisoformat(d["scheduled_at"]), worker_id=d.get("worker_id", ""),
            labels=dict(d.get("labels", {})), fence=str(d.get("fence", "")), upstream=dict(d.get("upstream", {})),
            logger=logger or logging.getLogger("sparkyard.task"),
        )

    def env(self) -> dict[str, str]:
        """The context as environment variables (submit runner, plain scripts)."""
        return task_env(self._fields(), round(self.scheduled_at.timestamp() * 1000))


def task_env(fields: dict[str, Any], scheduled_ms: int) -> dict[str, str]:
    """A task's environment variables from the fields of its context's JSON (:meth:`TaskContext.to_json`) and
    its logical time in ms: the worker builds them straight from an assignment (AttemptRun.context_env), with
    no TaskContext made on the way."""
    return {
        ENV_TASK: json.dumps(fields),
        "SPARKYARD_JOB_ID": fields["job_id"],
        "SPARKYARD_RUN_ID": fields["run_id"],
        "SPARKYARD_TASK_ID": fields["task_id"],
        "SPARKYARD_TASK_INDEX": str(fields["task_index"]),
        "SPARKYARD_TASK_COUNT": str(fields["task_count"]),
        "SPARKYARD_ATTEMPT": str(fields["attempt"]),
        "SPARKYARD_FENCING_TOKEN": str(fields["fencing_token"]),
        # The logical time a script's output is about (a cron slot, a backfilled day), not the clock.
        "SPARKYARD_SCHEDULED_AT": rfc3339_ms(scheduled_ms),
    }


_local = threading.local()
# The running attempt's context for every thread of its process (a process runs one attempt at a time):
# threads the task starts find the very object its main thread has, so ctx.output() in one and
# ctx.commit() in another act on the same staged outputs.
_process: TaskContext | None = None


def set_current(ctx: TaskContext | None) -> None:
    """Bind ``ctx`` to the calling thread (the runner's task thread) and to the process."""
    global _process
    _local.ctx = _process = ctx


def current_context() -> TaskContext:
    """The context of the task running in this thread (session runner) or process (submit runner)."""
    ctx = getattr(_local, "ctx", None) or _process
    if ctx is not None:
        return ctx
    text = os.environ.get(ENV_TASK)
    if text:
        ctx = TaskContext.from_json(text)
        set_current(ctx)
        return ctx
    raise RuntimeError("no Sparkyard task is running here (current_context() works inside a task)")


def utc_from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
