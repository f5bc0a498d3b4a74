"""Job, run and task ids (format documented in :mod:`sparkyard.keys`).

A run id is derived from its job id and scheduled fire time, never random, so two masters that fire the
same schedule entry compute the same id and the ``SETNX`` in the fire script lets only one create it.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from enum import Enum

from sparkyard.errors import quote

JOB_ID = re.compile(r"j[0-9a-f]{21}")
RUN_ID = re.compile(r"(j[0-9a-f]{21})\.(\d{13})")
TASK_ID = re.compile(r"(j[0-9a-f]{21})\.(\d{13})\.(\d{5})")
# Task indexes are zero-padded to this many digits so task ids of one run sort in index order.
TASK_INDEX_DIGITS = 5
MAX_TASK_INDEX = 10**TASK_INDEX_DIGITS - 1


class IdKind(str, Enum):
    JOB = "job"
    RUN = "run"
    TASK = "task"


@dataclass(frozen=True)
class ParsedId:
    kind: IdKind
    job_id: str
    run_id: str = ""
    task_id: str = ""


def new_job_id(now_ms: int) -> str:
    """A new job id: creation time (sortable) plus 40 random bits.

    A bulk submit creates a thousand ids in the same millisecond; 40 bits make a collision there about
    one in two million calls, and submit.lua refuses to overwrite an existing job in any case.
    """
    return new_job_ids(now_ms, 1)[0]


def new_job_ids(now_ms: int, n: int) -> list[str]:
    """``n`` new job ids as :func:`new_job_id` makes them, from one read of the OS's random source."""
    pool = secrets.token_bytes(5 * n)
    return [f"j{now_ms:011x}{pool[5 * i:5 * i + 5].hex()}" for i in range(n)]


def run_id(job_id: str, scheduled_ms: int) -> str:
    return f"{job_id}.{scheduled_ms:013d}"


def parse_run_ms(run: str) -> int:
    """The time in a run id (its scheduled ms, or a rerun's or a child job's firing time)."""
    return int(run.rsplit(".", 1)[1])


def task_id(run: str, index: int) -> str:
    if not 0 <= index <= MAX_TASK_INDEX:
        raise ValueError(f"task index {index} out of range 0..{MAX_TASK_INDEX}")
    return f"{run}.{index:0{TASK_INDEX_DIGITS}d}"


def lua_task_id() -> str:
    """Lua ``task_id(run, index)`` building the same ids as :func:`task_id` (rendered into every script)."""
    return f"local function task_id(run, index) return string.format('%s.%0{TASK_INDEX_DIGITS}d', run, index) end"


def parse_id(text: str) -> ParsedId:
    """Tell a job, run or task id apart; raise ValueError naming the text when it is none of them."""
    if m := TASK_ID.fullmatch(text):
        return ParsedId(IdKind.TASK, m.group(1), f"{m.group(1)}.{m.group(2)}", text)
    if m := RUN_ID.fullmatch(text):
        return ParsedId(IdKind.RUN, m.group(1), text)
    if JOB_ID.fullmatch(text):
        return ParsedId(IdKind.JOB, text)
    raise ValueError(f"{quote(text)} is not a job, run or task id (e.g. j19a8c2f3a1b2c3d4e5f65, "
                     f"j19a8c2f3a1b2c3d4e5f65.1732262400000, j19a8c2f3a1b2c3d4e5f65.1732262400000.00000)")
