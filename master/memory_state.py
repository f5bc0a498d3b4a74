"""What :class:`~sparkyard.master.memory_store.MemoryStore` holds, and its calls that are no script.

This is the root of the memory store: the maps and sorted sets that stand for the Redis keys of
:mod:`sparkyard.keys`, the clock every deadline is read against, and the calls RedisStore makes without a
Lua script — the reads (its pipelines: jobs, runs, tasks, queue sizes, the clock) and the worker
directory (a plain ``HSET``). None of them decides anything, so they live apart from the scripts:
:mod:`sparkyard.master.memory_dispatch` (a task's lease, from claim to report or reap) and
:mod:`sparkyard.master.memory_store` (jobs and runs: submit, fire, cancel, pause) build on this class.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any, Iterable, Sequence

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.master.memory_records import JobEntry, RunEntry, TaskEntry, job_record, run_record, task_record
from sparkyard.master.records import JobRecord, RunRecord, TaskRecord
from sparkyard.master.sorted_set import SortedSet
from sparkyard.master.store import DEFAULT_DUE_LIMIT, DEFAULT_PRIORITY_AGING_MS, QueueDepth, Store
from sparkyard.states import JobState
from sparkyard.v1 import sparkyard_pb2 as pb


class MemoryState(Store):
    """The memory store's state and its reads; the scripts are in the subclasses (time from ``clock``,
    wall clock, milliseconds)."""

    def __init__(self, clock: Clock, priority_aging_ms: int = DEFAULT_PRIORITY_AGING_MS) -> None:
        self.clock = clock
        self.priority_aging_ms = priority_aging_ms
        self._jobs: dict[str, JobEntry] = {}
        self._runs: dict[str, RunEntry] = {}
        self._tasks: dict[str, TaskEntry] = {}
        self._job_index = SortedSet()  # job id → created ms
        self._job_runs: defaultdict[str, SortedSet] = defaultdict(SortedSet)  # run id → scheduled ms
        self._active: defaultdict[str, set[str]] = defaultdict(set)  # job id → runs not terminal
        self._idempotency: dict[str, tuple[str, int]] = {}  # key → (job id, expiry ms)
        self._schedule = SortedSet()
        self._awaiting: set[str] = set()
        self._purge = SortedSet()  # deleted job id → deleted ms (their runs await retention)
        self._ready: defaultdict[str, SortedSet] = defaultdict(SortedSet)
        self._groups: set[str] = set()
        self._leases = SortedSet()
        self._timeouts = SortedSet()
        self._delayed = SortedSet()
        self._worker_leases: defaultdict[str, set[str]] = defaultdict(set)
        self._workers: dict[str, str] = {}  # worker id → JSON
        self._fence = 0
        self._backfill: defaultdict[str, set[int]] = defaultdict(set)  # job id → fire times still to run
        self._backfills: dict[str, int] = {}  # job id → most runs at once
        self._children: defaultdict[str, set[str]] = defaultdict(set)  # parent job id → child job ids

    def _now(self) -> int:
        return round(self.clock.now() * 1000)

    # ---- reads -----------------------------------------------------------------------------------------

    async def job_progress(self, job_ids: Sequence[str]) -> dict[str, tuple[str, int, int]]:
        return {j: (self._jobs[j].state.value, self._jobs[j].runs, self._jobs[j].spec_version)
                for j in job_ids if j in self._jobs}

    async def due_schedule(self, until_ms: int, limit: int = DEFAULT_DUE_LIMIT) -> list[tuple[str, int]]:
        return self._schedule.upto(until_ms, limit)

    async def time_ms(self) -> int:
        return self._now()

    async def get_job(self, job_id: str) -> JobRecord | None:
        job = self._jobs.get(job_id)
        return None if job is None else job_record(job_id, job)

    def cached_spec(self, job_id: str) -> pb.JobSpec | None:
        job = self._jobs.get(job_id)
        return None if job is None else job.spec

    async def get_specs(self, versions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], pb.JobSpec]:
        found = {}
        for job_id, version in versions:
            job = self._jobs.get(job_id)
            if job is not None and version in (0, job.spec_version):
                found[(job_id, version)] = job.spec
            elif job is not None and version in job.old_specs:
                found[(job_id, version)] = job.old_specs[version]
        return found

    async def get_spec(self, job_id: str, version: int = 0) -> pb.JobSpec | None:
        return (await self.get_specs([(job_id, version)])).get((job_id, version))

    async def list_jobs(self, limit: int, state: JobState | None = None, group: str = "") -> list[JobRecord]:
        out: list[JobRecord] = []
        for job_id, _ in self._job_index.items(reverse=True):
            if len(out) >= limit:
                break
            job = self._jobs[job_id]
            if (state is None or job.state is state) and (not group or job.spec.group == group):
                out.append(job_record(job_id, job))
        return out

    async def get_run(self, run_id: str, *, with_tasks: bool = True) -> RunRecord | None:
        run = self._runs.get(run_id)
        if run is None:
            return None
        record = run_record(run_id, run)
        if with_tasks:
            record.tasks = await self.get_tasks([ids.task_id(run_id, i) for i in range(run.task_count)])
        return record

    async def list_runs(self, job_id: str, limit: int, *, with_tasks: bool = False) -> list[RunRecord]:
        newest = [run_id for run_id, _ in self._job_runs[job_id].items(reverse=True)]
        # ZREVRANGE 0 limit-1: a limit of 0 or less counts from the end, as Redis does.
        stop = limit - 1 if limit > 0 else len(newest) + limit - 1
        runs = []
        for run_id in newest[:max(stop + 1, 0)]:
            run = await self.get_run(run_id, with_tasks=with_tasks)
            if run is not None:
                runs.append(run)
        return runs

    async def get_tasks(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        return [task_record(task_id, self._tasks[task_id]) for task_id in task_ids if task_id in self._tasks]

    async def active_runs(self, job_id: str) -> list[str]:
        return sorted(self._active[job_id])

    async def run_task_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        return {r: self._runs[r].task_count if r in self._runs else 0 for r in run_ids}

    async def ready_counts(self) -> dict[str, int]:
        return {group: len(self._ready[group]) for group in sorted(self._groups)}

    async def queue_depths(self, limit: int) -> dict[str, QueueDepth]:
        """As queue_depth.lua: a task's priority from its score and its run's scheduled time."""
        out, left = {}, limit
        for group in sorted(self._groups):
            queue = self._ready[group]
            split = len(queue) <= left
            left -= len(queue) if split else 0
            counts: Counter[int] = Counter()
            if split:
                for task_id, score in queue.items():
                    run = self._runs[self._tasks[task_id].run_id]
                    counts[round((run.scheduled_ms - score) / self.priority_aging_ms)] += 1
            out[group] = QueueDepth(len(queue), dict(sorted(counts.items())) if split else None)
        return out

    async def counts(self) -> dict[str, int]:
        return {"leased": len(self._leases), "scheduled": len(self._schedule), "delayed": len(self._delayed)}

    async def delayed_entries(self) -> list[tuple[str, int]]:
        return self._delayed.items()

    async def backfill_plan(self, job_id: str, max_concurrent: int, times_ms: Sequence[int]) -> tuple[str, int, int]:
        job = self._jobs.get(job_id)
        if job is None:
            return "missing", 0, 0
        if job.state is JobState.CANCELLED:
            return "cancelled", 0, 0
        plan = self._backfill[job_id]
        before = len(plan)
        plan.update(times_ms)
        self._backfills[job_id] = max_concurrent
        return "ok", len(plan) - before, len(plan)

    async def backfill_jobs(self) -> dict[str, int]:
        return dict(self._backfills)

    async def backfill_pending(self, job_id: str, limit: int) -> list[int]:
        return sorted(self._backfill.get(job_id, ()))[:limit]

    async def backfill_done(self, job_id: str, times_ms: Sequence[int]) -> int:
        plan = self._backfill[job_id]
        plan.difference_update(times_ms)
        if not plan:
            await self.backfill_drop(job_id)
        return len(plan)

    async def backfill_drop(self, job_id: str) -> None:
        self._backfill.pop(job_id, None)
        self._backfills.pop(job_id, None)

    async def parents(self) -> set[str]:
        return {job_id for job_id, children in self._children.items() if children}

    async def children(self, job_id: str) -> list[str]:
        return sorted(self._children.get(job_id, ()))

    async def awaiting_among(self, job_ids: Sequence[str]) -> list[str]:
        return [job_id for job_id in job_ids if job_id in self._awaiting]

    async def awaiting_jobs(self) -> list[str]:
        return sorted(self._awaiting)

    # ---- workers -----------------------------------------------------------------------------------------

    async def put_worker(self, worker_id: str, info: dict[str, Any]) -> None:
        self._workers[worker_id] = json.dumps(info, separators=(",", ":"))

    async def get_workers(self) -> dict[str, dict[str, Any]]:
        return {w: json.loads(v) for w, v in self._workers.items()}

    async def worker_leases(self, worker_id: str) -> set[str]:
        return set(self._worker_leases.get(worker_id, ()))
