"""What a console request asks for: its query parameters read and checked (one line naming a bad one, as
InvalidArgument), and the jobs page's filters."""

from __future__ import annotations

from aiohttp import web

from sparkyard.errors import InvalidArgument
from sparkyard.master.records import JobRecord
from sparkyard.states import JobState


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
