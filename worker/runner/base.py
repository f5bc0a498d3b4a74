"""What a runner is: something that executes one attempt of a task as Spark work and can kill it.

The worker owns the attempt's life (lease, timeout, cancel, self-fencing) and places it (its bundle, working
directory and paths: :class:`Workspace`); a runner only executes and, when :meth:`Runner.kill` is called
(the :class:`Kill` already recorded on the attempt), stops the work as fast as its medium allows — a process group for ``submit``, a cancel to the
warm driver and then its process group for ``session``. Neither runs task code in the worker's process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from sparkyard.timeutil import logical_args
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.context import Input, TaskContext, task_env, utc_from_ms
from sparkyard.worker.logs import parse_range
from sparkyard.worker.workspace import Workspace


# Lines of a log quoted in an attempt's error when its driver or spark-submit died or never started.
ERROR_TAIL_LINES = 20


def _read_tail(path: str, most: int, since: int = 0, until: int | None = None) -> str:
    """The last ``most`` bytes of a file written from offset ``since`` on, up to ``until`` (None: its end;
    '' if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END) if until is None else until
            f.seek(max(since, end - most))
            return f.read(max(0, end - f.tell())).decode(errors="replace")
    except OSError:
        return ""


def log_tail(log_path: str, lines: int) -> str:
    """The last ``lines`` lines of an attempt's log — a file, or its range of one (worker/logs.py) — ('' if it
    cannot be read)."""
    path, start, end = parse_range(log_path)
    return "\n".join(_read_tail(path, 16384, start, end).splitlines()[-lines:])


# A JVM's own reason in a log: the message of its last exception (``java.lang.RuntimeException: [unresolved
# dependency: …]``, ``Exception in thread "main" …``).
_JVM_REASON = re.compile(r"^(Exception in thread \S+ )?((java|javax|scala|org|com|io)\.[\w.$]+(Exception|Error)(: .*)?)$")


def jvm_reason(path: str, since: int = 0) -> str:
    """The last JVM exception line of a log written from offset ``since`` on ('' if none): what a driver
    whose Java gateway exited before it could answer died of (its Python side only says that it exited)."""
    for line in reversed(_read_tail(path, 65536, since).splitlines()):
        found = _JVM_REASON.match(line.strip())
        if found:
            return found.group(2)[:500]
    return ""


@dataclass
class Outcome:
    """How an attempt ended, as the runner saw it."""

    state: str  # SUCCEEDED | FAILED (the slots turn kills into TIMED_OUT / CANCELLED / RELEASED)
    result_json: str = ""
    error: str = ""
    traceback: str = ""
    # The task's code never ran: a write its start needs was refused for want of space (worker/disk.py). The
    # slots hand it back (RELEASED, no attempt used up) instead of failing it.
    no_space: OSError | None = None

    @classmethod
    def failure(cls, exc: BaseException, prefix: str = "") -> Outcome:
        message = f"{prefix}{type(exc).__name__}: {exc}"
        return cls("FAILED", error=message.splitlines()[0] if message else type(exc).__name__,
                   traceback="".join(traceback.format_exception(exc)))


@dataclass(frozen=True)
class Kill:
    """Why an attempt is being stopped: recorded once, on its :class:`AttemptRun`, where the worker's slots
    (which report it) and the runner (which stops the work) both read it."""

    kind: str  # timeout | cancel | release | lost | fence
    reason: str


@dataclass(eq=False)
class AttemptRun:
    """One attempt as a runner sees it."""

    assignment: pb.TaskAssignment
    worker_id: str
    # Plain text, not a Path: thousands of attempts a second each build one. A warm driver's attempt gets its
    # range of the driver's log file when it is handed to the driver (worker/logs.py).
    log_path: str
    attempts_dir: str  # parent of every attempt's scratch directory (see work_dir)
    result_max_bytes: int
    workspace: Workspace
    fence: str = ""  # the worker's fence desk (worker/fence_desk.py), for fenced output
    killed: Kill | None = None  # set once, by the slots, before they ask the runner to stop the work

    @property
    def kill_reason(self) -> str:
        return self.killed.reason if self.killed is not None else ""

    @property
    def work_dir(self) -> Path:
        """Scratch space of the attempt, created by the runner that needs one (the submit runner)."""
        return Path(self.attempts_dir, self.assignment.task_id, f"a{self.assignment.attempt}")

    @property
    def tag(self) -> str:
        """A Spark job tag / app name unique to this attempt."""
        return f"sparkyard-{self.assignment.task_id}-a{self.assignment.attempt}"

    def context_env(self) -> dict[str, str]:
        """``context().env()``, built straight from the assignment: a warm driver's attempt costs the worker
        ~a third of the time (no TaskContext, one datetime)."""
        a = self.assignment
        ms = a.scheduled_at.ToMilliseconds()
        return task_env({
            "job_id": a.job_id, "run_id": a.run_id, "task_id": a.task_id, "task_index": a.index,
            "task_count": a.task_count, "inputs": [{"value": i.value, "mark": i.mark} for i in a.inputs],
            "args": logical_args(a.spec.args, ms) if a.spec.pipeline else list(a.spec.args), "attempt": a.attempt,
            "fencing_token": a.fencing_token, "scheduled_at": utc_from_ms(ms).isoformat(), "worker_id": self.worker_id,
            "labels": dict(a.spec.labels), "fence": self.fence,
            "upstream": json.loads(a.upstream_json) if a.upstream_json else {},
        }, ms)

    def context(self, logger: logging.Logger | None = None) -> TaskContext:
        a = self.assignment
        # A pipeline's step sees the run's logical date in its args ({ds}, docs/pipelines.md).
        args = logical_args(a.spec.args, a.scheduled_at.ToMilliseconds()) if a.spec.pipeline else a.spec.args
        return TaskContext(
            job_id=a.job_id, run_id=a.run_id, task_id=a.task_id, task_index=a.index, task_count=a.task_count,
            inputs=tuple(Input(i.value, i.mark) for i in a.inputs), args=tuple(args), attempt=a.attempt,
            fencing_token=a.fencing_token, scheduled_at=utc_from_ms(a.scheduled_at.ToMilliseconds()),
            worker_id=self.worker_id, labels=dict(a.spec.labels), fence=self.fence,
            upstream=json.loads(a.upstream_json) if a.upstream_json else {},
            logger=logger or logging.getLogger("sparkyard.task"),
        )


class Runner(Protocol):
    name: str

    async def start(self) -> None:
        """Get ready to run tasks (the session runner starts warming its drivers here)."""
        ...

    def readiness(self) -> tuple[int, str, int]:
        """(pb.Readiness, reason, slots that can take an attempt now)."""
        ...

    def begin(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        """Begin the attempt; ``done`` is called once, on the event loop, with its outcome."""
        ...

    def kill(self, attempt: AttemptRun) -> None:
        """Stop the work of an attempt begun here (``attempt.killed`` says why) and report it FAILED through
        its ``done``; an attempt that already ended is left alone."""
        ...

    def engine_changed(self, problem: str) -> None:
        """The worker's Spark cluster manager stopped answering (``problem`` says why) or answers again ('').
        The worker has already handed back every attempt it held; the runner drops what is bound to the old
        application and starts afresh once the manager is back (worker/engine.py)."""
        ...

    async def close(self) -> None:
        ...
