"""The fault suite's checker: what really ran (the ledger job's file) against what the scheduler recorded.

The ledger job (``cluster_jobs:ledger``, tests/cluster/hostsite) appends a line per event of each execution
— start, a beat every 0.1 s, end — to a file every host can write, whatever happens to the scheduler. A
fault test runs its load through it, then :func:`check` asserts the suite's four invariants:

* **0 lost runs**: every run of a job ended SUCCEEDED, each of its tasks has an ended execution in the
  ledger, and a recurring job's scheduled times have no gap (the suite's jobs use ``--misfire catch-up``) —
  except a run fired ahead of its time (the master's ``--fire-ahead``) that a pause of its job cancelled
  before it (the tests pause their jobs to end the load): withdrawn, no execution of it in the ledger;
* **0 duplicate firings**: a (job, scheduled time) has one run, in the scheduler and in the ledger;
* **0 tasks succeeded twice**: a task has at most one SUCCEEDED attempt, and the ledger has an ended
  execution under that attempt's fencing token (a success nobody ran would be a lie);
* **0 attempts running at once** for one task: the executions of a task, under different tokens, do not
  overlap (a worker cut off past its lease must have stopped — self-fenced — before the re-run started).
  The beats give each execution's last sign of life, to 0.1 s.

**No wall clock is compared across hosts.** Each line carries the writing host's ``time.time()`` (``at``),
but hosts' clocks differ (the soak skews a worker's by ±30 s). Every order the checker relies on is the
order of the lines in the file: each line is one ``write`` to a file opened with O_APPEND, which the kernel
that holds the file appends atomically, one after the other — the file's own receive order, a clock common
to every host. Two executions overlap when the later one's start line comes before the earlier one's last
line. ``at`` serves only the figures a test on unskewed hosts prints (how long after a cut an attempt
stopped). Scheduled times (``scheduled_ms``) are the master's, carried in the task's context.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from sparkyard import errors
from sparkyard.client import Client
from sparkyard.master.jobs import PAUSED_BEFORE_ITS_TIME
from sparkyard.v1 import sparkyard_pb2 as pb


# The invariants, as the soak's report counts their violations (tests/soak).
KINDS = ("lost firing", "duplicate firing", "task succeeded twice", "success nobody ran", "overlapping executions",
         "run not ended")


@dataclass
class Execution:
    """One attempt as the ledger saw it: from its start line to its last line."""

    job: str
    run: str
    task: str
    token: int
    worker: str
    scheduled_ms: int
    started: float  # the writing host's wall clock (figures only: hosts' clocks differ)
    last: float
    first_line: int  # the position of its start line in the file: the order every check uses
    last_line: int  # that of its last line (its last sign of life)
    ended: bool = False


@dataclass
class Findings:
    """The figures a fault test prints, and the violations :func:`check` fails on."""

    executions: int = 0
    runs: int = 0
    tasks: int = 0
    reruns: int = 0  # tasks executed under more than one token
    withdrawn: int = 0  # runs fired ahead of their time whose job was paused before it (cancelled, never run)
    violations: list[str] = field(default_factory=list)
    by_kind: Counter[str] = field(default_factory=Counter)  # violations by KINDS entry

    def add(self, kind: str, message: str) -> None:
        """A violation of ``kind`` (one of KINDS, or of a checker built on this one: tests/soak/verdict.py)."""
        self.by_kind[kind] += 1
        self.violations.append(message)

    def summary(self) -> str:
        return (f"ledger: {self.runs} runs, {self.tasks} tasks, {self.executions} executions, {self.reruns} re-run, "
                f"{self.withdrawn} withdrawn by a pause; {len(self.violations)} violations")


def read(path: Path) -> list[Execution]:
    """The executions recorded in the ledger file, in the order their first lines were appended."""
    executions: dict[int, Execution] = {}
    if not path.exists():
        return []
    for number, line in enumerate(path.read_text().splitlines()):
        e = json.loads(line)
        token = int(e["token"])
        ex = executions.get(token)
        if ex is None:
            ex = executions[token] = Execution(e["job"], e["run"], e["task"], token, e["worker"],
                                               int(e["scheduled_ms"]), e["at"], e["at"], number, number)
        ex.last, ex.last_line = e["at"], number
        ex.ended = ex.ended or e["event"] == "end"
    return list(executions.values())


def check(ledger: Path, client: Client, job_ids: list[str], *, period_ms: dict[str, int] | None = None) -> Findings:
    """The four invariants over ``job_ids`` (every run of them must have ended); ``period_ms``: the recurring
    jobs among them and their period, whose scheduled times must have no gap. Raises AssertionError naming
    every violation; returns the figures."""
    found = audit(ledger, client, job_ids, period_ms=period_ms)
    if found.violations:
        raise AssertionError(f"{found.summary()}:\n" + "\n".join(found.violations))
    return found


def audit(ledger: Path, client: Client, job_ids: list[str], *, period_ms: dict[str, int] | None = None) -> Findings:
    """:func:`check`'s findings, violations included, without raising."""
    found = Findings()
    executions = read(ledger)
    found.executions = len(executions)
    by_task: dict[str, list[Execution]] = defaultdict(list)
    for ex in executions:
        by_task[ex.task].append(ex)
    # The ledger: one run per (job, scheduled time); no two executions of a task at once.
    firings: dict[tuple[str, int], set[str]] = defaultdict(set)
    for ex in executions:
        firings[(ex.job, ex.scheduled_ms)].add(ex.run)
    for (job, ms), runs in firings.items():
        if len(runs) > 1:
            found.add("duplicate firing", f"duplicate firing in the ledger: job {job} at {ms} ran as {sorted(runs)}")
    for task, exs in by_task.items():
        found.reruns += len(exs) > 1
        for a, b in zip(exs, exs[1:]):
            if b.first_line < a.last_line:
                found.add("overlapping executions",
                          f"task {task} ran twice at once: token {b.token} on {b.worker} started (ledger line "
                          f"{b.first_line}) before token {a.token} on {a.worker} wrote its last line ({a.last_line})")
    # The scheduler, against the ledger.
    for job_id in job_ids:
        try:
            runs = client.runs(job_id, limit=100_000, with_tasks=True)
        except errors.NotFound:
            found.add("lost firing", f"job {job_id}: the scheduler has no such job any more")
            continue
        scheduled = sorted(r.scheduled_at.ToMilliseconds() for r in runs)
        for ms in sorted({ms for job, ms in firings if job == job_id} - set(scheduled)):
            found.add("lost firing", f"job {job_id}: the firing at {ms} ran (in the ledger), the scheduler has no run")
        if len(scheduled) != len(set(scheduled)):
            found.add("duplicate firing", f"duplicate firing in the scheduler: job {job_id}: {scheduled}")
        period = (period_ms or {}).get(job_id)
        if period:
            gaps = [(a, b) for a, b in zip(scheduled, scheduled[1:]) if b - a != period]
            for a, b in gaps:
                found.add("lost firing", f"job {job_id}: scheduled times {a} → {b}, not {period} ms apart")
        for run in runs:
            found.runs += 1
            if (run.state == pb.RUN_CANCELLED and run.reason == PAUSED_BEFORE_ITS_TIME
                    and not any(by_task.get(task.id) for task in run.tasks)):
                found.withdrawn += 1  # fired ahead of its time, then the job paused before it: not a firing
                continue
            if run.state != pb.RUN_SUCCEEDED:
                kind = "run not ended" if run.state in (pb.RUN_SCHEDULED, pb.RUN_RUNNING) else "lost firing"
                found.add(kind, f"run {run.id}: {pb.RunState.Name(run.state)} ({run.reason}), not SUCCEEDED")
            for task in run.tasks:
                found.tasks += 1
                _check_task(task, by_task.get(task.id, []), found)
    return found


def _check_task(task: pb.Task, exs: list[Execution], found: Findings) -> None:
    succeeded = [a for a in task.attempts if a.state == pb.ATTEMPT_SUCCEEDED]
    if len(succeeded) > 1:
        found.add("task succeeded twice",
                  f"task {task.id} succeeded {len(succeeded)} times: tokens {[a.fencing_token for a in succeeded]}")
    for attempt in succeeded:
        if not any(ex.token == attempt.fencing_token and ex.ended for ex in exs):
            found.add("success nobody ran", f"task {task.id}: attempt {attempt.number} (token {attempt.fencing_token}) "
                                            "is SUCCEEDED but the ledger has no ended execution under that token")
    if not any(ex.ended for ex in exs):
        found.add("lost firing", f"task {task.id} ({pb.TaskState.Name(task.state)}) never ran to its end (lost)")
