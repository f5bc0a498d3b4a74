"""What users can do with jobs and runs — the domain API behind ``JobService``.

Ids and arguments are checked here (never trusting the client); a submitted or updated spec is checked by
:class:`~sparkyard.master.submissions.Submissions`, the submit path. Errors are domain errors
(:mod:`sparkyard.errors`) whose message names the field or id.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.errors import FailedPrecondition, InvalidArgument, NotFound
from sparkyard.master.arming import Arming
from sparkyard.master.job_listing import JobPage, job_page
from sparkyard.master.names import jobs_named
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.pipelines import with_step_jobs
from sparkyard.master.preloader import Preloader
from sparkyard.master.records import JobRecord, RunRecord, TaskRecord
from sparkyard.master.store import Store
from sparkyard.master.store_outcomes import CancelStatus, DeleteStatus, FireStatus, StateChangeStatus, UpdateStatus
from sparkyard.master.submissions import Submissions, Submitted, bundle_missing, first_fire_ms
from sparkyard.pipeline_spec import same_version
from sparkyard.spec import SpecError
from sparkyard.updates import apply_update
from sparkyard.states import RUN_TERMINAL, JobState, RunState, StepState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# A pause cancels the job's runs fired ahead of their time that are at least this far from it, with this reason.
# Further than the default fire-ahead (0.25 s), so that only a burst's runs (fired up to 10 s ahead) are
# withdrawn: a run that is due within the second may be starting on its worker before the cancel gets there
# (on a loaded 2-core machine a cancel took 230 ms to arrive, and with 100 ms here the run had started), so
# it runs, as a run already started does.
PAUSE_WITHDRAWS_MS = 1_000
PAUSED_BEFORE_ITS_TIME = "the job was paused before the run's scheduled time"

# Listing defaults and caps.
DEFAULT_LIST_LIMIT = 50
MAX_LIST_LIMIT = 10_000
# Index entries one ListJobs request looks at, at most (master/job_listing.py): a filter that matches few
# of a million jobs answers what it found there and the cursor to go on from, instead of reading them all.
LIST_SCAN_BUDGET = 10_000
# A job cancel re-reads the job's active runs this many times if firings keep racing it.
CANCEL_ATTEMPTS = 5
# An update re-reads the job and merges its change again this many times if other updates keep coming first.
UPDATE_ATTEMPTS = 5


def _parent(spec: pb.JobSpec) -> str:
    """A child job's parent ('' for any other job)."""
    return spec.trigger.after.job_id if spec.trigger.WhichOneof("kind") == "after" else ""


