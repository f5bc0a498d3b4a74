"""A walk through a protobuf message that calls a function on each message of the types it looks at.

Why a walk of its own: the connect runner looks at every plan an attempt sends (worker/connect_plans.py), and
a plan is a deep tree of relations and expressions of which only a few message types matter. The walk learns,
once per field of the protos, whether a field can lead to a looked-at type at all, and skips those that cannot
(an expression tree, for a walk that looks only at relations): 200 nested projections of 10 expressions each
took 46 ms a walk without this, 3 ms with it (2026-11-27, 2 cores under load average 26-40).
"""

from __future__ import annotations

from typing import Any, Callable, Generic, TypeVar

Found = TypeVar("Found")

# What a field holds, for the walk.
_SCALAR, _LEADS_NOWHERE, _MAP, _MESSAGE = range(4)


class Walk(Generic[Found]):
    """Calls ``looks[type name](message, found)`` for each message of those types in a message, parents
    before what they hold (so a look may change what the walk then visits)."""

    def __init__(self, looks: dict[str, Callable[[Any, Found], None]]) -> None:
        self._looks = looks
        self._field_contents: dict[str, int] = {}
        self._leads: set[str] = set()  # message types from which a looked-at one can be reached
        self._seen: set[str] = set()  # message types whose reach is known

    def __call__(self, message: Any, found: Found) -> None:
        look = self._looks.get(message.DESCRIPTOR.full_name)
        if look is not None:
            look(message, found)
        for descriptor, value in message.ListFields():
            kind = self._contents(descriptor)
            if kind == _SCALAR or kind == _LEADS_NOWHERE:
                continue
            if kind == _MAP:
                for item in value.values():
                    self(item, found)
            elif descriptor.is_repeated:
                for item in value:
                    self(item, found)
            else:
                self(value, found)

    def _contents(self, field: Any) -> int:
        kind = self._field_contents.get(field.full_name)
        if kind is None:
            target = _target(field)
            if target is None:
                kind = _SCALAR
            else:
                self._learn(target)
                kind = _LEADS_NOWHERE if target.full_name not in self._leads \
                    else _MAP if target is not field.message_type else _MESSAGE
            self._field_contents[field.full_name] = kind
        return kind

    def _learn(self, root: Any) -> None:
        """Which of the message types reachable from ``root`` lead to a looked-at one (a fixpoint: plans are
        recursive)."""
        if root.full_name in self._seen:
            return
        types, todo = {}, [root]
        while todo:
            descriptor = todo.pop()
            if descriptor.full_name in types or descriptor.full_name in self._seen:
                continue
            types[descriptor.full_name] = descriptor
            todo += [t for t in map(_target, descriptor.fields) if t is not None]
        changed = True
        while changed:
            changed = False
            for name, descriptor in types.items():
                if name not in self._leads and (name in self._looks or any(
                        t is not None and t.full_name in self._leads for t in map(_target, descriptor.fields))):
                    self._leads.add(name)
                    changed = True
        self._seen.update(types)


def _target(field: Any) -> Any:
    """The message type a field leads to (a map's value type), None for a scalar."""
    if field.type != field.TYPE_MESSAGE:
        return None
    entry = field.message_type
    if entry.GetOptions().map_entry:
        value = entry.fields_by_name["value"]
        return value.message_type if value.type == value.TYPE_MESSAGE else None
    return entry
