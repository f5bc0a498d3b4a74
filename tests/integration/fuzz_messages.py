"""Hypothesis strategies for every RPC of every Sparkyard service, derived from the message descriptors
(a field or an RPC added to the proto is fuzzed without a change here).

Values lean to the edges: the extremes of each integer type, enum numbers the schema does not define,
NaN and infinities, empty and 20 KB strings, ids of objects that exist (so calls get past the id check and
reach deeper code), and random bytes instead of a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

from sparkyard.v1 import sparkyard_pb2 as pb

# Messages nest (JobSpec → Trigger → Every → Duration): deeper than this, optional fields are left unset.
MAX_DEPTH = 5
LONG_STRING = "x" * 20_000

_INT_EDGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1), FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1), FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}


@dataclass(frozen=True)
class Rpc:
    """One method of one service, as a raw channel calls it."""

    path: str
    method: MethodDescriptor

    @property
    def client_streaming(self) -> bool:
        return bool(self.method.client_streaming)

    @property
    def server_streaming(self) -> bool:
        return bool(self.method.server_streaming)


def every_rpc() -> list[Rpc]:
    return [Rpc(f"/{service.full_name}/{method.name}", method)
            for service in pb.DESCRIPTOR.services_by_name.values() for method in service.methods]


def _repeated(field: FieldDescriptor) -> bool:
    if hasattr(field, "is_repeated"):
        return bool(field.is_repeated)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def _scalar(field: FieldDescriptor, known_ids: Sequence[str]) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in _INT_EDGES:
        low, high = _INT_EDGES[kind]
        return st.sampled_from([0, 1, -1, low, high, 10**12, 253_402_300_800]).filter(
            lambda v: low <= v <= high) | st.integers(low, high)
    if kind == FieldDescriptor.TYPE_ENUM:
        defined = [v.number for v in field.enum_type.values]
        return st.sampled_from(defined) | st.integers(-5, 300)
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=64 if kind == FieldDescriptor.TYPE_DOUBLE else 32)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=64)
    ids = [st.sampled_from(list(known_ids))] if known_ids else []
    return st.one_of(st.text(max_size=24), st.just(LONG_STRING), st.sampled_from(["m.mod:main", "/abs/job.py:main",
                     "* * * * *", "Europe/Berlin", "default", "..", "a=b"]), *ids)


@st.composite
def messages(draw: st.DrawFn, descriptor: Descriptor, known_ids: Sequence[str] = (), depth: int = 0) -> Message:
    """A message of ``descriptor`` with a random subset of its fields set to edge-leaning values."""
    message = GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if depth >= MAX_DEPTH or not draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key_field = field.message_type.fields_by_name["key"]
            value_field = field.message_type.fields_by_name["value"]
            if value_field.message_type is not None:
                continue  # no map of messages in the proto today
            entries = draw(st.dictionaries(_scalar(key_field, ()), _scalar(value_field, known_ids), max_size=3))
            getattr(message, field.name).update(entries)
        elif field.message_type is not None:
            inner = st.deferred(lambda f=field: messages(f.message_type, known_ids, depth + 1))
            if _repeated(field):
                for item in draw(st.lists(inner, max_size=3)):
                    getattr(message, field.name).add().CopyFrom(item)
            else:
                getattr(message, field.name).CopyFrom(draw(inner))
        elif _repeated(field):
            getattr(message, field.name).extend(draw(st.lists(_scalar(field, known_ids), max_size=3)))
        else:
            setattr(message, field.name, draw(_scalar(field, known_ids)))
    return message


def requests(rpc: Rpc, known_ids: Sequence[str]) -> st.SearchStrategy[list[bytes]]:
    """What a client sends on ``rpc``: one encoded request (a list of 1 to 3 on a request stream), each a
    random message or random bytes."""
    one = messages(rpc.method.input_type, known_ids).map(lambda m: m.SerializeToString()) | st.binary(max_size=80)
    return st.lists(one, min_size=1, max_size=3 if rpc.client_streaming else 1)
