"""What a console request asks for: its query parameters read and checked (one line naming a bad one, as
InvalidArgument), and the jobs page's filters."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sparkyard.errors import InvalidArgument
from sparkyard.master.records import JobRecord
from sparkyard.states import JobState
from sparkyard.timeutil import parse_instant
from sparkyard.v1 import sparkyard_pb2 as pb

# What a backfill's body may hold.
BACKFILL_FIELDS = ("start", "end", "max_concurrent")


def int_param(request: web.Request, name: str, default: int, low: int = 0, high: int | None = None) -> int:
    text = request.query.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"{name}: {text!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        raise InvalidArgument(f"{name}: {value} is out of range {low}..{high if high is not None else ''}")
    return value


def flag_param(request: web.Request, name: str) -> bool:
    text = request.query.get(name, "").lower()
    if text not in ("", "0", "1", "true", "false"):
        raise InvalidArgument(f"{name}: {text!r} is not one of 0, 1, true, false")
    return text in ("1", "true")


def state_param(request: web.Request) -> JobState | None:
    text = request.query.get("state", "").upper()
    if not text:
        return None
    try:
        return JobState(text)
    except ValueError:
        choices = ", ".join(s.value.lower() for s in JobState)
        raise InvalidArgument(f"state: {text.lower()!r} is not one of {choices}") from None


def label_param(request: web.Request) -> tuple[str, str | None] | None:
    """``label=K=V`` (that value) or ``label=K`` (any value)."""
    text = request.query.get("label", "")
    if not text:
        return None
    key, sep, value = text.partition("=")
    if not key:
        raise InvalidArgument(f"label: {text!r} has no key (use KEY or KEY=VALUE)")
    return key, value if sep else None


def matches(job: JobRecord, name: str, text: str, label: tuple[str, str | None] | None) -> bool:
    spec = job.spec
    if name and name.lower() not in spec.name.lower():
        return False
    if text and not any(text.lower() in s.lower() for s in (job.id, spec.name, spec.entrypoint, *spec.args)):
        return False
    if label is not None:
        key, value = label
        if key not in spec.labels or (value is not None and spec.labels[key] != value):
            return False
    return True


async def json_body(request: web.Request, example: str) -> dict[str, Any]:
    """The request's body, a JSON object (``example``: what the caller is told to send instead)."""
    try:
        body = await request.json()
    except ValueError:
        raise InvalidArgument(f"body: not JSON; send e.g. {example}") from None
    if not isinstance(body, dict):
        raise InvalidArgument(f"body: not a JSON object; send e.g. {example}")
    return body


def backfill_request(job_id: str, body: dict[str, Any]) -> pb.BackfillRequest:
    """A backfill's body read as ``sparkyard backfill``'s flags are: ``start`` and ``end`` instants with an
    offset, ``max_concurrent`` a whole number (1 if not given; its range is the master's to check)."""
    unknown = sorted(set(body) - set(BACKFILL_FIELDS))
    if unknown:
        raise InvalidArgument(f"{unknown[0]}: not a backfill field (give {', '.join(BACKFILL_FIELDS)})")
    limit = body.get("max_concurrent", 1)
    if isinstance(limit, str) and limit.strip().lstrip("-").isdigit():
        limit = int(limit)
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise InvalidArgument(f"max_concurrent: {limit!r} is not a whole number")
    if not 1 <= limit < 2**31:  # 0 would read as "not given" in the message; the master checks the top
        raise InvalidArgument(f"max_concurrent: {limit} is not a count of runs (at least 1)")
    request = pb.BackfillRequest(job_id=job_id, max_concurrent=limit)
    for name in ("start", "end"):
        text = body.get(name)
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument(f"{name}: required (a time, ISO 8601 with an offset, e.g. 2026-11-01T00:00:00Z)")
        try:
            seconds = parse_instant(text, field=name)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        getattr(request, name).FromMilliseconds(round(seconds * 1000))
    return request
