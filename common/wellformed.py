"""Values a protobuf message accepts on the wire but Sparkyard must not: enum numbers the schema does not
define (proto3 enums are open, so ``runner = 42`` decodes fine), Durations and Timestamps outside the
range their own types document (a Timestamp past year 9999 cannot even be printed), and floats that are
not finite.

:func:`check` walks a message by its descriptor, so a field added to the proto later is covered without
a change here. Every problem is a :class:`MalformedField` naming the field's dotted path
(``trigger.every.interval``), which callers turn into INVALID_ARGUMENT.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from sparkyard.errors import quote

# google.protobuf.Timestamp's documented range: 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59Z.
MIN_TIMESTAMP_S = -62_135_596_800
MAX_TIMESTAMP_S = 253_402_300_799
# google.protobuf.Duration's documented range: ±10,000 years.
MAX_DURATION_S = 315_576_000_000
NANOS_PER_SECOND = 1_000_000_000

_TIMESTAMP = "google.protobuf.Timestamp"
_DURATION = "google.protobuf.Duration"


class MalformedField(ValueError):
    """A field holds a value outside what its type allows; ``field`` is its dotted path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def check(message: Message, path: str = "") -> None:
    """Raise :class:`MalformedField` for the first ill-formed value in ``message`` (recursively)."""
    full_name = message.DESCRIPTOR.full_name
    if full_name == _TIMESTAMP:
        _check_timestamp(message, path)
    elif full_name == _DURATION:
        _check_duration(message, path)
    else:
        _check_fields(message, path)


def _check_fields(message: Message, path: str) -> None:
    for name, kind, check_one in _plan(message.DESCRIPTOR):
        if kind is _SINGULAR_MESSAGE:
            if not message.HasField(name):
                continue
            value = getattr(message, name)
        else:
            value = getattr(message, name)
            if not value:  # unset: a default is well-formed (enum 0 is always defined, 0.0 is finite)
                continue
        where = f"{path}.{name}" if path else name
        if kind is _MAP:
            for key, item in value.items():
                check_one(item, f"{where}[{quote(key, 40)}]")
        elif kind is _REPEATED:
            for i, item in enumerate(value):
                check_one(item, f"{where}[{i}]")
        else:
            check_one(value, where)


_SINGULAR_MESSAGE, _SCALAR, _REPEATED, _MAP = "message", "scalar", "repeated", "map"
_Check = Callable[[Any, str], None]


@functools.cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, str, _Check], ...]:
    """The fields of ``descriptor`` that can hold an ill-formed value, directly or further down, each with
    how it is read and what checks a value of it: only these are looked at. A worker's Reports of 500
    results is checked on the master's hot path, and reading every field set (``ListFields``) made a Python
    string of each result's JSON, error and log path for nothing."""
    plan = []
    for field in sorted(descriptor.fields, key=lambda f: f.number):  # the first problem found, in field order
        if not _can_be_malformed(field, frozenset({descriptor.full_name})):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            plan.append((field.name, _MAP, _checker(field.message_type.fields_by_name["value"])))
        else:
            kind = _REPEATED if _repeated(field) else (
                _SINGULAR_MESSAGE if field.type == FieldDescriptor.TYPE_MESSAGE else _SCALAR)
            plan.append((field.name, kind, _checker(field)))
    return tuple(plan)


def _checker(field: FieldDescriptor) -> _Check:
    """What checks one value of ``field`` (an item, for a repeated field or a map's values)."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        full_name = field.message_type.full_name
        return _check_timestamp if full_name == _TIMESTAMP else _check_duration if full_name == _DURATION \
            else _check_fields
    if field.type == FieldDescriptor.TYPE_ENUM:
        return functools.partial(_check_enum, field.enum_type)
    return _check_finite


def _can_be_malformed(field: FieldDescriptor, seen: frozenset[str]) -> bool:
    if field.type in (FieldDescriptor.TYPE_ENUM, FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return True
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return False
    inner = field.message_type
    if inner.full_name in (_TIMESTAMP, _DURATION):
        return True
    if inner.full_name in seen:  # a recursive message: checked when it is met
        return True
    return any(_can_be_malformed(f, seen | {inner.full_name}) for f in inner.fields)


def _repeated(field: FieldDescriptor) -> bool:
    """protobuf 7 has ``is_repeated`` and no ``label``; versions before 6.31 only ``label``."""
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _check_enum(enum_type: EnumDescriptor, value: int, name: str) -> None:
    if value not in enum_type.values_by_number:
        known = ", ".join(v.name for v in enum_type.values)
        raise MalformedField(name, f"{value} is not a {enum_type.name} (one of {known})")


def _check_finite(value: float, name: str) -> None:
    if not math.isfinite(value):
        raise MalformedField(name, f"{value} is not a finite number")


def _check_timestamp(ts: Message, name: str) -> None:
    seconds, nanos = ts.seconds, ts.nanos
    if not MIN_TIMESTAMP_S <= seconds <= MAX_TIMESTAMP_S or not 0 <= nanos < NANOS_PER_SECOND:
        raise MalformedField(name, f"{seconds}s {nanos}ns is not a valid time (years 1 to 9999, "
                                   f"nanos 0..{NANOS_PER_SECOND - 1})")


def _check_duration(d: Message, name: str) -> None:
    seconds, nanos = d.seconds, d.nanos
    if (abs(seconds) > MAX_DURATION_S or abs(nanos) >= NANOS_PER_SECOND
            or (seconds > 0 and nanos < 0) or (seconds < 0 and nanos > 0)):
        raise MalformedField(name, f"{seconds}s {nanos}ns is not a valid duration (at most ±{MAX_DURATION_S}s, "
                                   "nanos of the same sign and under a second)")
