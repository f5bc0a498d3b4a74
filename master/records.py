"""What the store reads back from Redis: jobs, runs, tasks and attempts as typed records.

The hashes' field names are documented in :mod:`sparkyard.keys`. Parsing is lenient about missing
fields (a record written by an older version still reads) and strict about types.
"""

from __future__ import annotations

import base64
import json
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TypeVar

from google.protobuf.message import DecodeError

from sparkyard.errors import DataLoss
from sparkyard.states import AttemptState, JobState, RunState, StepState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

R = TypeVar("R")

# Records found unreadable are logged once each; this many of their ids are remembered (a bound on memory
# if many are broken, at the cost of logging one again after that many others).
UNREADABLE_REMEMBERED = 10_000
_logged: OrderedDict[str, None] = OrderedDict()


def log_once(key: str, message: str, *args: object) -> None:
    """Log ``message`` as an error the first time ``key`` is met: a broken record is met by every listing
    that reaches it, and one line says all there is to say."""
    if key in _logged:
        return
    _logged[key] = None
    if len(_logged) > UNREADABLE_REMEMBERED:
        _logged.popitem(last=False)
    log.error(message, *args)


def readable(record_id: str, parse: Callable[[], R]) -> R | None:
    """``parse()``, or None (logged once) when the stored record cannot be read — written by hand or by a
    version that stored something this one does not know. A listing leaves it out rather than failing for
    every caller until someone deletes it."""
    try:
        return parse()
    except (ValueError, KeyError, TypeError, DecodeError) as exc:
        log_once(record_id, "record %s cannot be read (%s: %s); listings leave it out", record_id,
                 type(exc).__name__, exc)
        return None


def read_one(kind: str, record_id: str, parse: Callable[[], R]) -> R:
    """``parse()`` of a record asked for by id: one that cannot be read is an error naming it (DATA_LOSS), not
    an internal error, so the caller learns which key to look at."""
    try:
        return parse()
    except (ValueError, KeyError, TypeError, DecodeError) as exc:
        raise DataLoss(f"{kind} {record_id}: its stored record cannot be read ({type(exc).__name__}: {exc}); it was "
                       "written by hand or by a Sparkyard version this one does not know") from None


# A stored spec is this mark, then its protobuf encoding with each byte as the character of that code point
# (Latin-1): the text is valid UTF-8, as every reply of the store's client is decoded, and Redis keeps a byte
# below 0x80 (most of a spec: its strings, field tags, small numbers) as one byte and one above it as two,
# against base64's four for every three. At a million jobs that is ~60 B a job. A text without the mark is
# base64, as versions before 2026-11-28 stored it; it still reads. Base64 never contains the mark.
SPEC_MARK = "~"


def spec_to_text(spec: pb.JobSpec) -> str:
    """A JobSpec as stored in Redis (see :data:`SPEC_MARK`).

    Binary protobuf costs ~1 µs to write and read against ~20 µs for JSON, which matters when thousands of
    jobs are submitted a second; old fields stay readable as the proto evolves. ``sparkyard job ID --json``
    shows a spec readably.
    """
    return SPEC_MARK + spec.SerializeToString().decode("latin-1")


def spec_from_text(text: str) -> pb.JobSpec:
    spec = pb.JobSpec()
    if text.startswith(SPEC_MARK):
        spec.ParseFromString(text[1:].encode("latin-1"))
    else:
        spec.ParseFromString(base64.b64decode(text))
    return spec


def inputs_to_json(inputs: list[pb.SplitInput] | tuple[Any, ...]) -> str:
    return json.dumps([[i.value, i.mark] for i in inputs], separators=(",", ":"))


def inputs_from_json(text: str | None) -> list[pb.SplitInput]:
    if not text:
        return []
    return [pb.SplitInput(value=v, mark=m) for v, m in json.loads(text)]


def add_inputs(inputs: Any, text: str | None) -> None:
    """Add the inputs stored as ``text`` to the repeated field ``inputs`` in place: a list of messages made
    first would be copied into it again (the scheduler fills every assignment it sends this way)."""
    if text:
        for value, mark in json.loads(text):
            inputs.add(value=value, mark=mark)


def _int(value: str | None, default: int = 0) -> int:
    if value is None or value == "":
        return default
    return int(float(value))


@dataclass
class JobRecord:
    id: str
    spec: pb.JobSpec
    state: JobState
    created_ms: int
    updated_ms: int
    next_fire_ms: int  # -1 when none
    runs: int
    last_run_id: str  # the latest firing's run (manual ones too)
    awaited_run_id: str = ""  # a fixed-delay job in `awaiting`: the run whose end sets its next fire time
    spec_version: int = 1  # 1 as submitted, one more per update (sparkyard update)
    spec_updated_ms: int = 0  # when the spec was last updated (0: never)

    @classmethod
    def from_hash(cls, job_id: str, h: Mapping[str, str]) -> JobRecord:
        return cls(
            id=job_id,
            spec=spec_from_text(h["spec"]),
            state=JobState(h["state"]),
            created_ms=_int(h.get("created_ms")),
            updated_ms=_int(h.get("updated_ms")),
            next_fire_ms=_int(h.get("next_fire_ms"), -1),
            runs=_int(h.get("runs")),
            last_run_id=h.get("last_run_id", ""),
            awaited_run_id=h.get("awaits", ""),
            spec_version=_int(h.get("spec_v"), 1),
            spec_updated_ms=_int(h.get("spec_ms")),
        )


