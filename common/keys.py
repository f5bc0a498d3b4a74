"""Every Redis key Sparkyard uses, and the only place that formats one.

All keys live under a namespace prefix (default ``sy``) so several clusters can share one Redis.
``P`` below stands for that prefix.

====================================  ======  =========================================================
key                                   type    meaning
====================================  ======  =========================================================
P:job:{job}                           hash    job record: spec (protobuf, master/records.py), state, created_ms, updated_ms,
                                              next_fire_ms, runs, skipped, last_run_id (absent = none / 0),
                                              awaits (while in awaiting: the run whose end sets the next
                                              fire time), w:{index} (worker that last ran task index),
                                              after (a child job: its parent's id), pipeline (a
                                              pipeline step's job: the pipeline's id; in P:jobs for
                                              retention, not listed), bundle (a step job's bundle digest,
                                              dropped from its references when the pipeline is deleted)
P:jobs                                zset    job id → created_ms (listing, newest first)
P:jobs:paused                         zset    the PAUSED jobs of P:jobs, same scores: listing them reads
                                              this, not every job (kept by job_state.lua, cancel.lua,
                                              reschedule.lua and unlink_job; retention.lua adds a paused
                                              job missing from it, as an earlier version left them)
P:jobs:pipelines                      zset    the pipelines of P:jobs (jobs with steps), same scores: `apply
                                              --prune` and `jobs --pipelines` read this, not every job (kept
                                              by submit.lua and unlink_job; update.lua and retention.lua add
                                              a pipeline missing from it, as an earlier version left them)
P:name:{name}                         zset    ids of the jobs named {name}, score created_ms (not a pipeline's step jobs):
                                              a job's name resolves to its id with one read (the job
                                              hash keeps it as field name, to drop it on update/delete)
P:idem:{period}:{bucket}              hash    client idempotency key → '{expiry ms}:{job id}', the keys whose
                                              SHA-1 starts with {bucket} (4 hex digits) written in {period}
                                              (ms ÷ the TTL); expires with the period after (submit.lua)
P:schedule                            zset    job id → next fire time in ms (durable triggers)
P:awaiting                            set     fixed-delay jobs whose next fire time waits for a run
                                              (job field awaits) to end
P:purge                               zset    job id → deleted ms: deleted jobs (their hash is gone) whose
                                              runs, tasks and attempts retention.lua still has to delete
P:job:{job}:runs                      zset    run id → scheduled_ms (a job's runs)
P:job:{job}:active                    set     run ids of the job that are not terminal (overlap policy)
P:job:{job}:backfill                  zset    past fire times still to run for a backfill (ms → ms)
P:backfills                           hash    job id → most backfill runs at once, while it has a plan
P:job:{job}:children                  set     ids of the child jobs of the job (their trigger is --after it)
P:parents                             set     ids of the jobs that have child jobs
P:run:{run}                           hash    run record: state, job_id, scheduled_ms, fired_ms,
                                              started_ms, finished_ms, task_count, succeeded, dead,
                                              cancelled, reason (counters absent = 0); and what its tasks
                                              share, written only when not the default: max_attempts,
                                              backoff_ms, backoff_mult, backoff_max_ms (absent: no
                                              retries), timeout_ms (absent: none), max_concurrent;
                                              a pipeline run: graph (JSON [[step, job, [after], rule]]);
                                              a step's run: prun (its pipeline run), step (its name)
P:run:{run}:steps                     hash    a pipeline run's steps: {step} → state (StepState),
                                              r:{step} → the step's run id once made, b:{step} → the
                                              step's run block (JSON) until its run is made
P:job:{job}:steps                     set     a pipeline's step jobs, of every version (deleted with it)
P:pipeline_runs:running               zset    pipeline run id → fired ms: the pipeline runs not yet ended
                                              (added and removed by the scripts that start and end them)
P:run:{run}:gate                      zset    task id → index: READY tasks of a run held back by its
                                              concurrency cap (enter the ready queue one by one)
P:task:{task}                         hash    task record: state, run_id, job_id, index, group, score,
                                              inputs (JSON, absent = none), attempts, failures, lost,
                                              token, worker, prev_worker, lease_ms, result, error,
                                              not_before_ms; its latest attempt (number = attempts):
                                              att_leased_ms, att_started_ms, att_log, and once it ended
                                              att_state, att_finished_ms, att_worker, att_error,
                                              att_traceback; set only when needed: routing, route
                                              (non-default routing), aff (recurring job: remember the
                                              worker in job w:{index}), tmo (its run has a timeout)
P:task:{task}:attempts                hash    attempt number → record (JSON) of each earlier attempt,
                                              archived when the next one is claimed
P:ready:{group}                       zset    task id → score = queued ms (run fired_ms) − priority × aging (the
                                              ready queue; lowest first, ties by task id)
P:groups                              set     node groups that have had a ready queue
P:delayed                             zset    task id → retry-after time in ms (FAILED, in backoff)
P:leases                              zset    task id → lease deadline in ms (Redis TIME)
P:timeouts                            zset    task id → attempt deadline in ms (master-side backstop)
P:worker:{worker}:leases              set     task ids leased to the worker
P:workers                             hash    worker id → worker record (JSON)
P:fence                               string  the fencing-token counter (INCR, strictly increasing)
P:leader                              hash    the leading master: id, epoch, address (expires with its
                                              lease; renewed by the leader, taken by a standby when gone)
P:epoch                               string  the leader epoch: +1 on every change of leader; every
                                              write script refuses a caller whose epoch is not this
P:masters                             hash    master id → {address, role, seen_ms} (JSON): who is there
P:bundle:{digest}                     hash    a shipped bundle: size, created_ms, held_ms (a client was
                                              last told it is here), c0 … cN (1 MiB chunks);
                                              written under P:bundle:{digest}:up:{upload} and RENAMEd
                                              once its size and sha256 are checked
P:bundle:{digest}:jobs                set     ids of the jobs that name the bundle (its references)
P:bundles                             zset    digest → created or last looked-at ms (the garbage
                                              collector's list, oldest first)
P:webhooks                            zset    run id → when its webhook is next due (ms): deliveries not
                                              yet made, written by the script that ended the run
P:webhook_tries                       hash    run id → failed tries of its webhook so far (absent = 0)
P:webhook_defaults                    hash    F, S → 1 when the leader has a default URL for failed,
                                              succeeded runs (--on-failure, --on-success)
====================================  ======  =========================================================

Ids: a job id is ``j`` + 11 hex digits of creation ms + 10 random hex digits; a run id is
``{job}.{scheduled_ms:013d}``; a task id is ``{run}.{index:05d}`` — so every id names its parents, ids of
one kind sort by time, and a run id is the same whichever master fires it (DESIGN §3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_NAMESPACE = "sy"
# The namespace is rendered into Lua source, so it is restricted to characters that need no quoting.
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")

# Lua scripts build keys of records they find by id (a task id read from a queue) with these templates;
# ``{}`` is replaced by the id. They are rendered into the script prelude by :meth:`Keys.lua_prelude`.
_TEMPLATES: dict[str, str] = {
    "job": "job:{}",
    "job_runs": "job:{}:runs",
    "job_active": "job:{}:active",
    "job_backfill": "job:{}:backfill",
    "job_children": "job:{}:children",
    "run": "run:{}",
    "run_gate": "run:{}:gate",
    "run_steps": "run:{}:steps",
    "job_steps": "job:{}:steps",
    "task": "task:{}",
    "attempts": "task:{}:attempts",
    "ready": "ready:{}",
    "worker_leases": "worker:{}:leases",
    "idem": "idem:{}",
    "job_name": "name:{}",
    "bundle": "bundle:{}",
    "bundle_jobs": "bundle:{}:jobs",
}


@dataclass(frozen=True)
class Keys:
    """Key builder bound to one namespace."""

    namespace: str = DEFAULT_NAMESPACE

    def __post_init__(self) -> None:
        if not NAMESPACE_PATTERN.fullmatch(self.namespace):
            raise ValueError(f"namespace {self.namespace!r}: use 1-64 of A-Z a-z 0-9 _ . -")

    def _k(self, name: str, ident: str) -> str:
        return f"{self.namespace}:{_TEMPLATES[name].format(ident)}"

    def job(self, job_id: str) -> str:
        return self._k("job", job_id)

    def job_runs(self, job_id: str) -> str:
        return self._k("job_runs", job_id)

    def job_active(self, job_id: str) -> str:
        return self._k("job_active", job_id)

    def job_backfill(self, job_id: str) -> str:
        return self._k("job_backfill", job_id)

    def job_children(self, job_id: str) -> str:
        return self._k("job_children", job_id)

    def run(self, run_id: str) -> str:
        return self._k("run", run_id)

    def run_gate(self, run_id: str) -> str:
        return self._k("run_gate", run_id)

    def run_steps(self, run_id: str) -> str:
        return self._k("run_steps", run_id)

    def job_steps(self, job_id: str) -> str:
        return self._k("job_steps", job_id)

    def task(self, task_id: str) -> str:
        return self._k("task", task_id)

    def attempts(self, task_id: str) -> str:
        return self._k("attempts", task_id)

    def ready(self, group: str) -> str:
        return self._k("ready", group)

    def worker_leases(self, worker_id: str) -> str:
        return self._k("worker_leases", worker_id)

    def idempotency(self, bucket: str) -> str:
        """The hash of one period's bucket of idempotency keys, ``{period}:{bucket}`` (submit.lua)."""
        return self._k("idem", bucket)

    def job_name(self, name: str) -> str:
        return self._k("job_name", name)

    def bundle(self, digest: str) -> str:
        return self._k("bundle", digest)

    def bundle_upload(self, digest: str, upload_id: str) -> str:
        return f"{self._k('bundle', digest)}:up:{upload_id}"

    def bundle_jobs(self, digest: str) -> str:
        return self._k("bundle_jobs", digest)

    @property
    def bundles(self) -> str:
        return f"{self.namespace}:bundles"

    @property
    def jobs(self) -> str:
        return f"{self.namespace}:jobs"

    @property
    def jobs_paused(self) -> str:
        return f"{self.namespace}:jobs:paused"

    @property
    def jobs_pipelines(self) -> str:
        return f"{self.namespace}:jobs:pipelines"

    @property
    def backfills(self) -> str:
        return f"{self.namespace}:backfills"

    @property
    def parents(self) -> str:
        return f"{self.namespace}:parents"

    @property
    def schedule(self) -> str:
        return f"{self.namespace}:schedule"

    @property
    def awaiting(self) -> str:
        return f"{self.namespace}:awaiting"

    @property
    def purge(self) -> str:
        return f"{self.namespace}:purge"

    @property
    def groups(self) -> str:
        return f"{self.namespace}:groups"

    @property
    def delayed(self) -> str:
        return f"{self.namespace}:delayed"

    @property
    def leases(self) -> str:
        return f"{self.namespace}:leases"

    @property
    def timeouts(self) -> str:
        return f"{self.namespace}:timeouts"

    @property
    def workers(self) -> str:
        return f"{self.namespace}:workers"

    @property
    def fence(self) -> str:
        return f"{self.namespace}:fence"

    @property
    def leader(self) -> str:
        return f"{self.namespace}:leader"

    @property
    def epoch(self) -> str:
        return f"{self.namespace}:epoch"

    @property
    def masters(self) -> str:
        return f"{self.namespace}:masters"

    @property
    def running_pipelines(self) -> str:
        return f"{self.namespace}:pipeline_runs:running"

    @property
    def webhooks(self) -> str:
        return f"{self.namespace}:webhooks"

    @property
    def webhook_tries(self) -> str:
        return f"{self.namespace}:webhook_tries"

    @property
    def webhook_defaults(self) -> str:
        return f"{self.namespace}:webhook_defaults"

    def lua_prelude(self) -> str:
        """Lua functions ``K.job(id)``, ``K.task(id)``… that build the same keys as this class."""
        lines = ["local K = {}"]
        for name, template in _TEMPLATES.items():
            head, _, tail = template.partition("{}")
            lines.append(
                f"K.{name} = function(id) return '{self.namespace}:{head}' .. id .. '{tail}' end"
            )
        for name in ("jobs", "jobs_paused", "jobs_pipelines", "schedule", "awaiting", "purge", "groups", "delayed", "leases", "timeouts", "workers",
                     "fence", "bundles", "leader", "epoch", "masters", "backfills", "parents", "webhooks",
                     "webhook_tries", "webhook_defaults", "running_pipelines"):
            lines.append(f"K.{name} = '{getattr(self, name)}'")
        return "\n".join(lines)
