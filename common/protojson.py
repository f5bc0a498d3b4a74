"""The API's protobuf messages as JSON, one form for every reader: the CLI's ``--json``, the master's web
console and its webhooks' bodies.

It follows the API's field names with three conventions: times are RFC 3339 UTC with milliseconds, enum
values drop their type prefix (``"state": "SUCCEEDED"``), and ``result_json`` is parsed into ``result``.
Every field is present, zeros included (``free_slots: 0`` matters). A shared module (not the CLI's) so
that the master serves the same JSON without importing the client.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from sparkyard.timeutil import rfc3339_ms

_ENUM_PREFIXES = ("JOB_STATE_", "RUN_STATE_", "TASK_STATE_", "ATTEMPT_STATE_", "JOB_", "RUN_", "TASK_", "ATTEMPT_",
                  "RUNNER_", "ROUTING_", "MISFIRE_", "OVERLAP_", "STEP_STATE_", "STEP_", "READINESS_")


def enum_name(field: FieldDescriptor, number: int) -> str:
    value = field.enum_type.values_by_number.get(number)
    name = value.name if value else str(number)
    for prefix in _ENUM_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _value(field: FieldDescriptor, value: Any) -> Any:
    return _converter(field)(field, value)


@functools.cache
def _converter(field: FieldDescriptor) -> Callable[[FieldDescriptor, Any], Any]:
    """How a value of ``field`` reads in JSON, decided once per field (the console's jobs page converts a
    hundred jobs and their runs on every refresh)."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        full = field.message_type.full_name
        if full == "google.protobuf.Timestamp":
            return lambda _, v: rfc3339_ms(v.ToMilliseconds()) if (v.seconds or v.nanos) else None
        if full == "google.protobuf.Duration":
            return lambda _, v: v.ToMilliseconds() / 1000
        return lambda _, v: to_dict(v)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_name
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda _, v: v.decode(errors="replace")
    return lambda _, v: v


_MAP, _REPEATED, _MESSAGE, _ONEOF, _PLAIN = range(5)


@functools.cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, int, FieldDescriptor, Any], ...]:
    """Each field of a message type: its name, how it is written, the descriptor its values are converted
    by, and a map's value field or a oneof's name."""
    out = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out.append((field.name, _MAP, field, field.message_type.fields_by_name["value"]))
        elif field.is_repeated:
            out.append((field.name, _REPEATED, field, None))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            out.append((field.name, _MESSAGE, field, None))
        elif field.containing_oneof is not None:
            out.append((field.name, _ONEOF, field, field.containing_oneof.name))
        else:
            out.append((field.name, _PLAIN, field, None))
    return tuple(out)


def to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind, field, extra in _plan(message.DESCRIPTOR):
        if kind == _MAP:
            out[name] = {k: _value(extra, v) for k, v in getattr(message, name).items()}
        elif kind == _REPEATED:
            out[name] = [_value(field, v) for v in getattr(message, name)]
        elif kind == _MESSAGE:
            out[name] = _value(field, getattr(message, name)) if message.HasField(name) else None
        elif kind != _ONEOF or message.WhichOneof(extra) == name:
            out[name] = _value(field, getattr(message, name))
    if "result_json" in out:
        text = out.pop("result_json")
        try:
            out["result"] = json.loads(text) if text else None
        except ValueError:
            out["result"] = text
    return out
