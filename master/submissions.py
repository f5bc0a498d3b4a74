"""Submitting jobs: a spec checked, split and given its first fire time, then stored by submit.lua.

The submit path of :class:`~sparkyard.master.jobs.JobManager` (which also checks an updated spec through it).
Validation happens here (never trusting the client): the spec through :func:`sparkyard.spec.normalize`,
the split through the splitter, the first fire time through the trigger rules; errors are domain errors
(:mod:`sparkyard.errors`) whose message names the field or id.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.config import MasterConfig
from sparkyard.errors import FailedPrecondition, InvalidArgument, NotFound
from sparkyard.master import triggers
from sparkyard.master.arming import Arming
from sparkyard.master.bundles import BundleStore
from sparkyard.master.limits import check_sizes
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.pipelines import with_step_jobs
from sparkyard.master.records import JobRecord
from sparkyard.master.splitter import split_job
from sparkyard.master.store import Store
from sparkyard.master.store_values import NewJob, SubmitResult
from sparkyard.pipeline_spec import normalize_pipeline
from sparkyard.spec import SpecError, normalize
from sparkyard.states import JobState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Submits of a bulk call sent to Redis in one script call.
SUBMIT_PIPELINE = 1000
# A new job id that is already taken is drawn again this many times (40 random bits: it never is).
ID_ATTEMPTS = 3
# A bulk submit checks (and answers) this many jobs between two turns of the event loop: a thousand jobs'
# cron parsing in one stretch held the loop for a second on a loaded machine, and the leader's lease renewal
# (every half second, lost after three) waited behind it until a standby took over.
YIELD_EVERY = 50
# Distinct specs whose validation and split are remembered (see Submissions.validated).
VALIDATION_CACHE_SIZE = 256


@dataclass
class Submitted:
    job: JobRecord
    duplicate: bool


def bundle_missing(digest: str) -> InvalidArgument:
    """A job names a bundle the master does not have: never uploaded, or collected since it was checked."""
    return InvalidArgument(f"bundle {digest} is not on the master: upload it first (sparkyard submit and "
                           "Client.submit do)")


def first_fire_ms(trigger: pb.Trigger, now_ms: int) -> int:
    """A trigger's first fire time from ``now_ms``; InvalidArgument if it would never fire."""
    kind = trigger.WhichOneof("kind")
    if kind == "now":
        return now_ms
    if kind == "delay":
        return now_ms + trigger.delay.ToMilliseconds()
    first = triggers.first_fire_ms(trigger, now_ms)
    if first == triggers.NONE:
        raise InvalidArgument("trigger.end_at: the job would never fire (end_at is before its first fire time)")
    return first


