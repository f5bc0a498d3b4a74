"""How the CLI prints: JSON for machines (``--json``), rich tables for people.

The JSON is :func:`sparkyard.protojson.to_dict`'s, the same the master's console and webhooks give. rich is
imported by the functions that draw (a command with ``--json`` does not wait for it).
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from sparkyard.protojson import enum_name
from sparkyard.timeutil import format_duration, rfc3339_ms
from sparkyard.v1 import sparkyard_pb2 as pb

if TYPE_CHECKING:
    from google.protobuf.message import Message
    from rich.console import Console
    from rich.table import Table


def plural(n: int, word: str) -> str:
    """``1 task``, ``2 tasks``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# JobSpec field paths an update names, as a person calls them.
_FIELD_WORDS = {"trigger.kind": "trigger", "code": "code (entrypoint, py-files, files, bundle)"}


def field_words(fields: Sequence[str]) -> str:
    return ", ".join(_FIELD_WORDS.get(f, f.replace("_", "-")) for f in fields)


def console() -> Console:
    """A console for tables: wide enough for full ids when the output is a pipe or a file."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=240)


def _table(id_column: str, *columns: str) -> Table:
    from rich.table import Table

    table = Table()
    table.add_column(id_column, no_wrap=True)
    for column in columns:
        table.add_column(column)
    return table


def print_json(data: Any) -> None:
    """Indented for a person at a terminal; one line for a pipe or a file, where a program reads it: Python's
    encoder with ``indent`` is its pure-Python one, 5-7x slower than the C one (0.1-0.2 s of a 2,000-task
    ``submit --wait --json``, docs/benchmarks.md), and a long-running command's JSON (``local --json``) is then
    read as one line."""
    if sys.stdout.isatty():
        print(json.dumps(data, indent=2))
    else:
        print(json.dumps(data, separators=(",", ":")))


def _ts(message: Message, field: str) -> str:
    ts = getattr(message, field)
    return rfc3339_ms(ts.ToMilliseconds()) if message.HasField(field) else "-"


def _elapsed(message: Message, start: str, end: str) -> str:
    if not (message.HasField(start) and message.HasField(end)):
        return "-"
    return format_duration((getattr(message, end).ToMilliseconds() - getattr(message, start).ToMilliseconds()) / 1000)


def _state(message: Message) -> str:
    return enum_name(message.DESCRIPTOR.fields_by_name["state"], getattr(message, "state"))


def job_state(job: Any) -> str:
    """A job's state as a person reads it, as the console shows it: a COMPLETED job (it fires no more) whose
    last run FAILED is FAILED; a one-shot job whose only run failed did not complete anything."""
    if job.state == pb.JOB_COMPLETED and job.last_run_state == pb.RUN_FAILED:
        return "FAILED"
    return _state(job)


def after_when(when: int) -> str:
    """``succeeded`` / ``failed`` / ``always``: a child job's condition as --after says it."""
    return pb.AfterWhen.Name(when or pb.AFTER_SUCCEEDED).removeprefix("AFTER_").lower()


def jobs_table(console: Console, jobs: Sequence[Any]) -> None:
    table = _table("job", "name", "state", "trigger", "group", "prio", "runs", "next fire")
    for job in jobs:
        trig = job.spec.trigger
        kind = trig.WhichOneof("kind") or "now"
        detail = {"cron": lambda: f"cron {trig.cron.expr}" + (f" {trig.cron.tz}" if trig.cron.tz else ""),
                  "every": lambda: f"every {format_duration(trig.every.interval.ToMilliseconds() / 1000)}"
                                   + (" fixed-delay" if trig.every.fixed_delay else ""),
                  "delay": lambda: f"delay {format_duration(trig.delay.ToMilliseconds() / 1000)}",
                  "at": lambda: f"at {_ts(trig, 'at')}",
                  "after": lambda: f"after {trig.after.job_id}:{after_when(trig.after.when)}"}.get(kind, lambda: kind)()
        name = f"{job.spec.name} (pipeline, {len(job.spec.steps)} steps)" if job.spec.steps else job.spec.name
        table.add_row(job.id, name, job_state(job), detail, job.spec.group, str(job.spec.priority),
                      str(job.runs), _ts(job, "next_fire_at"))
    console.print(table)


def pipeline_graph(console: Console, job: Any) -> None:
    """A pipeline's steps in definition order: what each waits for, its rule, what it runs."""
    table = _table("step", "after", "rule", "entrypoint", "step job")
    for step in job.spec.steps:
        rule = pb.TriggerRule.Name(step.trigger_rule or pb.ALL_SUCCEEDED).lower()
        table.add_row(step.name, ", ".join(step.after) or "-", rule, step.spec.entrypoint, step.job_id)
    console.print(table)


