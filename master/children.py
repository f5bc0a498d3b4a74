"""Child jobs (``--after JOB[:succeeded|failed|always]``): what a child's firing needs, stored with it.

A child job fires when a run of its parent ends so; the firing is made in Lua, in the script that ended the
parent's run (lib.lua ``fire_children``, called by ``settle_run``), so it cannot be lost to a change of
leader or a crash between the end and the firing, and is never made twice (the child's run id is the
child's id and the parent run's time; a second attempt finds it). For that, a child job carries the block
of its runs (``cblock``: settings and task inputs, split when it is submitted or updated, with its trigger
condition and overlap policy), which Lua completes with the parent run's scheduled time — a chain's logical
time all the way down — and the parent run's id (``after_run``).

A paused child skips the parent runs that end while it is paused; ``always`` means SUCCEEDED, FAILED or
CANCELLED (a SKIPPED run did not run); a child with overlap ``forbid`` records a SKIPPED run while one of
its runs is active (``replace`` is ``allow`` here: nothing is cancelled for a parent's end).
"""

from __future__ import annotations

from typing import Any

from sparkyard.master.splitter import split_job
from sparkyard.master.store_values import RunBlock
from sparkyard.v1 import sparkyard_pb2 as pb

WHEN = {pb.AFTER_SUCCEEDED: "SUCCEEDED", pb.AFTER_FAILED: "FAILED", pb.AFTER_ALWAYS: "ALWAYS"}


def child_block(spec: pb.JobSpec, spec_version: int, aging_ms: int) -> dict[str, Any]:
    """A child job's run block for lib.lua's fire_children: scheduled at 0 (Lua adds the parent run's
    scheduled time to its score), with the condition (``when``) and the overlap policy."""
    block = RunBlock.of(spec, 0, split_job(spec), aging_ms, spec_version).to_wire()
    block["when"] = WHEN.get(spec.trigger.after.when, "SUCCEEDED")
    block["overlap"] = "forbid" if spec.overlap == pb.OVERLAP_FORBID else "allow"
    return block
