"""The reads of :class:`~sparkyard.master.redis_store.RedisStore`: what it reads from Redis.

Apart from the script calls (every mutation, in redis_store.py) because a read needs none of their
arguments or fencing: a pipeline of plain Redis reads, parsed into records, or, where a pipeline's replies
would each be parsed in Python (thousands of tasks), a read-only script whose one reply is parsed at once.
``RedisStore`` extends this class; it shares only the connection, the scripts, the key schema and the spec
cache.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Sequence

from redis.asyncio import Redis

from sparkyard import ids
from sparkyard.clock import Clock
from sparkyard.keys import Keys
from sparkyard.master import store_outcomes as outcomes
from sparkyard.master.records import StepRecord, JobRecord, RunRecord, TaskRecord, read_one, readable, spec_from_text
from sparkyard.master.scripts import ScriptLibrary
from sparkyard.master.spec_cache import SpecCache
from sparkyard.master.store_values import DEFAULT_DUE_LIMIT
from sparkyard.states import JobState, RunState, StepState
from sparkyard.v1 import sparkyard_pb2 as pb


# Tasks a tasks.lua call reads: Redis runs nothing else meanwhile (~5 ms for 200 on this 2-core machine under
# load: 13 ms for 500, measured with INFO commandstats).
TASKS_PER_READ = 200


def _hash(flat: list[str]) -> dict[str, str]:
    """An HGETALL's reply as a script returns it (fields and values in turn) as redis-py gives it: a dict."""
    pairs = iter(flat)
    return dict(zip(pairs, pairs))


