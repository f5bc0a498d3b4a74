"""Pipelines on the master: step jobs and a pipeline run's block.

A pipeline is a job whose spec has steps (docs/pipelines.md). Each step runs as a job of its own — a *step
job*, made by the master, one per step and pipeline version, never changed, named ``{pipeline}.{step}`` and
never fired by itself (trigger ``manual``) — so a step's tasks are ordinary tasks: leases, retries,
fencing, logs and the spec cache work unchanged. Which step runs when is decided in Lua alone (the pipeline
functions of lib_pipelines.lua): the script that ends a step's run releases the steps it makes ready, in the same step,
and when that ends the pipeline run, returns the pipeline run's end with the step run's end
(:class:`sparkyard.master.store_outcomes.PipelineEnd`), which :class:`sparkyard.master.outcomes.Outcomes`
publishes right after it — so waiters, webhooks and metrics see pipeline runs as any run, without a read.
"""

from __future__ import annotations

from typing import Any

from sparkyard import ids
from sparkyard.master.splitter import split_job
from sparkyard.master.store_values import RunBlock
from sparkyard.pipeline_spec import rule_name
from sparkyard.v1 import sparkyard_pb2 as pb


def with_step_jobs(job_id: str, spec: pb.JobSpec, now_ms: int) -> tuple[pb.JobSpec, tuple[tuple[str, pb.JobSpec], ...]]:
    """A copy of a (normalized) pipeline spec whose steps name new step jobs, and those jobs' specs."""
    out = pb.JobSpec()
    out.CopyFrom(spec)
    steps = []
    for step, step_id in zip(out.steps, ids.new_job_ids(now_ms, len(out.steps))):
        step.job_id = step_id
        step.spec.pipeline = job_id
        steps.append((step_id, step.spec))
    return out, tuple(steps)


def pipeline_block(spec: pb.JobSpec, scheduled_ms: int, aging_ms: int, keep: dict[str, str]) -> dict[str, Any]:
    """What create_run needs beyond a run's fields to make a pipeline run: its graph (step, job, upstream
    steps, trigger rule) and each step's run block, split now, so that Lua can make a step's run alone;
    for a rerun of failed steps, the steps kept as they succeeded (name → their run, read by ctx.upstream)."""
    kept = {name: run for name, run in keep.items() if any(s.name == name for s in spec.steps)}
    return {
        "graph": [[s.name, s.job_id, list(s.after), rule_name(s.trigger_rule)] for s in spec.steps],
        "steps": {s.name: RunBlock.of(s.spec, scheduled_ms, split_job(s.spec), aging_ms).to_wire()
                  for s in spec.steps if s.name not in kept},
        "keep": kept,
    }
