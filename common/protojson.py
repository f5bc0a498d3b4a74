"""The API's protobuf messages as JSON, one form for every reader: the CLI's ``--json``, the master's web
console and its webhooks' bodies.

It follows the API's field names with three conventions: times are RFC 3339 UTC with milliseconds, enum
values drop their type prefix (``"state": "SUCCEEDED"``), and ``result_json`` is parsed into ``result``.
Every field is present, zeros included (``free_slots: 0`` matters). A shared module (not the CLI's) so
that the master serves the same JSON without importing the client.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
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
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        full = field.message_type.full_name
        if full == "google.protobuf.Timestamp":
            return rfc3339_ms(value.ToMilliseconds()) if (value.seconds or value.nanos) else None
        if full == "google.protobuf.Duration":
            return value.ToMilliseconds() / 1000
        return to_dict(value)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return enum_name(field, value)
    if field.type == FieldDescriptor.TYPE_BYTES:
        return value.decode(errors="replace")
    return value


def to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            out[field.name] = {k: _value(value_field, v) for k, v in value.items()}
        elif field.is_repeated:
            out[field.name] = [_value(field, v) for v in value]
        elif field.type == FieldDescriptor.TYPE_MESSAGE and not message.HasField(field.name):
            out[field.name] = None
        elif field.containing_oneof is not None and message.WhichOneof(field.containing_oneof.name) != field.name:
            continue
        else:
            out[field.name] = _value(field, value)
    if "result_json" in out:
        text = out.pop("result_json")
        try:
            out["result"] = json.loads(text) if text else None
        except ValueError:
            out["result"] = text
    return out