def runs_table(console: Console, runs: Sequence[Any]) -> None:
    table = _table("run", "state", "scheduled", "late", "took", "tasks ok/failed/cancelled", "reason")
    for run in runs:
        # Late: from the scheduled time to the start (the firing, then the wait for a slot or a warm driver),
        # or to the firing while it has not started. A rerun keeps its original's scheduled time, a backfill's
        # run has the past time it was asked for: neither is late; nor is a run fired ahead of its time (the
        # master's --fire-ahead) that has not begun (one that has begun, begun at its time at the earliest).
        began = "started_at" if run.HasField("started_at") else "fired_at"
        ahead = began == "fired_at" and run.fired_at.ToMilliseconds() < run.scheduled_at.ToMilliseconds()
        late = "-" if run.rerun_of or run.after_run or run.backfill or ahead else _elapsed(run, "scheduled_at", began)
        table.add_row(run.id, _state(run), _ts(run, "scheduled_at"), late, _elapsed(run, "started_at", "finished_at"),
                      f"{run.tasks_succeeded}/{run.tasks_failed}/{run.tasks_cancelled} of {run.task_count}",
                      run.reason or (f"rerun of {run.rerun_of}" if run.rerun_of else "")
                      or (f"after {run.after_run}" if run.after_run else "") or ("backfill" if run.backfill else ""))
    console.print(table)


def run_detail(console: Console, run: Any) -> None:
    runs_table(console, [run])
    if run.steps:
        steps = _table("step", "state", "after", "run", "attempts", "started", "took")
        for s in run.steps:
            steps.add_row(s.name, _state(s), ", ".join(s.after) or "-",
                          s.run_id or "-", str(s.attempts), _ts(s, "started_at"), _elapsed(s, "started_at", "finished_at"))
        console.print(steps)
        return
    table = _table("task", "state", "attempt", "worker", "token", "started", "took", "result / error")
    for task in run.tasks:
        if not task.attempts:
            table.add_row(task.id, _state(task), "-", "-", "-", "-", "-", task.error)
        for a in task.attempts:
            outcome = a.result_json if a.result_json else a.error
            table.add_row(task.id, _state(task), f"{a.number} {_state(a)}", a.worker, str(a.fencing_token),
                          _ts(a, "started_at"), _elapsed(a, "started_at", "finished_at"), outcome[:120])
    console.print(table)


def readiness_text(w: Any) -> str:
    """``ready``, or ``starting``/``degraded`` with the worker's reason (an older worker says nothing)."""
    if not w.alive:
        return ""
    name = pb.Readiness.Name(w.readiness).removeprefix("READINESS_").lower()
    if name == "unspecified":
        return "ready"
    return f"{name}: {w.readiness_reason}" if w.readiness_reason else name


def workers_table(console: Console, workers: Sequence[Any]) -> None:
    table = _table("worker", "group", "host", "slots", "free", "prefetch", "alive", "readiness", "draining", "tasks",
                   "last seen")
    for w in workers:
        table.add_row(w.id, w.group, w.host, str(w.slots), str(w.free_slots), str(w.prefetch),
                      "yes" if w.alive else "no", readiness_text(w), "yes" if w.draining else "", str(len(w.tasks)),
                      _ts(w, "last_seen"))
    console.print(table)


def status_view(console: Console, s: Any) -> None:
    """The master's view of the cluster: a few lines, then its masters (``--json`` has every field)."""
    ready = sum(s.ready_by_group.values())
    groups = ", ".join(f"{g or 'default'} {n}" for g, n in sorted(s.ready_by_group.items()) if n)
    console.print(f"master {s.master_id} ({s.role}, epoch {s.epoch}), Sparkyard {s.version}, up since "
                  f"{_ts(s, 'started_at')}; leader: {s.leader or 'none'}")
    console.print(f"workers alive {s.workers_alive}, slots {s.slots_free} free of {s.slots_total}; tasks ready "
                  f"{ready}{f' ({groups})' if groups else ''}, leased {s.leased}; jobs scheduled {s.jobs_scheduled}, "
                  f"timers pending {s.timers_pending}; redis {s.redis}")
    table = _table("master", "address", "role", "last seen")
    for m in s.masters:
        table.add_row(m.id, m.address, m.role, _ts(m, "last_seen"))
    console.print(table)


@contextmanager
def task_progress(console: Console, run_id: str) -> Iterator[Callable[[pb.Run], None]]:
    """A bar of a run's ended tasks out of all, with the time waited; yields the function that moves it.

    A run not fired yet has no task count: the bar pulses until it has one."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(f"{run_id} waiting", total=None)

        def show(run: pb.Run) -> None:
            ended = run.tasks_succeeded + run.tasks_failed + run.tasks_cancelled
            state = enum_name(pb.Run.DESCRIPTOR.fields_by_name["state"], run.state) if run.state else "waiting"
            progress.update(bar, description=f"{run_id} {state}", total=run.task_count or None, completed=ended)

        yield show
