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

from google.protobuf.descriptor import Descriptor, FieldDescriptor
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
        return
    if full_name == _DURATION:
        _check_duration(message, path)
        return
    checked = _checked_fields(message.DESCRIPTOR)
    # Only the fields set: a field left at its default holds a well-formed value (enum 0 is always defined).
    for field, value in message.ListFields():
        if field.number not in checked:
            continue
        name = f"{path}.{field.name}" if path else field.name
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                _check_value(value_field, item, f"{name}[{quote(key, 40)}]")
        elif _repeated(field):
            for i, item in enumerate(value):
                _check_value(field, item, f"{name}[{i}]")
        else:
            _check_value(field, value, name)


@functools.cache
def _checked_fields(descriptor: Descriptor) -> frozenset[int]:
    """The numbers of the fields of ``descriptor`` that can hold an ill-formed value, directly or further
    down (a worker's Reports of 500 results is checked on the master's hot path: strings and ints are
    skipped)."""
    return frozenset(field.number for field in descriptor.fields
                     if _can_be_malformed(field, frozenset({descriptor.full_name})))


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


def _check_value(field: FieldDescriptor, value: object, name: str) -> None:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        check(value, name)
    elif field.type == FieldDescriptor.TYPE_ENUM:
        assert isinstance(value, int)
        if value not in field.enum_type.values_by_number:
            known = ", ".join(v.name for v in field.enum_type.values)
            raise MalformedField(name, f"{value} is not a {field.enum_type.name} (one of {known})")
    elif field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        assert isinstance(value, float)
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