class Submissions:
    """Checks and stores new jobs. Apart from :class:`~sparkyard.master.jobs.JobManager` so that the submit path (validation cache,
    bundle and parent checks, id redraws, bulk chunks) reads as one piece; an update's merged spec is
    checked by the same :meth:`validated` and :meth:`check_digests`."""

    def __init__(self, cfg: MasterConfig, store: Store, clock: Clock, outcomes: Outcomes, arming: Arming,
                 bundles: BundleStore, metrics: MasterMetrics) -> None:
        self._verbose = True  # one log line per job for single submits, one per call for bulk ones
        self._validation_cache: OrderedDict[bytes, tuple[pb.JobSpec, list[tuple[Any, ...]]]] = OrderedDict()
        self._cfg = cfg
        self._store = store
        self._clock = clock
        self._outcomes = outcomes
        self._metrics = metrics
        self._arming = arming
        self._bundles = bundles

    def validated(self, spec: pb.JobSpec) -> tuple[pb.JobSpec, list[tuple[Any, ...]]]:
        """The normalized spec and its task split, cached by the spec's bytes: the jobs of a bulk submit
        usually share one spec, and both are pure functions of it (the result is never mutated)."""
        key = spec.SerializeToString(deterministic=True)
        hit = self._validation_cache.get(key)
        if hit is not None:
            return hit
        try:
            # Well-formed already: the request guard checked each request whole, and an update merges a
            # checked change into a stored spec.
            norm = (normalize_pipeline(spec, wellformed_checked=True) if spec.steps
                    else normalize(spec, wellformed_checked=True))
            check_sizes(norm, self._cfg)
            tasks = split_job(norm)
        except SpecError as exc:  # SplitError is a SpecError
            raise InvalidArgument(str(exc)) from None
        self._validation_cache[key] = (norm, tasks)
        if len(self._validation_cache) > VALIDATION_CACHE_SIZE:
            self._validation_cache.popitem(last=False)
        return norm, tasks

    def _prepare(self, job_id: str, spec: pb.JobSpec, idempotency_key: str, now_ms: int) -> NewJob:
        norm, tasks = self.validated(spec)
        trigger = norm.trigger
        kind = trigger.WhichOneof("kind")
        if kind == "now":
            # Fires inside the submit script: no schedule entry, no timer, one Redis call.
            return NewJob(job_id, norm, "abs", now_ms, idempotency_key, fire_now=tasks)
        if kind == "after":
            # A child job has no schedule entry: its parent's run ends fire it (master/children.py).
            return NewJob(job_id, norm, "after", -1, idempotency_key, after=trigger.after.job_id)
        if norm.steps:
            norm, steps = with_step_jobs(job_id, norm, now_ms)
            if kind == "manual":
                return NewJob(job_id, norm, "manual", -1, idempotency_key, steps=steps)
            mode, value = ("delay", trigger.delay.ToMilliseconds()) if kind == "delay" else (
                "abs", now_ms if kind == "now" else first_fire_ms(trigger, now_ms))
            return NewJob(job_id, norm, mode, value, idempotency_key, steps=steps)
        if kind == "manual":
            return NewJob(job_id, norm, "manual", -1, idempotency_key)
        if kind == "delay":
            mode, value = "delay", trigger.delay.ToMilliseconds()
        else:
            mode, value = "abs", first_fire_ms(trigger, now_ms)
        return NewJob(job_id, norm, mode, value, idempotency_key)

    async def submit(self, spec: pb.JobSpec, idempotency_key: str = "") -> Submitted:
        return (await self._submit([(spec, idempotency_key)], name_index=False))[0]

    async def submit_many(self, requests: list[tuple[pb.JobSpec, str]]) -> list[Submitted]:
        """All specs are validated before any is stored: one bad spec fails the whole call."""
        return await self._submit(requests, name_index=True)

    async def _submit(self, requests: list[tuple[pb.JobSpec, str]], *, name_index: bool) -> list[Submitted]:
        if len(requests) > 1:
            log.info("bulk submit of %d jobs", len(requests))
        self._verbose = len(requests) == 1
        now_ms = int(self._clock.now() * 1000)
        prepared = []
        for i, (job_id, (spec, key)) in enumerate(zip(ids.new_job_ids(now_ms, len(requests)), requests)):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)
            try:
                prepared.append(self._prepare(job_id, spec, key, now_ms))
            except InvalidArgument as exc:
                raise type(exc)(f"jobs[{i}].{exc}" if name_index else str(exc)) from None
        await self._check_bundles(prepared)
        await self._check_parents(prepared)
        ttl_ms = max(1, int(self._cfg.idempotency_ttl_s * 1000))  # submit.lua divides time by it
        out: list[Submitted] = []
        for start in range(0, len(prepared), SUBMIT_PIPELINE):
            chunk = prepared[start:start + SUBMIT_PIPELINE]
            results = await self._store.submit_many(chunk, ttl_ms)
            for attempt in range(ID_ATTEMPTS):
                taken = [i for i, res in enumerate(results) if res.id_taken]
                if not taken:
                    break
                log.warning("%d new job ids were taken; drawing new ones", len(taken))
                fresh = [replace(chunk[i], job_id=j) for i, j in zip(taken, ids.new_job_ids(now_ms, len(taken)))]
                for i, res in zip(taken, await self._store.submit_many(fresh, ttl_ms)):
                    chunk[i], results[i] = fresh[taken.index(i)], res
            else:
                raise FailedPrecondition("could not draw unused job ids; try again")
            for i, (new, res) in enumerate(zip(chunk, results)):
                if i and i % YIELD_EVERY == 0:
                    await asyncio.sleep(0)
                out.append(await self._submitted(new, res))
        return out

    async def _check_parents(self, prepared: list[NewJob]) -> None:
        """A child job's parent must exist and may still run (submit.lua checks existence again, atomically)."""
        for parent in sorted({p.after for p in prepared if p.after}):
            job = await self._store.get_job(parent)
            if job is None:
                raise InvalidArgument(f"trigger.after.job_id: job {parent} not found (--after names the parent job)")
            if job.state is JobState.CANCELLED:
                raise FailedPrecondition(f"job {parent} is CANCELLED: a child of it would never fire (--after)")

    async def _check_bundles(self, prepared: list[NewJob]) -> None:
        """A job may name only a bundle the master has (the client uploads it first)."""
        await self.check_digests({s.bundle.digest for p in prepared for s in (p.spec, *(spec for _, spec in p.steps))
                                   if s.bundle.digest})

    async def check_digests(self, digests: set[str]) -> None:
        if not digests:
            return
        missing = digests - await self._bundles.present(digests)
        if missing:
            raise bundle_missing(sorted(missing)[0])

    async def _submitted(self, new: NewJob, res: SubmitResult) -> Submitted:
        if res.parent_missing:
            raise NotFound(f"trigger.after.job_id: job {new.after} was deleted while the job was submitted")
        if res.bundle_missing:
            raise bundle_missing(new.spec.bundle.digest)
        if res.duplicate:
            job = await self._store.get_job(res.job_id)
            if job is None:
                raise NotFound(f"job {res.job_id} of idempotency key {new.idempotency_key!r} is gone")
            return Submitted(job, True)
        log.log(logging.INFO if self._verbose else logging.DEBUG,
                "job=%s submitted name=%s trigger=%s first_fire=%d%s", res.job_id, new.spec.name,
                 new.spec.trigger.WhichOneof("kind"), res.next_fire_ms, " (fired)" if res.fired else "")
        # What submit.lua stored, without reading it back.
        if res.fired:
            self._metrics.fired_by_submit()
            self._outcomes.work_ready()
            job = JobRecord(id=res.job_id, spec=new.spec, state=JobState.COMPLETED, created_ms=res.created_ms,
                            updated_ms=res.created_ms, next_fire_ms=-1, runs=1,
                            last_run_id=ids.run_id(res.job_id, res.next_fire_ms))
        else:
            self._arming.consider(res.job_id, res.next_fire_ms)
            job = JobRecord(id=res.job_id, spec=new.spec, state=JobState.ACTIVE, created_ms=res.created_ms,
                            updated_ms=res.created_ms, next_fire_ms=res.next_fire_ms, runs=0, last_run_id="")
        return Submitted(job, False)
