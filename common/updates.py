"""A job's update (``sparkyard update``, ``UpdateJob``): which fields may change, and the merge of a change
into the current spec. The merged spec is then validated as a submit is (:func:`sparkyard.spec.normalize`):
one validation path.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from sparkyard.spec import SpecError
from sparkyard.v1 import sparkyard_pb2 as pb

# The fields an update may change: JobSpec field paths, plus two that stand for several fields at once.
# `trigger.kind` is the trigger itself (its oneof: now, at, delay, cron with its tz, every with fixed_delay,
# after with its condition; a child job's parent cannot be changed, see JobManager.update),
# and `code` is the shipped code (entrypoint, py_files, files, bundle and the submit_dir they resolve against).
UPDATABLE = frozenset({
    "name", "args", "conf", "env", "group", "priority", "runner", "cwd", "task_memory_mb", "labels", "timeout",
    "driver_memory", "executor_memory", "executor_cores", "num_executors",
    "retry.max_attempts", "retry.initial_backoff", "retry.max_backoff",
    "trigger.kind", "trigger.start_at", "trigger.end_at", "trigger.max_runs",
    "misfire", "misfire_catch_up_limit", "overlap", "routing", "routing_key",
    "split.inputs", "split.parallelism", "split.max_bytes_per_sec", "split.max_records_per_sec",
    "split.task_bytes_per_sec", "split.task_records_per_sec", "split.max_concurrent",
    "on_failure", "on_success", "code", "steps", "max_active_runs",
})
_COMPOSITE = {
    "trigger.kind": ("trigger.now", "trigger.at", "trigger.delay", "trigger.cron", "trigger.every",
                     "trigger.after", "trigger.manual"),
    "code": ("entrypoint", "py_files", "files", "bundle", "submit_dir"),
}


def apply_update(current: pb.JobSpec, change: pb.JobSpec, fields: list[str] | tuple[str, ...]) -> pb.JobSpec:
    """A copy of ``current`` with the listed ``fields`` taken from ``change`` (the others keep their
    values), not yet normalized. SpecError names an unknown field; an empty list changes nothing, which is
    refused too (an update that says nothing is a mistake)."""
    if not fields:
        raise SpecError("fields", "name at least one field to change")
    unknown = sorted(set(fields) - UPDATABLE)
    if unknown:
        raise SpecError("fields", f"cannot change {', '.join(unknown)} (changeable: {', '.join(sorted(UPDATABLE))})")
    out = pb.JobSpec()
    out.CopyFrom(current)
    for name in fields:
        paths = _COMPOSITE.get(name, (name,))
        if name == "trigger.kind":  # the oneof: clear it, then copy the kind that is set
            out.trigger.ClearField("kind")
        for path in paths:
            _copy_path(change, out, path, oneof=name == "trigger.kind")
    return out


def _copy_path(source: Message, target: Message, path: str, *, oneof: bool) -> None:
    """Copy one (dotted) field from ``source`` to ``target``; a oneof member only if it is set."""
    *parents, leaf = path.split(".")
    for part in parents:
        source, target = getattr(source, part), getattr(target, part)
    field: FieldDescriptor = source.DESCRIPTOR.fields_by_name[leaf]
    value = getattr(source, leaf)
    if field.is_repeated:
        into = getattr(target, leaf)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            into.clear()
            into.update(value)
        else:
            del into[:]
            into.extend(value)
    elif field.message_type is not None or oneof:
        if source.HasField(leaf):
            getattr(target, leaf).CopyFrom(value) if field.message_type is not None else setattr(target, leaf, value)
        elif not oneof:
            target.ClearField(leaf)
    else:
        setattr(target, leaf, value)
