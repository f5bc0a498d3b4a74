"""``sparkyard apply FILE…``: make the master's pipelines match the definition files.

Each file is run and the pipelines it defines are collected (:func:`sparkyard.pipeline.load`); every
pipeline is compared with the master's pipeline of the same name: missing → created, different → updated
(a new version, effective from its next run: a run in progress keeps the steps it was fired with), the same →
left alone, so applying the same files twice changes nothing. With ``--prune``, pipelines on the master that
no file defines any more are deleted (a pipeline with a run in progress is refused, naming it). With
``--dry-run`` the plan is printed and nothing is changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from sparkyard import errors
from sparkyard.client import Client
from sparkyard.pipeline import load
from sparkyard.pipeline_spec import normalize_pipeline, same_version
from sparkyard.spec import SpecError
from sparkyard.v1 import sparkyard_pb2 as pb

# ListJobsRequest.limit's maximum: every pipeline on the master, read page by page from their own index.
EVERY_PIPELINE = 2**31 - 1


@dataclass(frozen=True)
class Change:
    action: str  # create | update | delete | unchanged
    name: str
    job_id: str  # '' for a pipeline still to create (a dry run)
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"action": self.action, "name": self.name, "job_id": self.job_id, "detail": self.detail}


def _changed_fields(new: pb.JobSpec, old: pb.JobSpec) -> list[str]:
    """The top-level spec fields whose values differ (steps compared without their step jobs)."""
    names = [f.name for f in pb.JobSpec.DESCRIPTOR.fields]
    return [name for name in names if not same_version(_only(new, name, names), _only(old, name, names))]


def _only(spec: pb.JobSpec, keep: str, names: list[str]) -> pb.JobSpec:
    out = pb.JobSpec()
    out.CopyFrom(spec)
    for name in names:
        if name != keep:
            out.ClearField(name)
    return out


def _pipelines(jobs: Sequence[pb.Job]) -> list[pb.Job]:
    return [j for j in jobs if j.spec.steps and j.state in (pb.JOB_ACTIVE, pb.JOB_PAUSED)]


def apply(client: Client, paths: Sequence[str], *, prune: bool = False, dry_run: bool = False) -> list[Change]:
    pipelines = load(paths)
    # Each pipeline is found by its name (one read of the master's name index, at any number of jobs); only
    # --prune needs the list of every pipeline (the master's index of pipelines: other jobs are not read).
    existing: dict[str, list[pb.Job]] = {p.name: _pipelines(client.jobs(name=p.name)) for p in pipelines}
    if prune:
        for job in _pipelines(client.jobs(limit=EVERY_PIPELINE, pipelines=True)):
            existing.setdefault(job.spec.name, [])
            if all(j.id != job.id for j in existing[job.spec.name]):
                existing[job.spec.name].append(job)
    changes: list[Change] = []
    for pipeline in pipelines:
        spec = pipeline.to_spec()
        try:
            norm = normalize_pipeline(spec)
        except SpecError as exc:
            raise errors.InvalidArgument(f"pipeline {pipeline.name!r}: {exc}") from None
        found = existing.pop(pipeline.name, [])
        if len(found) > 1:
            raise errors.InvalidArgument(f"pipeline {pipeline.name!r}: ambiguous: {len(found)} pipelines of that name on "
                                         f"the master ({', '.join(j.id for j in found)}); delete all but one")
        if not found:
            job_id = ""
            if not dry_run:
                job_id = client.submit_spec(spec).job.id
            changes.append(Change("create", pipeline.name, job_id, f"{len(spec.steps)} steps"))
            continue
        old = found[0]
        if same_version(norm, old.spec):
            changes.append(Change("unchanged", pipeline.name, old.id, ""))
            continue
        fields = _changed_fields(norm, old.spec)
        if not dry_run:
            client.update_spec(old.id, spec, _update_fields(fields))
        changes.append(Change("update", pipeline.name, old.id, ", ".join(fields)))
    if prune:
        for name, jobs in sorted(existing.items()):
            for job in jobs:
                if not dry_run:
                    client.delete(job.id)
                changes.append(Change("delete", name, job.id, "no file defines it"))
    return changes


def _update_fields(fields: list[str]) -> list[str]:
    """UpdateJob's field names for changed top-level fields (the trigger's kind and bounds are separate)."""
    out = []
    for name in fields:
        if name == "trigger":
            out += ["trigger.kind", "trigger.start_at", "trigger.end_at", "trigger.max_runs"]
        elif name == "retry":
            out += ["retry.max_attempts", "retry.initial_backoff", "retry.max_backoff"]
        elif name == "split":
            out += ["split.inputs", "split.parallelism", "split.max_concurrent"]
        elif name in ("bundle", "entrypoint", "py_files", "files", "submit_dir"):
            continue  # a pipeline ships code only through its steps
        else:
            out.append(name)
    return out or ["steps"]


SYMBOL = {"create": "+", "update": "~", "delete": "-", "unchanged": "="}


def describe(change: Change, dry_run: bool) -> str:
    verb = {"create": "create", "update": "update", "delete": "delete", "unchanged": "unchanged"}[change.action]
    text = f"{SYMBOL[change.action]} {verb} pipeline {change.name}"
    if change.job_id:
        text += f" ({change.job_id})"
    if change.detail:
        text += f": {change.detail}"
    return text + (" [dry run]" if dry_run and change.action != "unchanged" else "")