@dataclass
class AttemptRecord:
    number: int
    worker: str
    token: int
    state: AttemptState
    leased_ms: int
    started_ms: int = 0
    finished_ms: int = 0
    result: str = ""
    error: str = ""
    traceback: str = ""
    log_path: str = ""

    @classmethod
    def latest(cls, number: int, h: Mapping[str, str]) -> AttemptRecord:
        """The task's latest attempt, kept in the task hash (lib.lua finish_attempt / archive_attempt):
        running while it has no att_state; its result, once SUCCEEDED, is the task's."""
        ended = h.get("att_state")
        state = AttemptState(ended) if ended else AttemptState.RUNNING
        return cls(
            number=number, worker=h.get("att_worker", "") if ended else h.get("worker", ""),
            token=_int(h.get("token")), state=state, leased_ms=_int(h.get("att_leased_ms")),
            started_ms=_int(h.get("att_started_ms")), finished_ms=_int(h.get("att_finished_ms")),
            result=h.get("result", "") if state is AttemptState.SUCCEEDED else "",
            error=h.get("att_error", ""), traceback=h.get("att_traceback", ""), log_path=h.get("att_log", ""),
        )

    @classmethod
    def from_json(cls, text: str) -> AttemptRecord:
        d = json.loads(text)
        return cls(
            number=int(d["number"]),
            worker=str(d.get("worker", "")),
            token=int(d.get("token", 0)),  # a string of digits (older records: a JSON number)
            state=AttemptState(d.get("state", "RUNNING")),
            leased_ms=int(d.get("leased_ms", 0)),
            started_ms=int(d.get("started_ms", 0) or 0),
            finished_ms=int(d.get("finished_ms", 0) or 0),
            result=str(d.get("result", "")),
            error=str(d.get("error", "")),
            traceback=str(d.get("traceback", "")),
            log_path=str(d.get("log_path", "")),
        )


@dataclass
class TaskRecord:
    id: str
    run_id: str
    job_id: str
    index: int
    state: TaskState
    group: str
    inputs: list[pb.SplitInput]
    token: int
    worker: str
    prev_worker: str
    attempts_started: int
    failures: int
    lost: int
    result: str
    error: str
    not_before_ms: int
    lease_deadline_ms: int
    attempts: list[AttemptRecord] = field(default_factory=list)

    @classmethod
    def from_hash(cls, task_id: str, h: Mapping[str, str], attempts: Mapping[str, str] | None = None) -> TaskRecord:
        parsed = sorted((AttemptRecord.from_json(v) for v in (attempts or {}).values()), key=lambda a: a.number)
        number = _int(h.get("attempts"))
        if number and all(a.number != number for a in parsed):
            parsed.append(AttemptRecord.latest(number, h))
        return cls(
            id=task_id,
            run_id=h.get("run_id", ""),
            job_id=h.get("job_id", ""),
            index=_int(h.get("index")),
            state=TaskState(h["state"]),
            group=h.get("group", ""),
            inputs=inputs_from_json(h.get("inputs")),
            token=_int(h.get("token")),
            worker=h.get("worker", ""),
            prev_worker=h.get("prev_worker", ""),
            attempts_started=_int(h.get("attempts")),
            failures=_int(h.get("failures")),
            lost=_int(h.get("lost")),
            result=h.get("result", ""),
            error=h.get("error", ""),
            not_before_ms=_int(h.get("not_before_ms")),
            lease_deadline_ms=_int(h.get("lease_ms")),
            attempts=parsed,
        )


@dataclass(frozen=True)
class StepRecord:
    """A step of a pipeline run: its state, and its run once made (times and attempts are that run's)."""

    name: str
    state: StepState
    job_id: str
    after: tuple[str, ...]
    run_id: str = ""
    started_ms: int = 0
    finished_ms: int = 0
    attempts: int = 0


@dataclass
class RunRecord:
    id: str
    job_id: str
    state: RunState
    scheduled_ms: int
    fired_ms: int
    started_ms: int
    finished_ms: int
    task_count: int
    succeeded: int
    dead: int
    cancelled: int
    reason: str
    tasks: list[TaskRecord] = field(default_factory=list)
    spec_version: int = 1  # the version of the job's spec the run was made from
    rerun_of: str = ""  # the run this one ran again (sparkyard rerun)
    backfill: bool = False  # made by a backfill: its scheduled time is a past one, asked for (not late)
    after_run: str = ""  # the parent's run whose end fired this one (a child job)
    pipeline_run: str = ""  # a step's run: the pipeline run it belongs to
    graph: str = ""  # a pipeline run: its graph as fired (JSON [[step, job, [after], rule]])
    steps: list[StepRecord] = field(default_factory=list)  # a pipeline run's steps, when read with them

    @classmethod
    def from_hash(cls, run_id: str, h: Mapping[str, str]) -> RunRecord:
        return cls(
            id=run_id,
            job_id=h.get("job_id", ""),
            state=RunState(h["state"]),
            scheduled_ms=_int(h.get("scheduled_ms")),
            fired_ms=_int(h.get("fired_ms")),
            started_ms=_int(h.get("started_ms")),
            finished_ms=_int(h.get("finished_ms")),
            task_count=_int(h.get("task_count")),
            succeeded=_int(h.get("succeeded")),
            dead=_int(h.get("dead")),
            cancelled=_int(h.get("cancelled")),
            reason=h.get("reason", ""),
            spec_version=_int(h.get("spec_v"), 1),
            rerun_of=h.get("rerun_of", ""),
            backfill=h.get("backfill") == "1",
            after_run=h.get("after_run", ""),
            pipeline_run=h.get("prun", ""),
            graph=h.get("graph", ""),
        )
