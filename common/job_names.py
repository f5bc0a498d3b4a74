"""A job named by its name where a job id is asked for (``sparkyard runs extract``, ``--after extract``).

The client resolves the name, in this one place, with one ListJobs call filtered by name: the master answers
it from its name index (one read however many jobs there are; master/names.py), so a name costs one round
trip more than an id and every RPC that takes a job id stays exact. Names need not be unique: a name two
jobs share is refused with "ambiguous", naming them, and a job id always works.
"""

from __future__ import annotations

from typing import Callable

from sparkyard import errors, ids
from sparkyard.v1 import sparkyard_pb2 as pb

# Most jobs of one name listed to count them for "ambiguous" (the master's largest listing).
MAX_NAMED = 10_000
_SHOWN = 3


def resolve_job(ref: str, list_named: Callable[[str, int], list[pb.Job]], field: str = "job_id") -> str:
    """The id of the job ``ref`` names: ``ref`` itself when it is a job id, else the one job with that name;
    InvalidArgument naming ``field`` when no job has it, or it is ambiguous."""
    found = ref if ids.JOB_ID.fullmatch(ref) else _named_one(ref, list_named)
    if found is None:
        raise errors.InvalidArgument(f"{field}: {errors.quote(ref)} is neither a job id nor the name of a job "
                                     "(sparkyard jobs lists them)")
    return found


def _named_one(ref: str, list_named: Callable[[str, int], list[pb.Job]]) -> str | None:
    """The id of the one job named ``ref``; None when none is; InvalidArgument when several are."""
    jobs = list_named(ref, MAX_NAMED) if ref else []
    if not jobs:
        return None
    if len(jobs) > 1:
        count = f"{len(jobs)}{'+' if len(jobs) == MAX_NAMED else ''}"
        shown = ", ".join(j.id for j in jobs[:_SHOWN]) + (", …" if len(jobs) > _SHOWN else "")
        raise errors.InvalidArgument(f"ambiguous: {count} jobs named {errors.quote(ref)} ({shown}); give a job id")
    return jobs[0].id


def resolve_target(ref: str, list_named: Callable[[str, int], list[pb.Job]]) -> str:
    """A job, run or task id as it is, or the id of the job a name names (for cancel)."""
    try:
        ids.parse_id(ref)
        return ref
    except ValueError as not_an_id:
        found = _named_one(ref, list_named)
        if found is None:
            raise errors.InvalidArgument(f"{not_an_id}, nor the name of a job") from None
        return found


def resolve_after(spec: pb.JobSpec, list_named: Callable[[str, int], list[pb.Job]]) -> None:
    """Put the parent's id in a child job's spec given with the parent's name (``--after extract``)."""
    if spec.trigger.WhichOneof("kind") == "after":
        spec.trigger.after.job_id = resolve_job(spec.trigger.after.job_id, list_named, field="after")
