"""Parsing and printing of durations, instants and sizes, as users type and read them.

Sizes: ``512m``, ``2g``, ``1.5GiB``, ``64MB``, ``300k`` (binary units: k = 1024), or a bare number of
``default_unit`` (:func:`parse_size`).

Durations: ``250ms``, ``10s``, ``5m``, ``1h30m``, ``2d``, or a bare number of seconds (``1.5``).
Instants: ISO 8601 / RFC 3339 (``2026-11-22T03:00:00Z``, ``2026-11-22 03:00+01:00``); an instant without
an offset is refused rather than guessed, because a scheduler that silently picks a zone fires at the
wrong hour. Output is always RFC 3339 UTC with milliseconds (``2026-11-22T03:00:00.000Z``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_duration(text: str, *, field: str = "duration") -> float:
    """Seconds in ``text``; ValueError naming ``field`` and the accepted forms when malformed."""
    raw = text.strip().lower()
    if not raw:
        raise ValueError(f"{field}: empty duration (use e.g. 500ms, 10s, 5m, 1h30m)")
    try:
        seconds = float(raw)
    except ValueError:
        pos, seconds = 0, 0.0
        for match in _PART.finditer(raw):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(raw) or pos == 0:
            raise ValueError(f"{field}: {text!r} is not a duration (use e.g. 500ms, 10s, 5m, 1h30m)") from None
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{field}: {text!r} must be a finite, non-negative duration")
    return seconds


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?")


def parse_size(text: str | int, *, field: str = "size", default_unit: str = "b") -> int:
    """Bytes in ``text`` (binary units; a bare number counts in ``default_unit``); ValueError naming
    ``field`` and the accepted forms when malformed."""
    raw = str(text).strip().lower()
    match = _SIZE.fullmatch(raw)
    if not match:
        raise ValueError(f"{field}: {text!r} is not a size (use e.g. 512m, 2g, 1.5GiB, 64MB)")
    number, unit = match.groups()
    if not unit and not raw.endswith("b"):
        unit = default_unit
    return int(float(number) * _SIZE_UNITS[unit])


def format_size(n: int) -> str:
    """Short human form in binary units: 1536 → '1.5 KiB'."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def format_duration(seconds: float) -> str:
    """Short human form: 0.25 → '250ms', 90 → '1m30s'."""
    if round(seconds * 1000) < 1000:
        return f"{seconds * 1000:.0f}ms"
    seconds = round(seconds, 3)
    whole = int(seconds)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if whole >= size:
            parts.append(f"{whole // size}{unit}")
            whole %= size
    frac = seconds - int(seconds)
    if whole or frac or not parts:
        parts.append(f"{whole + frac:g}s")
    return "".join(parts)


def parse_instant(text: str, *, field: str = "time") -> float:
    """Epoch seconds of an ISO 8601 instant that carries an offset or Z."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise ValueError(f"{field}: {text!r} is not an ISO 8601 time (e.g. 2026-11-22T03:00:00Z)") from None
    if moment.tzinfo is None:
        raise ValueError(f"{field}: {text!r} has no time zone offset (add Z or e.g. +01:00)")
    return moment.timestamp()


def timestamp_ms(ts: Any) -> int:
    """A protobuf Timestamp's milliseconds since the epoch (0 unset). Not its ToMilliseconds(): protobuf's Python
    helper checks the range on every call, which the request guard (wellformed.py) did once on input, and which
    a run's thousands of timestamps, read or printed, paid for again."""
    return ts.seconds * 1000 + ts.nanos // 1_000_000


def rfc3339_ms(epoch_ms: int) -> str:
    """RFC 3339 UTC with milliseconds: 2026-11-22T03:00:00.000Z (integer maths: no float rounding)."""
    seconds, millis = divmod(int(epoch_ms), 1000)
    # isoformat of whole seconds is "YYYY-MM-DDTHH:MM:SS+00:00": the date and time are its first 19 characters
    # (a third of strftime's cost, and the year always four digits as RFC 3339 wants).
    return f"{datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()[:19]}.{millis:03d}Z"


def rfc3339(epoch_seconds: float) -> str:
    return rfc3339_ms(round(epoch_seconds * 1000))


_PLACEHOLDER = re.compile(r"\{(ds|ds_nodash|ts|ts_nodash)\}")


def logical_args(args: Sequence[str], scheduled_ms: int) -> list[str]:
    """A step's args with the run's logical time filled in: ``{ds}`` (2026-11-26), ``{ds_nodash}``
    (20261126), ``{ts}`` (2026-11-26T03:00:00+00:00), ``{ts_nodash}`` (20261126T030000), all UTC. Other
    braces are left as they are, so an argument that is JSON stays intact."""
    moment = datetime.fromtimestamp(scheduled_ms / 1000, timezone.utc).replace(microsecond=0)
    values = {"ds": moment.strftime("%Y-%m-%d"), "ds_nodash": moment.strftime("%Y%m%d"),
              "ts": moment.isoformat(), "ts_nodash": moment.strftime("%Y%m%dT%H%M%S")}
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in args]
