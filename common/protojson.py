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

from sparkyard.timeutil import rfc3339_ms, timestamp_ms

_ENUM_PREFIXES = ("JOB_STATE_", "RUN_STATE_", "TASK_STATE_", "ATTEMPT_STATE_", "JOB_", "RUN_", "TASK_", "ATTEMPT_",
                  "RUNNER_", "ROUTING_", "MISFIRE_", "OVERLAP_", "STEP_STATE_", "STEP_", "READINESS_")


def enum_name(field: FieldDescriptor, number: int) -> str:
    value = field.enum_type.values_by_number.get(number)
    name = value.name if value else str(number)
    for prefix in _ENUM_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


def _timestamp(v: Any) -> str | None:
    return rfc3339_ms(timestamp_ms(v)) if (v.seconds or v.nanos) else None


def _converter(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    """How a value of ``field`` reads in JSON; None: as it is."""
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        full = field.message_type.full_name
        if full == "google.protobuf.Timestamp":
            return _timestamp
        if full == "google.protobuf.Duration":
            return lambda v: v.ToMilliseconds() / 1000
        return to_dict
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {value.number: enum_name(field, value.number) for value in field.enum_type.values}
        return lambda v: names[v] if v in names else str(v)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda v: v.decode(errors="replace")
    return None


_MAP, _REPEATED, _MESSAGE, _ONEOF, _PLAIN, _AS_IS = range(6)


@functools.cache
def _plan(descriptor: Descriptor) -> tuple[tuple[str, int, Callable[[Any], Any], str], ...]:
    """Each field of a message type, decided once per type (the console's jobs page converts a hundred jobs
    and their runs on every refresh, ``submit --wait --json`` a run's thousands of tasks): its name, how it is
    written, how its values (a map's: its entries' values) convert, and a oneof's name."""
    out = []
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out.append((field.name, _MAP, _converter(field.message_type.fields_by_name["value"]) or _same, ""))
            continue
        convert = _converter(field)
        if field.is_repeated:
            out.append((field.name, _REPEATED, convert or _same, ""))
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            out.append((field.name, _MESSAGE, convert or _same, ""))
        elif field.containing_oneof is not None:
            out.append((field.name, _ONEOF, convert or _same, field.containing_oneof.name))
        else:
            out.append((field.name, _PLAIN if convert else _AS_IS, convert or _same, ""))
    return tuple(out)


def _same(v: Any) -> Any:
    return v


def to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind, convert, oneof in _plan(message.DESCRIPTOR):
        if kind == _AS_IS:
            out[name] = getattr(message, name)
        elif kind == _MAP:
            out[name] = {k: convert(v) for k, v in getattr(message, name).items()}
        elif kind == _REPEATED:
            out[name] = [convert(v) for v in getattr(message, name)]
        elif kind == _MESSAGE:
            out[name] = convert(getattr(message, name)) if message.HasField(name) else None
        elif kind != _ONEOF or message.WhichOneof(oneof) == name:
            out[name] = convert(getattr(message, name))
    if "result_json" in out:
        text = out.pop("result_json")
        try:
            out["result"] = json.loads(text) if text else None
        except ValueError:
            out["result"] = text
    return out