class JobManager:
    def __init__(self, store: Store, clock: Clock, outcomes: Outcomes, arming: Arming, preloader: Preloader,
                 submissions: Submissions) -> None:
        self._store = store
        self._clock = clock
        self._outcomes = outcomes
        self._preloader = preloader
        self._arming = arming
        self._submissions = submissions

    # ---- submit ---------------------------------------------------------------------------------------

    async def submit(self, spec: pb.JobSpec, idempotency_key: str = "") -> Submitted:
        return await self._submissions.submit(spec, idempotency_key)

    async def submit_many(self, requests: list[tuple[pb.JobSpec, str]]) -> list[Submitted]:
        """All specs are validated before any is stored: one bad spec fails the whole call."""
        return await self._submissions.submit_many(requests)

    # ---- reads ----------------------------------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobRecord:
        self.check_id(job_id, ids.IdKind.JOB)
        job = await self._store.get_job(job_id)
        if job is None:
            raise NotFound(f"job {job_id} not found")
        return job

    async def list_jobs(self, limit: int, state: JobState | None, group: str, name: str = "", *,
                        after: str = "", budget: int = LIST_SCAN_BUDGET, pipelines: bool = False,
                        keep: Callable[[JobRecord], bool] = lambda _: True) -> JobPage:
        """Newest first. By name: the name index, whole. Otherwise a page from at most ``budget`` index
        entries after cursor ``after`` (of the paused jobs' index for that state, so that the few paused
        jobs among a million are one request away; of the pipelines' index for ``pipelines``, likewise);
        ``keep`` filters further (the console's search)."""
        if name:
            named = await jobs_named(self._store, name, self._limit(limit), state, group)
            named = [j for j in named if j.spec.steps] if pipelines else named
            return JobPage(named, "", len(named))

        def wanted(job: JobRecord) -> bool:
            return ((state is None or job.state == state) and (not group or job.spec.group == group)
                    and (not pipelines or bool(job.spec.steps)) and keep(job))

        return await job_page(self._store, self._limit(limit), wanted, after, budget,
                              paused=state is JobState.PAUSED, pipelines=pipelines)

    async def last_run_states(self, jobs: Sequence[JobRecord]) -> list[RunState | None]:
        """Each job's last run's state (None when it has none): what a reader needs to tell a COMPLETED job
        whose last run FAILED from one that succeeded, read with the jobs rather than run by run."""
        return await self._store.run_states([job.last_run_id for job in jobs])

    async def get_run(self, run_id: str) -> RunRecord:
        self.check_id(run_id, ids.IdKind.RUN)
        run = await self._store.get_run(run_id)
        if run is None:
            raise NotFound(f"run {run_id} not found")
        return run

    async def list_runs(self, job_id: str, limit: int, with_tasks: bool) -> list[RunRecord]:
        await self.get_job(job_id)
        return await self._store.list_runs(job_id, self._limit(limit), with_tasks=with_tasks)

    async def get_task(self, task_id: str) -> TaskRecord:
        self.check_id(task_id, ids.IdKind.TASK)
        task = await self._store.get_task(task_id)
        if task is None:
            raise NotFound(f"task {task_id} not found")
        return task

    @staticmethod
    def _limit(limit: int) -> int:
        if limit < 0:
            raise InvalidArgument(f"limit: {limit} must not be negative")
        return min(limit or DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)

    @staticmethod
    def check_id(text: str, kind: ids.IdKind) -> None:
        try:
            parsed = ids.parse_id(text)
        except ValueError as exc:
            raise InvalidArgument(f"{kind.value}_id: {exc}") from None
        if parsed.kind != kind:
            raise InvalidArgument(f"{kind.value}_id: {text} is a {parsed.kind.value} id, not a {kind.value} id")

    # ---- cancel, pause, resume, trigger ---------------------------------------------------------------

    async def cancel(self, target: str, reason: str = "") -> list[str]:
        try:
            parsed = ids.parse_id(target)
        except ValueError as exc:
            raise InvalidArgument(f"id: {exc}") from None
        reason = reason or "cancelled by user"
        if parsed.kind == ids.IdKind.JOB:
            job = await self.get_job(parsed.job_id)
            if job.state == JobState.CANCELLED:
                raise FailedPrecondition(f"job {job.id} is already CANCELLED")
            cancelled = await self._cancel_job(job.id, reason)
            if not cancelled:
                raise FailedPrecondition(f"job {job.id} is {job.state.value} and has no active run to cancel")
            return cancelled
        if parsed.kind == ids.IdKind.RUN:
            run = await self.get_run(parsed.run_id)
            if run.state in RUN_TERMINAL:
                raise FailedPrecondition(f"run {run.id} is already {run.state.value}")
            result = await self._store.cancel(reason, run_ids=[run.id], task_ids=await self._outcomes.task_ids([run.id]))
        else:
            task = await self.get_task(parsed.task_id)
            result = await self._store.cancel(reason, task_ids=[task.id])
            if not result.cancelled:
                raise FailedPrecondition(f"task {task.id} is already {task.state.value}")
        self._outcomes.apply_cancel(result, reason)
        return result.cancelled

    async def _cancel_job(self, job_id: str, reason: str) -> list[str]:
        """Cancel a job (no more firings) and every active run of it in one cancel.lua call, listing the runs
        again while a firing races it: the ids whose state changed."""
        self._arming.forget(job_id)
        for _ in range(CANCEL_ATTEMPTS):
            active = await self._store.active_runs(job_id)
            tasks = await self._outcomes.task_ids(active)
            result = await self._store.cancel(reason, job_id=job_id, run_ids=active, task_ids=tasks)
            if result.status is CancelStatus.OK:
                self._outcomes.apply_cancel(result, reason)
                self._outcomes.job_ended(job_id)
                return result.cancelled
        raise FailedPrecondition(f"job {job_id} kept firing while being cancelled; try again")

    async def delete(self, job_id: str, force: bool = False) -> list[str]:
        """Delete a job: it leaves every listing at once and nothing of it fires again (a timer armed for it
        finds no job); the retention loop deletes its runs, tasks and attempts later. A job with an active
        run is refused unless ``force``, which cancels the job and its active runs first (the ids that
        changed are returned). A job that does not exist (deleted already) is NOT_FOUND."""
        job = await self.get_job(job_id)
        cancelled = await self._cancel_job(job.id, "job deleted") if force else []
        status, blockers = await self._store.delete_job(job.id,
                                                        [job.spec.bundle.digest] if job.spec.bundle.digest else [])
        if status is DeleteStatus.MISSING:
            raise NotFound(f"job {job.id} not found")
        if status is DeleteStatus.ACTIVE:
            more = f" (and {len(blockers) - 1} more)" if len(blockers) > 1 else ""
            raise FailedPrecondition(f"job {job.id} has an active run {blockers[0]}{more}: cancel it first, or delete "
                                     "with force (sparkyard delete --force) to cancel it and delete the job")
        if status is DeleteStatus.CHILDREN:
            raise FailedPrecondition(f"job {job.id} has child jobs that fire after it (--after): "
                                     f"{', '.join(blockers)}; delete them first")
        self._arming.forget(job.id)
        self._outcomes.job_ended(job.id)
        log.info("job=%s deleted%s", job.id, f" (cancelled {len(cancelled)})" if cancelled else "")
        return cancelled

    async def pause(self, job_id: str) -> JobRecord:
        await self.get_job(job_id)
        status, state, _ = await self._store.set_job_state(job_id, JobState.PAUSED)
        if status is StateChangeStatus.ILLEGAL:
            raise FailedPrecondition(f"job {job_id} is {state and state.value} and cannot be paused")
        self._arming.forget(job_id)
        await self._cancel_fired_ahead(job_id)
        return await self.get_job(job_id)

    async def _cancel_fired_ahead(self, job_id: str) -> None:
        """A paused job's runs fired ahead of their time (``--fire-ahead``) that are more than
        :data:`PAUSE_WITHDRAWS_MS` from it (a burst's) are cancelled: a pause stops every firing from now on. One
        nearer may be starting on its worker as the cancel travels: it runs, as one already started does."""
        now_ms = int(self._clock.now() * 1000)
        times = await self._store.run_fire_times(await self._store.active_runs(job_id))
        ahead = [run_id for run_id, (fired_ms, scheduled_ms) in times.items()
                 if fired_ms < scheduled_ms and scheduled_ms > now_ms + PAUSE_WITHDRAWS_MS]
        if ahead:
            log.info("job=%s paused: cancelling %d run(s) fired ahead of their time", job_id, len(ahead))
            await self._outcomes.cancel_runs(ahead, PAUSED_BEFORE_ITS_TIME)

    async def resume(self, job_id: str) -> JobRecord:
        await self.get_job(job_id)
        status, state, next_fire = await self._store.set_job_state(job_id, JobState.ACTIVE)
        if status is StateChangeStatus.ILLEGAL:
            raise FailedPrecondition(f"job {job_id} is {state and state.value} and cannot be resumed")
        # A fire time missed while paused is due now: the preloader applies the misfire policy.
        self._arming.consider(job_id, next_fire)
        return await self.get_job(job_id)

    # ---- update -------------------------------------------------------------------------------------

    async def update(self, job_id: str, change: pb.JobSpec, fields: list[str]) -> JobRecord:
        """Take ``fields`` of ``change`` into an ACTIVE or PAUSED job's spec, from its next firing on.

        The merged spec is checked as a submitted one is. An update that changes nothing leaves the job as it
        is (so a retried update is harmless). A trigger change gives the job a new first fire time from now, written with the spec in one step (update.lua), so the old time never fires; runs
        made before keep the spec they were made from (by version), and the old spec is kept for them.
        """
        for _ in range(UPDATE_ATTEMPTS):
            job = await self.get_job(job_id)
            if job.state not in (JobState.ACTIVE, JobState.PAUSED):
                raise FailedPrecondition(f"job {job_id} is {job.state.value} and can no longer be updated")
            try:
                merged = apply_update(job.spec, change, fields)
            except SpecError as exc:
                raise InvalidArgument(str(exc)) from None
            spec, _ = self._submissions.validated(merged)
            if _parent(spec) != _parent(job.spec):
                raise InvalidArgument("trigger: an update cannot make a job a child job, end one, or give it another "
                                      "parent (--after); submit a new job (its condition may change)")
            if same_version(spec, job.spec):
                # Nothing changes: most often a client's retry of an update whose reply was lost. Doing it again
                # would add a spec version and, for a trigger, restart the schedule from now (a second run).
                log.info("job=%s update changes nothing: left as it is (spec version %d)", job_id, job.spec_version)
                return job
            steps: tuple[tuple[str, pb.JobSpec], ...] = ()
            if spec.steps:
                spec, steps = with_step_jobs(job_id, spec, int(self._clock.now() * 1000))
            await self._submissions.check_digests({s.bundle.digest for s in (spec, *(s for _, s in steps))
                                       if s.bundle.digest} - {job.spec.bundle.digest})
            next_fire = -1
            if any(f.startswith("trigger.") for f in fields) and not _parent(spec):
                next_fire = first_fire_ms(spec.trigger, int(self._clock.now() * 1000))
            result = await self._store.update_spec(job_id, job.spec_version, spec, next_fire, steps)
            if result.status is UpdateStatus.CONFLICT:
                continue
            if result.status is UpdateStatus.MISSING:
                raise NotFound(f"job {job_id} not found")
            if result.status is UpdateStatus.ENDED:
                raise FailedPrecondition(f"job {job_id} is {result.state and result.state.value} and can no longer "
                                         "be updated")
            if result.status is UpdateStatus.BUNDLE_MISSING:
                raise bundle_missing(spec.bundle.digest or "of a step")
            log.info("job=%s updated to spec version %d (%s)%s", job_id, result.spec_version, ", ".join(fields),
                     f" next fire {result.next_fire_ms}" if next_fire >= 0 else "")
            if result.state is JobState.ACTIVE:
                self._arming.consider(job_id, result.next_fire_ms)
            return await self.get_job(job_id)
        raise FailedPrecondition(f"job {job_id} kept changing while being updated; try again")

    async def rerun(self, run_id: str, failed_only: bool) -> RunRecord:
        """Run an ended run again as a new run of its job: all its tasks' inputs, or with ``failed_only``
        those of its DEAD and CANCELLED tasks; with the job's current spec (a fix shipped with
        ``sparkyard update`` is what runs) and the original's scheduled time. The original is left as it is."""
        original = await self.get_run(run_id)
        if original.state not in RUN_TERMINAL:
            raise FailedPrecondition(f"run {run_id} is {original.state.value}: rerun it once it has ended")
        tasks = sorted(original.tasks, key=lambda t: t.index)
        # A pipeline run: with failed_only, its SUCCEEDED steps are kept (with their runs) and the rest run again.
        keep = {s.name: s.run_id for s in original.steps if s.state is StepState.SUCCEEDED} if failed_only else {}
        if failed_only and original.steps:
            if len(keep) == len(original.steps):
                raise FailedPrecondition(f"run {run_id} has no failed, skipped or cancelled step to rerun")
        elif failed_only:
            tasks = [t for t in tasks if t.state in (TaskState.DEAD, TaskState.CANCELLED)]
            if not tasks:
                raise FailedPrecondition(f"run {run_id} has no failed or cancelled task to rerun")
        for _ in range(UPDATE_ATTEMPTS):
            job = await self.get_job(original.job_id)
            if job.state == JobState.CANCELLED:
                raise FailedPrecondition(f"job {job.id} is CANCELLED")
            new_id, status = await self._preloader.rerun(job.id, job.spec, job.spec_version, original,
                                                         [t.inputs for t in tasks], keep)
            if status is not FireStatus.CHANGED:  # an update came between the read and the firing: read it again
                break
        if status is not FireStatus.CREATED:
            raise FailedPrecondition(f"run {run_id} could not be rerun ({status.value}); try again")
        log.info("run=%s reruns run=%s (%d tasks%s)", new_id, run_id, len(tasks),
                 ", failed only" if failed_only else "")
        return await self.get_run(new_id)

    async def trigger(self, job_id: str) -> RunRecord:
        for _ in range(UPDATE_ATTEMPTS):
            job = await self.get_job(job_id)
            if job.state == JobState.CANCELLED:
                raise FailedPrecondition(f"job {job_id} is CANCELLED")
            run_id, status = await self._preloader.trigger_now(job_id, job.spec, job.spec_version)
            if status is not FireStatus.CHANGED:  # an update came between the read and the firing: read it again
                break
        if status not in (FireStatus.CREATED, FireStatus.SKIPPED):
            raise FailedPrecondition(f"job {job_id} could not be triggered ({status.value})")
        return await self.get_run(run_id)