class RedisReads:
    """Sparkyard's state read from Redis (key schema: :mod:`sparkyard.keys`)."""

    def __init__(self, redis: Redis, keys: Keys, scripts: ScriptLibrary, test_clock: Clock | None = None) -> None:
        """``test_clock``, for tests only, replaces Redis ``TIME`` as the store's clock."""
        # Any: redis-py types every reply as bytes | str whatever decode_responses says; ours are str.
        self.redis: Any = redis
        self.keys = keys
        self._read_script = scripts  # read-only ones only (scripts.READ_ONLY)
        self._test_clock = test_clock
        self._specs = SpecCache()

    # ---- the schedule and the jobs it fires ------------------------------------------------------

    async def time_ms(self) -> int:
        if self._test_clock is not None:
            return round(self._test_clock.now() * 1000)
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def due_schedule(self, until_ms: int, limit: int = DEFAULT_DUE_LIMIT) -> list[outcomes.ScheduleEntry]:
        rows = await self.redis.zrangebyscore(self.keys.schedule, "-inf", until_ms, start=0, num=limit,
                                              withscores=True)
        return [outcomes.ScheduleEntry(job_id, int(score)) for job_id, score in rows]

    async def job_progress(self, job_ids: Sequence[str]) -> dict[str, outcomes.JobProgress]:
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(self.keys.job(job_id), "state", "runs", "spec_v")
        return {j: outcomes.JobProgress(JobState(v[0]), int(v[1] or 0), int(v[2] or 1))
                for j, v in zip(job_ids, await pipe.execute()) if v[0]}

    async def delayed_entries(self) -> list[outcomes.Delayed]:
        rows = await self.redis.zrange(self.keys.delayed, 0, -1, withscores=True)
        return [outcomes.Delayed(t, int(s)) for t, s in rows]

    async def parents(self) -> set[str]:
        return set(await self.redis.smembers(self.keys.parents))

    async def children(self, job_id: str) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.job_children(job_id)))

    async def awaiting_among(self, job_ids: Sequence[str]) -> list[str]:
        if not job_ids:
            return []
        flags = await self.redis.smismember(self.keys.awaiting, list(job_ids))
        return [j for j, member in zip(job_ids, flags) if member]

    async def awaiting_jobs(self) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.awaiting))

    async def backfill_jobs(self) -> dict[str, int]:
        return {job: int(n) for job, n in (await self.redis.hgetall(self.keys.backfills)).items()}

    async def backfill_pending(self, job_id: str, limit: int) -> list[int]:
        return [int(t) for t in await self.redis.zrange(self.keys.job_backfill(job_id), 0, limit - 1)]

    async def due_webhooks(self, until_ms: int, limit: int) -> list[tuple[str, int]]:
        rows = await self.redis.zrangebyscore(self.keys.webhooks, "-inf", until_ms, start=0, num=limit)
        if not rows:
            return []
        tries = await self.redis.hmget(self.keys.webhook_tries, rows)
        return [(run_id, int(n or 0)) for run_id, n in zip(rows, tries)]

    # ---- jobs, specs, runs and tasks -------------------------------------------------------------

    async def get_job(self, job_id: str) -> JobRecord | None:
        h = await self.redis.hgetall(self.keys.job(job_id))
        return read_one("job", job_id, lambda: JobRecord.from_hash(job_id, h)) if h else None

    def cached_spec(self, job_id: str) -> pb.JobSpec | None:
        """A job's latest spec if this master has it in memory (no Redis call): only what it submitted,
        updated or read."""
        return self._specs.latest(job_id)

    async def get_specs(self, versions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], pb.JobSpec]:
        """Cached ones at once, the others in one round trip."""
        found: dict[tuple[str, int], pb.JobSpec] = {}
        missing: list[tuple[str, int]] = []
        for job_id, version in versions:
            spec = self._specs.get(job_id, version)
            if spec is None:
                missing.append((job_id, version))
            else:
                found[(job_id, version)] = spec
        if missing:
            pipe = self.redis.pipeline(transaction=False)
            for job_id, version in missing:
                pipe.hmget(self.keys.job(job_id), "spec", "spec_v", f"spec@{version}")
            for (job_id, version), (text, current, old) in zip(missing, await pipe.execute()):
                if text is None:
                    continue
                latest = int(current or 1)
                self._specs.remember(job_id, spec_from_text(text), latest)
                if version in (0, latest):
                    latest_spec = self._specs.latest(job_id)
                    assert latest_spec is not None  # remembered just above
                    found[(job_id, version)] = latest_spec
                elif old is not None:
                    found[(job_id, version)] = spec_from_text(old)
                    self._specs.remember(job_id, found[(job_id, version)], version)
        return found

    async def get_spec(self, job_id: str, version: int = 0) -> pb.JobSpec | None:
        """A job's spec of that version (0: the latest this master knows of, else read), cached: a
        version's spec never changes."""
        return (await self.get_specs([(job_id, version)])).get((job_id, version))

    async def job_ids_named(self, name: str) -> list[str]:
        key = self.keys.job_name(name)
        if await self.redis.type(key) == "set":  # as an earlier version kept it (lib.lua name_index)
            return sorted(await self.redis.smembers(key))
        return list(await self.redis.zrange(key, 0, -1))  # by creation ms, oldest first

    async def list_jobs(self, limit: int, state: JobState | None = None, group: str = "") -> list[JobRecord]:
        """Filters are applied while scanning pages of the jobs index, so ``limit`` counts matching jobs. A
        pipeline's step jobs are not listed (the pipeline is; its runs show its steps)."""
        out: list[JobRecord] = []
        after, page = "", max(limit, 100)
        while len(out) < limit:
            found, after = await self.scan_jobs(after, page, paused=state is JobState.PAUSED)
            out += [j for j, _ in found if (state is None or j.state == state) and (not group or j.spec.group == group)]
            if not after:
                break
        return out[:limit]

    async def scan_jobs(self, after: str, count: int, *, paused: bool = False,
                        pipelines: bool = False) -> tuple[list[tuple[JobRecord, str]], str]:
        """The ``count`` entries of the jobs index after cursor ``after`` (newest first; '' from the newest):
        a count and a range, whatever the number of jobs, plus the jobs made in the cursor's millisecond.
        The cursor (``created_ms:job_id``) holds its place even when its job was deleted since."""
        k = self.keys
        index, start = k.jobs_paused if paused else k.jobs_pipelines if pipelines else k.jobs, 0
        if after:
            ms, job_id = after.split(":")
            higher = await self.redis.zcount(index, f"({ms}", "+inf")
            same = await self.redis.zrangebyscore(index, ms, ms)
            start = higher + sum(1 for j in same if j >= job_id)  # the index orders a millisecond's ids downwards
        rows = await self.redis.zrevrange(index, start, start + count - 1, withscores=True)
        pipe = self.redis.pipeline(transaction=False)
        for job_id, _ in rows:
            pipe.hgetall(self.keys.job(job_id))
        out = []
        for (job_id, score), h in zip(rows, await pipe.execute()):
            rec = readable(job_id, lambda: JobRecord.from_hash(job_id, h)) if h else None
            if rec is not None and "pipeline" not in h:
                out.append((rec, f"{int(score)}:{job_id}"))
        return out, f"{int(rows[-1][1])}:{rows[-1][0]}" if len(rows) == count else ""

    async def get_run(self, run_id: str, *, with_tasks: bool = True) -> RunRecord | None:
        h = await self.redis.hgetall(self.keys.run(run_id))
        if not h:
            return None
        run = read_one("run", run_id, lambda: RunRecord.from_hash(run_id, h))
        if run.graph:
            run.steps = await self.pipeline_steps(run)
        elif with_tasks:
            run.tasks = await self.get_tasks([ids.task_id(run_id, i) for i in range(run.task_count)])
        return run

    async def pipeline_steps(self, run: RunRecord) -> list[StepRecord]:
        """Every step of a pipeline run, in definition order, with its run's times and attempts."""
        graph = json.loads(run.graph)
        names = [g[0] for g in graph]
        k = self.keys
        raw = await self.redis.hmget(k.run_steps(run.id), *names, *(f"r:{n}" for n in names))
        states, runs = raw[:len(names)], raw[len(names):]
        pipe = self.redis.pipeline(transaction=False)
        for step_run in runs:
            pipe.hmget(k.run(step_run or "-"), "started_ms", "finished_ms", "task_count")
        times = await pipe.execute()
        for step_run, (_, _, count) in zip(runs, times):
            for i in range(int(count or 0) if step_run else 0):
                pipe.hget(k.task(ids.task_id(step_run, i)), "attempts")
        attempts = iter(await pipe.execute())
        steps = []
        for (name, job_id, after, _), state, step_run, (started, finished, count) in zip(graph, states, runs, times):
            tried = sum(int(next(attempts) or 0) for _ in range(int(count or 0) if step_run else 0))
            steps.append(StepRecord(name, StepState(state or "PENDING"), job_id, tuple(after), step_run or "",
                                    int(started or 0), int(finished or 0), tried))
        return steps

    async def list_runs(self, job_id: str, limit: int, *, with_tasks: bool = False) -> list[RunRecord]:
        runs = (await self.recent_runs([job_id], limit))[0]
        if with_tasks:
            for run in runs:
                run.tasks = await self.get_tasks([ids.task_id(run.id, i) for i in range(run.task_count)])
        return runs

    async def recent_runs(self, job_ids: Sequence[str], limit: int) -> list[list[RunRecord]]:
        """Each job's latest ``limit`` runs (no tasks), in two round trips whatever the number of jobs (a
        page of the console's jobs list shows a hundred jobs' runs)."""
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.zrevrange(self.keys.job_runs(job_id), 0, limit - 1)
        per_job = await pipe.execute()
        for run_ids in per_job:
            for run_id in run_ids:
                pipe.hgetall(self.keys.run(run_id))
        hashes = iter(await pipe.execute())
        out = []
        for run_ids in per_job:
            read = [readable(r, lambda: RunRecord.from_hash(r, h)) for r, h in zip(run_ids, hashes) if h]
            out.append([run for run in read if run is not None])
        return out

    async def run_states(self, run_ids: Sequence[str]) -> list[RunState | None]:
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(self.keys.run(run_id or "-"), "state")
        known = {state.value for state in RunState}
        return [RunState(state) if state in known else None for state in await pipe.execute()]

    async def get_tasks(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        raw: list[list[str]] = []
        for start in range(0, len(task_ids), TASKS_PER_READ):
            raw += await self._read_script("tasks", [], list(task_ids[start:start + TASKS_PER_READ]))
        read = (readable(task_id, lambda: TaskRecord.from_hash(task_id, _hash(raw[2 * i]), _hash(raw[2 * i + 1])))
                for i, task_id in enumerate(task_ids) if raw[2 * i])
        return [task for task in read if task is not None]

    async def active_runs(self, job_id: str) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.job_active(job_id)))

    async def run_fire_times(self, run_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hmget(self.keys.run(run_id), "fired_ms", "scheduled_ms")
        return {run_id: (int(fired or 0), int(scheduled or 0))
                for run_id, (fired, scheduled) in zip(run_ids, await pipe.execute()) if scheduled is not None}

    async def run_task_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(self.keys.run(run_id), "task_count")
        return {r: int(c or 0) for r, c in zip(run_ids, await pipe.execute())}

    # ---- queues, workers and masters -------------------------------------------------------------

    async def ready_counts(self) -> dict[str, int]:
        groups = sorted(await self.redis.smembers(self.keys.groups))
        pipe = self.redis.pipeline(transaction=False)
        for group in groups:
            pipe.zcard(self.keys.ready(group))
        return dict(zip(groups, await pipe.execute()))

    async def running_pipeline_runs(self) -> int:
        return int(await self.redis.zcard(self.keys.running_pipelines))

    async def counts(self) -> dict[str, int]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.keys.leases)
        pipe.zcard(self.keys.schedule)
        pipe.zcard(self.keys.delayed)
        leased, scheduled, delayed = await pipe.execute()
        return {"leased": leased, "scheduled": scheduled, "delayed": delayed}

    async def ping(self) -> None:
        await self.redis.ping()

    async def get_workers(self) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(self.keys.workers)
        return {w: json.loads(v) for w, v in raw.items()}

    async def worker_leases(self, worker_id: str) -> set[str]:
        return set(await self.redis.smembers(self.keys.worker_leases(worker_id)))

    async def get_masters(self) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(self.keys.masters)
        return {m: json.loads(v) for m, v in raw.items()}

    async def connection_names(self) -> set[str]:
        """The names of the connections open to Redis now (``CLIENT LIST``): a master's carry its id
        (:func:`sparkyard.master.leader.connection_name`), so a standby sees whether its leader's process is
        still there."""
        return {str(c.get("name", "")) for c in await self.redis.client_list()}
