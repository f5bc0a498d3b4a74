"""Pipelines on the master: step jobs, a pipeline run's block, and the signal of a pipeline run's end.

A pipeline is a job whose spec has steps (docs/pipelines.md). Each step runs as a job of its own — a *step
job*, made by the master, one per step and pipeline version, never changed, named ``{pipeline}.{step}`` and
never fired by itself (trigger ``manual``) — so a step's tasks are ordinary tasks: leases, retries,
fencing, logs and the spec cache work unchanged. Which step runs when is decided in Lua alone (lib.lua's
pipeline functions): the script that ends a step's run releases the steps it makes ready, in the same step.

What is left to Python is the signal. A pipeline run ends in the script that ended its last step's run,
which returns that run's end only; :class:`PipelineRuns` hears it (:class:`RunEnded`) and, when the
pipeline run records that run as the one that ended it (``ended_by``), publishes the pipeline run's end
too — once, whoever ends what — so waiters, webhooks and metrics see pipeline runs as any run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from sparkyard import ids
from sparkyard.master.splitter import split_job
from sparkyard.master.store_values import RunBlock
from sparkyard.pipeline_spec import rule_name
from sparkyard.v1 import sparkyard_pb2 as pb

if TYPE_CHECKING:
    from sparkyard.master.background import Spawner
    from sparkyard.master.events import RunEnded
    from sparkyard.master.metrics import MasterMetrics
    from sparkyard.master.outcomes import Outcomes
    from sparkyard.master.store import Store

log = logging.getLogger(__name__)


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


class PipelineRuns:
    """Publishes a pipeline run's end when the run that ended it is reported ended (see the module doc)."""

    def __init__(self, store: Store, outcomes: Outcomes, background: Spawner, metrics: MasterMetrics) -> None:
        self._store = store
        self._outcomes = outcomes
        self._background = background
        self._metrics = metrics

    def run_ended(self, event: RunEnded) -> None:
        self._background.spawn(self._pipeline_end(event.run_id), f"pipeline-of-{event.run_id}")

    async def _pipeline_end(self, run_id: str) -> None:
        ended = await self._store.pipeline_run_ended_by(run_id)
        if ended is not None:
            self._metrics.pipeline_runs.labels(ended.state.value).inc()
            self._metrics.pipeline_duration.labels(ended.state.value).observe(ended.took_ms / 1000)
            self._outcomes.run_ended(ended.run_id, ended.state)
