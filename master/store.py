"""The master's only door to shared state: the :class:`Store` protocol (its values: :mod:`sparkyard.master.store_values`).

Method names follow the path of a job: submit → fire → peek/claim → renew → report →
release/reap, plus cancel, pause/resume and reads. Its one implementation is
:class:`~sparkyard.master.redis_store.RedisStore`: every mutation is one Lua script (``common/scripts/*.lua``),
every read a pipeline; any number of masters may share one Redis. The semantics are written once, in the
scripts: tests run them on a real redis-server, with a fake clock where they must move time
(``RedisStore(test_clock=...)``, see docs/store.md), and ``tests/contract/test_store_contract.py`` states
the contract.

The contract, in short:

* a task is in exactly one of: its group's ready queue (READY, or held back by its run's concurrency
  cap), the leases (LEASED), the retry backoffs (FAILED), nowhere (terminal);
* every claim hands out a fencing token greater than every token before it; a report or renewal counts
  only with the task's current token while it is LEASED, so a stale attempt can never overwrite a newer
  one and a terminal task never changes;
* deadlines (leases, retry backoffs, master-side timeouts, idempotency keys) are read against the store's
  own clock (:meth:`Store.time_ms`: Redis ``TIME``, or a test store's clock), so all masters agree.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol, Sequence

from sparkyard.master.records import JobRecord, RunRecord, TaskRecord
from sparkyard.master.routing import Routable
from sparkyard.master.store_outcomes import (
    BackfillPlanned,
    Delayed,
    Deletion,
    JobProgress,
    Released,
    Rescheduled,
    ScheduleEntry,
    StateChange,
)
from sparkyard.master.store_values import (
    DEFAULT_DUE_LIMIT,
    DEFAULT_SWEEP_LIMIT,
    CancelResult,
    Claim,
    FireRequest,
    Fired,
    NewJob,
    PurgeResult,
    QueueDepth,
    Reaped,
    RenewResult,
    Report,
    RetentionBounds,
    SubmitResult,
    UpdateResult,
    Verdict,
)
from sparkyard.states import JobState, RunState
from sparkyard.v1 import sparkyard_pb2 as pb


class Store(Protocol):
    """Everything the master reads and changes, as typed calls (see the module docstring for the contract).

    Implementations subclass this class explicitly, so mypy checks them against it and they share the
    methods defined here in terms of the others.
    """

    # ---- submit and fire -------------------------------------------------------------------------

    async def submit_many(self, jobs: Sequence[NewJob], idempotency_ttl_ms: int) -> list[SubmitResult]:
        """Store jobs with their first fire time (or, with ``fire_now``, their run), all in one step.

        A job whose idempotency key was used within the TTL is not stored again: its result names the job
        stored under the key (``duplicate``). A job whose id exists is not stored (``id_taken``).
        """
        ...

    async def fire_many(self, requests: Sequence[FireRequest]) -> list[Fired]:
        """Several firings, each atomic on its own: one per request, in order."""
        ...

    async def fire(self, job_id: str, spec: pb.JobSpec, scheduled_ms: int, *, expected_ms: int | None,
                   next_fire_ms: int, overlap: str, inputs: Sequence[Sequence[Any]],
                   skip_reason: str = "") -> Fired:
        """Create run ``job_id``@``scheduled_ms`` with one task per entry of ``inputs``; return its id.

        ``expected_ms`` is the schedule entry this firing consumes (None: a manual trigger).
        """
        (fired,) = await self.fire_many([FireRequest(job_id, spec, scheduled_ms, expected_ms, next_fire_ms,
                                                     overlap, inputs, skip_reason)])
        return fired

    async def job_progress(self, job_ids: Sequence[str]) -> dict[str, JobProgress]:
        """The state, runs and spec version of each job that exists."""
        ...

    async def due_schedule(self, until_ms: int, limit: int = DEFAULT_DUE_LIMIT) -> list[ScheduleEntry]:
        """Schedule entries due at or before ``until_ms``, earliest first."""
        ...

    # ---- dispatch ----------------------------------------------------------------------------------

    async def peek_ready(self, group: str, n: int) -> list[Routable]:
        """The first ``n`` tasks of a group's ready queue with what routing needs (changes nothing)."""
        ...

    async def claim(self, group: str, pairs: Sequence[tuple[str, str]], *, lease_ms: int,
                    timeout_grace_ms: int) -> list[Claim]:
        """Lease (task, worker) pairs: each still-READY task gets a new fencing token and attempt."""
        ...

    async def renew(self, worker: str, leases: Sequence[tuple[str, int]], lease_ms: int) -> RenewResult:
        """Extend the leases the worker still holds under these tokens; the others are lost."""
        ...

    async def report(self, reports: Sequence[Report]) -> list[Verdict]:
        """Apply worker reports in order under the fencing rule; one verdict per report."""
        ...

    async def release_due(self, limit: int = DEFAULT_SWEEP_LIMIT, task_ids: Sequence[str] = ()) -> list[Released]:
        """Move FAILED tasks whose backoff is over back to READY.

        With ``task_ids`` only those are looked at (a timer fired for them), else up to ``limit`` due ones.
        """
        ...

    async def delayed_entries(self) -> list[Delayed]:
        """Every task in backoff, earliest retry first."""
        ...

    async def reap_expired(self, max_lost: int, limit: int = DEFAULT_SWEEP_LIMIT) -> list[Reaped]:
        """Requeue tasks whose lease expired (DEAD past ``max_lost`` losses); fail attempts past their timeout.

        ``limit`` bounds the whole call: at most that many due entries are looked at, expired leases first.
        """
        ...

    async def reap_worker(self, worker: str, task_ids: Sequence[str], max_lost: int) -> list[Reaped]:
        """End the leases of tasks a reconnecting worker no longer has."""
        ...

    # ---- cancel, pause, resume ---------------------------------------------------------------------

    async def cancel(self, reason: str, *, job_id: str = "", run_ids: Sequence[str] = (),
                     task_ids: Sequence[str] = ()) -> CancelResult:
        """Cancel a job (no more firings), and the listed runs and tasks that are not terminal yet."""
        ...

    async def set_job_state(self, job_id: str, target: JobState, next_fire_ms: int = -1) -> StateChange:
        """Pause or resume a job."""
        ...

    async def reschedule_after_run(self, job_id: str, run_id: str, next_fire_ms: int) -> Rescheduled:
        """A fixed-delay job's next fire time once the run it waited for ended."""
        ...

    async def update_spec(self, job_id: str, base_version: int, spec: pb.JobSpec, next_fire_ms: int,
                          steps: Sequence[tuple[str, pb.JobSpec]] = ()) -> UpdateResult:
        """Replace an ACTIVE or PAUSED job's spec, made from version ``base_version``, keeping the old one
        for the runs made from it; ``next_fire_ms`` ≥ 0 replaces the schedule entry in the same step."""
        ...

    async def awaiting_among(self, job_ids: Sequence[str]) -> list[str]:
        """Those of ``job_ids`` that wait for their current run to end (fixed-delay)."""
        ...

    async def awaiting_jobs(self) -> list[str]:
        ...

    # ---- backfill ------------------------------------------------------------------------------------

    async def backfill_plan(self, job_id: str, max_concurrent: int, times_ms: Sequence[int]) -> BackfillPlanned:
        """Add past fire times to a job's backfill plan: how many were new, how many are pending."""
        ...

    async def backfill_jobs(self) -> dict[str, int]:
        """Jobs with a backfill plan → the most of their runs that may be active at once."""
        ...

    async def backfill_pending(self, job_id: str, limit: int) -> list[int]:
        """The earliest ``limit`` fire times of a job's plan."""
        ...

    async def backfill_done(self, job_id: str, times_ms: Sequence[int]) -> int:
        """Take fired times out of the plan (their runs exist); the times still pending."""
        ...

    async def backfill_drop(self, job_id: str) -> None:
        """Forget a job's plan (the job was cancelled or is gone)."""
        ...

    # ---- child jobs (--after) ------------------------------------------------------------------------

    async def parents(self) -> set[str]:
        """The jobs that have child jobs."""
        ...

    async def children(self, job_id: str) -> list[str]:
        """The child jobs of a job (those whose trigger is --after it), sorted."""
        ...

    # ---- webhook deliveries (master/webhooks.py) -----------------------------------------------------

    async def webhook_defaults(self, on_failure: bool, on_success: bool) -> None:
        """Whether the leader has a default URL for failed, succeeded runs: runs that end from now on
        without a URL of their own get a delivery recorded when it has."""
        ...

    async def due_webhooks(self, until_ms: int, limit: int) -> list[tuple[str, int]]:
        """The earliest ``limit`` pending deliveries due by ``until_ms``: (run id, failed tries so far)."""
        ...

    async def webhook_retry(self, run_id: str, due_ms: int) -> int:
        """A try failed: the delivery is next due at ``due_ms``. The failed tries so far, or 0 when it is no
        longer pending (nothing changed)."""
        ...

    async def webhook_done(self, run_id: str) -> bool:
        """The delivery is made, given up or has nothing to deliver: it leaves the pending set (True if it
        was there)."""
        ...

    # ---- delete and retention -----------------------------------------------------------------------

    async def delete_job(self, job_id: str, bundle_digests: Sequence[str] = ()) -> Deletion:
        """Delete a job with no active run and no child job (else nothing changes). It leaves every listing
        and index at once; :meth:`purge_history` deletes its runs later."""
        ...

    async def purge_history(self, cursor: int, bounds: RetentionBounds) -> PurgeResult:
        """One bounded step of retention: deleted jobs' runs first, then, scanning jobs from ``cursor``
        (newest first), ended jobs past the max age and ended runs beyond ``keep_runs`` or the max age."""
        ...

    # ---- reads ---------------------------------------------------------------------------------------

    async def time_ms(self) -> int:
        """The store's clock, the one every deadline in it is measured against."""
        ...

    async def get_job(self, job_id: str) -> JobRecord | None:
        ...

    def cached_spec(self, job_id: str) -> pb.JobSpec | None:
        """A job's latest spec this store knows, if it can be had without a round trip."""
        ...

    async def get_specs(self, versions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], pb.JobSpec]:
        """The specs of those (job, spec version) that exist (a version never changes once written)."""
        ...

    async def get_spec(self, job_id: str, version: int = 0) -> pb.JobSpec | None:
        """A job's spec of that version (0: its current one)."""
        ...

    async def job_ids_named(self, name: str) -> list[str]:
        """Ids of the jobs with this name (an index kept by the write scripts: one read, whatever the
        number of jobs), oldest first (scored by creation time)."""
        ...

    async def list_jobs(self, limit: int, state: JobState | None = None, group: str = "") -> list[JobRecord]:
        """Newest first; filters are applied before ``limit`` counts."""
        ...

    async def scan_jobs(self, after: str, count: int, *, paused: bool = False,
                        pipelines: bool = False) -> tuple[list[tuple[JobRecord, str]], str]:
        """``count`` entries of the jobs index after cursor ``after`` ('' from the newest), newest first, as
        records (a pipeline's step jobs left out) each with the cursor that goes on after it; and the cursor
        after the last entry ('' at the end). ``paused``: the index of the paused jobs only (same cursors),
        so listing them does not read every job; an entry whose job is no longer paused is still returned
        (the caller's filter on the state holds). ``pipelines`` (unless ``paused``): the index of the
        pipelines only, likewise."""
        ...

    async def get_run(self, run_id: str, *, with_tasks: bool = True) -> RunRecord | None:
        ...

    async def list_runs(self, job_id: str, limit: int, *, with_tasks: bool = False) -> list[RunRecord]:
        """A job's runs, latest scheduled first."""
        ...

    async def recent_runs(self, job_ids: Sequence[str], limit: int) -> list[list[RunRecord]]:
        """Each job's latest ``limit`` runs, latest scheduled first, without their tasks."""
        ...

    async def run_states(self, run_ids: Sequence[str]) -> list[RunState | None]:
        """Each run's state, None for a run that does not exist (or '' asked), in one round trip."""
        ...

    async def get_tasks(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        """The tasks that exist among ``task_ids``, in that order, each with its attempts."""
        ...

    async def get_task(self, task_id: str) -> TaskRecord | None:
        found = await self.get_tasks([task_id])
        return found[0] if found else None

    async def active_runs(self, job_id: str) -> list[str]:
        """The job's runs that are not terminal, sorted."""
        ...

    async def run_fire_times(self, run_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """(fired ms, scheduled ms) of each run that exists among ``run_ids``, in one round trip."""
        ...

    async def run_task_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """Tasks of each run (0 for a run that does not exist)."""
        ...

    async def ready_counts(self) -> dict[str, int]:
        """Ready-queue length of every group that has had one."""
        ...

    async def queue_depths(self, limit: int) -> dict[str, QueueDepth]:
        """Every group's ready-queue length and, while at most ``limit`` tasks wait in all, how many of
        them have each priority (queue_depth.lua: the queue itself does not say it, so it is O(n))."""
        ...

    async def running_pipeline_runs(self) -> int:
        """How many pipeline runs have started and not ended (the scripts keep their index)."""
        ...

    async def counts(self) -> dict[str, int]:
        """How many tasks are leased and delayed, and how many jobs are scheduled."""
        ...

    async def ping(self) -> None:
        """One round trip to the store and nothing else (the metrics page times it)."""
        await self.time_ms()

    # ---- workers -------------------------------------------------------------------------------------

    async def put_worker(self, worker_id: str, info: dict[str, Any]) -> None:
        """Record what a worker said about itself (JSON-compatible)."""
        ...

    async def get_workers(self) -> dict[str, dict[str, Any]]:
        ...

    async def worker_leases(self, worker_id: str) -> set[str]:
        """Task ids leased to the worker."""
        ...
