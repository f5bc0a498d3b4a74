"""What makes a pipeline spec valid: step names, a graph without cycles, known trigger rules.

A pipeline is a :class:`JobSpec` with ``steps`` and no entrypoint. Its own fields say when and how its runs
fire (trigger, misfire, overlap, labels, webhooks); each step's spec says how the step runs (every job
option). Checked on the client (``Pipeline``, so a mistake in a definition file is reported before anything
is sent) and again on the master, which stores only what passes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sparkyard.errors import quote
from sparkyard.spec import SpecError, normalize
from sparkyard.v1 import sparkyard_pb2 as pb

STEP_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_STEPS = 1000
RULES: dict[str, int] = {
    "all_succeeded": pb.ALL_SUCCEEDED, "all_done": pb.ALL_DONE, "one_failed": pb.ONE_FAILED,
    "none_failed": pb.NONE_FAILED,
}
# Where a pipeline's own fields are checked by normalize(), which requires an entrypoint, this module one
# stands in for the steps (and is removed again): the pipeline's trigger, misfire and overlap are a job's.
_STAND_IN = "sparkyard.pipeline_spec:steps"


def rule_name(rule: int) -> str:
    """The Lua name of a trigger rule (lib_pipelines.lua rule_verdict)."""
    return pb.TriggerRule.Name(rule or pb.ALL_SUCCEEDED)


def check_graph(steps: Sequence[tuple[str, Sequence[str]]]) -> None:
    """Raise SpecError naming the first bad step: a bad or duplicate name, an unknown upstream, a cycle."""
    if not steps:
        raise SpecError("steps", "a pipeline needs at least one step")
    if len(steps) > MAX_STEPS:
        raise SpecError("steps", f"{len(steps)} steps, over the maximum of {MAX_STEPS}")
    seen: set[str] = set()
    for i, (name, _) in enumerate(steps):
        if not STEP_NAME.fullmatch(name):
            raise SpecError(f"steps[{i}].name", f"{quote(name)}: use 1-64 of A-Z a-z 0-9 _ -")
        if name in seen:
            raise SpecError(f"steps[{i}].name", f"{quote(name)} is defined twice")
        seen.add(name)
    for i, (name, after) in enumerate(steps):
        for upstream in after:
            if upstream not in seen:
                raise SpecError(f"steps[{i}].after", f"step {quote(name)} comes after {quote(upstream)}, "
                                "which is not a step of the pipeline")
            if upstream == name:
                raise SpecError(f"steps[{i}].after", f"step {quote(name)} comes after itself")
    cycle = _cycle({name: list(after) for name, after in steps})
    if cycle:
        raise SpecError("steps", "a cycle: " + " → ".join(cycle))


def _cycle(after: dict[str, list[str]]) -> list[str]:
    """One cycle of the graph as a path that returns to its start ([] when there is none)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for up in after[node]:
            if state.get(up) == 1:
                return path[path.index(up):] + [up]
            if up not in state:
                found = visit(up)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in after:
        if node not in state:
            found = visit(node)
            if found:
                return list(reversed(found))
    return []


def normalize_pipeline(spec: pb.JobSpec, *, wellformed_checked: bool = False) -> pb.JobSpec:
    """A validated copy of a pipeline spec: its own fields checked as a job's, every step's spec as a job's
    (without a trigger: a step runs when the graph says), the graph checked (``wellformed_checked`` as
    :func:`~sparkyard.spec.normalize` takes it)."""
    if spec.entrypoint:
        raise SpecError("entrypoint", "a pipeline has steps instead of an entrypoint")
    if not spec.name:
        raise SpecError("name", "a pipeline needs a name")
    check_graph([(s.name, list(s.after)) for s in spec.steps])
    own = pb.JobSpec()
    own.CopyFrom(spec)
    del own.steps[:]
    own.entrypoint = _STAND_IN
    out = normalize(own, wellformed_checked=wellformed_checked)
    out.entrypoint = ""
    for i, step in enumerate(spec.steps):
        if step.trigger_rule not in pb.TriggerRule.values():
            raise SpecError(f"steps[{i}].trigger_rule", f"unknown value {step.trigger_rule}")
        if step.spec.steps:
            raise SpecError(f"steps[{i}].spec.steps", "a step cannot be a pipeline")
        added = out.steps.add()
        added.CopyFrom(step)
        added.trigger_rule = step.trigger_rule or pb.ALL_SUCCEEDED
        step_spec = pb.JobSpec()
        step_spec.CopyFrom(step.spec)
        step_spec.ClearField("trigger")
        step_spec.trigger.manual = True
        if not step_spec.name:
            step_spec.name = f"{spec.name}.{step.name}"
        try:
            added.spec.CopyFrom(normalize(step_spec, wellformed_checked=wellformed_checked))
        except SpecError as exc:
            raise SpecError(f"steps[{i}].spec.{exc.field}", str(exc).removeprefix(f"{exc.field}: ")) from None
    return out


def same_version(a: pb.JobSpec, b: pb.JobSpec) -> bool:
    """Whether two specs say the same, ignoring which step jobs a pipeline's steps were given (an update of
    a pipeline that changes nothing must not make a new version)."""
    return _without_step_jobs(a).SerializeToString(deterministic=True) == \
        _without_step_jobs(b).SerializeToString(deterministic=True)


def _without_step_jobs(spec: pb.JobSpec) -> pb.JobSpec:
    if not spec.steps:
        return spec
    out = pb.JobSpec()
    out.CopyFrom(spec)
    for step in out.steps:
        step.job_id = ""
        step.spec.pipeline = ""
    return out
