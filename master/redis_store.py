"""The Redis implementation of :class:`~sparkyard.master.store.Store`: every mutation one Lua script call,
every read a pipeline.

RedisStore holds no state of its own (beyond an immutable job-spec cache), so any number of masters can
use the same Redis; the scripts' invariants make concurrent use safe.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Sequence

from redis.asyncio import Redis

from sparkyard.clock import Clock
from sparkyard.keys import Keys
from sparkyard.master.records import (
    StepRecord,
    JobRecord,
    RunRecord,
    TaskRecord,
    read_one,
    readable,
    spec_from_text,
    spec_to_text,
)
from sparkyard.master.routing import Routable
from sparkyard.master.spec_cache import SpecCache
from sparkyard.master.scripts import ScriptLibrary
from sparkyard.master import store_outcomes as outcomes
from sparkyard.master.store import Store
from sparkyard.master.children import child_block
from sparkyard.master.pipelines import pipeline_block
from sparkyard.master.store_values import (
    DEFAULT_DUE_LIMIT,
    DEFAULT_PRIORITY_AGING_MS,
    DEFAULT_SWEEP_LIMIT,
    CancelResult,
    Claim,
    FireRequest,
    FireResult,
    Fired,
    NewJob,
    PurgeResult,
    QueueDepth,
    Reaped,
    RetentionBounds,
    RenewResult,
    Report,
    RunBlock,
    SubmitResult,
    Verdict,
    UpdateResult,
)
from sparkyard.errors import Unavailable
from sparkyard.states import JobState, RunState, StepState
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard import ids

# How long a submit waits for --redis-min-replicas replicas to confirm it (WAIT).
REPLICA_WAIT_MS = 1_000


def _groups(flat: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(flat), size):
        yield flat[i:i + size]


class RedisStore(Store):
    """Sparkyard's state in Redis (key schema: :mod:`sparkyard.keys`)."""

    def __init__(self, redis: Redis, keys: Keys, priority_aging_ms: int = DEFAULT_PRIORITY_AGING_MS,
                 min_replicas: int = 0, *, observe: Callable[[str, float], None] | None = None,
                 test_clock: Clock | None = None) -> None:
        """``test_clock``, for tests only, replaces Redis ``TIME`` as the store's clock (ScriptLibrary)."""
        self.priority_aging_ms = priority_aging_ms
        self.min_replicas = min_replicas
        # Any: redis-py types every reply as bytes | str whatever decode_responses says; ours are str.
        self.redis: Any = redis
        self.keys = keys
        self._lua = self.scripts = ScriptLibrary(redis, keys, observe=observe, test_clock=test_clock)
        self._test_clock = test_clock
        self._specs = SpecCache()

    # ---- submit and fire -------------------------------------------------------------------------

    def _run_block(self, spec: pb.JobSpec, scheduled_ms: int, inputs: Sequence[Sequence[Any]],
                   spec_version: int = 1, rerun_of: str = "", after_run: str = "") -> dict[str, Any]:
        """create_run's block as JSON (the task ids are built in Lua from the run id, so identical runs of a
        bulk submit share one block). A pipeline's block carries its graph and each step's block."""
        block = RunBlock.of(spec, scheduled_ms, () if spec.steps else inputs, self.priority_aging_ms, spec_version,
                            rerun_of, after_run).to_wire()
        if spec.steps:
            block.update(pipeline_block(spec, scheduled_ms, self.priority_aging_ms))
        return block

    def _spec_index(self, spec: pb.JobSpec, specs: list[str], index: dict[int, int]) -> int:
        """The index of ``spec``'s stored text in a submit's ``specs``, added once per spec object."""
        si = index.get(id(spec))
        if si is None:
            si = index[id(spec)] = len(specs)
            specs.append(self._specs.text(spec))
        return si

    async def submit_many(self, jobs: Sequence[NewJob], idempotency_ttl_ms: int) -> list[SubmitResult]:
        """Store jobs with one ``submit.lua`` call (a bulk submit is one script run, one round trip).

        A job with ``fire_now`` inputs is created with its run (it fires in the same script). Jobs of a
        bulk submit usually share one spec object: its stored text and its run block are sent once.
        """
        specs: list[str] = []
        blocks: list[dict[str, Any]] = []
        spec_index: dict[int, int] = {}
        block_index: dict[tuple[int, int, int], int] = {}
        entries: list[list[Any]] = []
        for job in jobs:
            si = self._spec_index(job.spec, specs, spec_index)
            if job.fire_mode == "after":
                blocks.append(child_block(job.spec, 1, self.priority_aging_ms))
                entries.append([job.job_id, si, job.fire_mode, job.after, job.idempotency_key, "", 0, len(blocks) - 1,
                                job.spec.bundle.digest])
            elif job.fire_now is None:
                entries.append([job.job_id, si, job.fire_mode, job.fire_value_ms, job.idempotency_key, "", 0, -1,
                                job.spec.bundle.digest])
            else:
                key = (id(job.spec), job.fire_value_ms, id(job.fire_now))
                bi = block_index.get(key)
                if bi is None:
                    bi = block_index[key] = len(blocks)
                    blocks.append(self._run_block(job.spec, job.fire_value_ms, job.fire_now))
                entries.append([job.job_id, si, job.fire_mode, job.fire_value_ms, job.idempotency_key,
                                ids.run_id(job.job_id, job.fire_value_ms), job.fire_value_ms, bi,
                                job.spec.bundle.digest])
            self._specs.remember(job.job_id, job.spec)
            if job.steps:
                entries[-1].append([[step_id, self._spec_index(spec, specs, spec_index), spec.bundle.digest]
                                    for step_id, spec in job.steps])
                for step_id, spec in job.steps:
                    self._specs.remember(step_id, spec)
        payload = json.dumps({"specs": specs, "blocks": blocks, "jobs": entries,
                              "names": [job.spec.name for job in jobs]}, separators=(",", ":"))
        args = [payload, idempotency_ttl_ms]
        if self.min_replicas:
            raw = await self._replicated("submit", [self.keys.jobs, self.keys.schedule], args)
        else:
            raw = await self._lua("submit", [self.keys.jobs, self.keys.schedule], args)
        return [SubmitResult(j, int(d) == 1, int(c), int(n), bool(int(f)), id_taken=int(d) == 2,
                             parent_missing=int(d) == 3, bundle_missing=int(d) == 4)
                for j, d, c, n, f in _groups(raw, 5)]

    async def _replicated(self, script: str, keys: list[str], args: list[Any]) -> Any:
        """Run a script, then WAIT on the same connection until ``min_replicas`` replicas have it: a submit
        acknowledged this way survives the loss of the primary (Sentinel promotes a replica that has it). A
        retry that finds its idempotency key used is refused the same way while its job lacks replicas:
        WAIT counts this connection's writes, and submit.lua rewrites the key for such a retry."""
        pipe = self.redis.pipeline(transaction=False)
        await self._lua.queue(pipe, script, keys, args)
        pipe.execute_command("WAIT", self.min_replicas, REPLICA_WAIT_MS)
        raw, acked = await pipe.execute()
        if int(acked) < self.min_replicas:
            raise Unavailable(f"written to {acked} of the {self.min_replicas} replicas required "
                                   f"(--redis-min-replicas) within {REPLICA_WAIT_MS} ms; retry with the same "
                                   "idempotency key")
        return raw

    async def fire_many(self, requests: Sequence[FireRequest]) -> list[Fired]:
        """In one pipeline (one round trip); each firing is its own atomic fire.lua call."""
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        runs = []
        for r in requests:
            run = ids.run_id(r.job_id, r.scheduled_ms if r.run_ms is None else r.run_ms)
            runs.append(run)
            await self._lua.queue(
                pipe, "fire",
                [k.job(r.job_id), k.run(run), k.job_runs(r.job_id), k.job_active(r.job_id), k.schedule,
                 k.ready(r.spec.group), k.groups],
                [r.job_id, run, r.scheduled_ms,
                 ("after" if r.after_run else "manual") if r.expected_ms is None else r.expected_ms,
                 r.next_fire_ms, r.overlap, r.skip_reason,
                 json.dumps(self._run_block(r.spec, r.scheduled_ms, r.inputs, r.spec_version, r.rerun_of, r.after_run),
                            separators=(",", ":")),
                 r.spec.trigger.max_runs, r.spec_version],
            )
        replies = await pipe.execute()
        return [Fired(run, FireResult(outcomes.FireStatus(raw[0]), int(raw[1]), RunState(raw[2]) if raw[2] else None))
                for run, raw in zip(runs, replies)]

    async def job_progress(self, job_ids: Sequence[str]) -> dict[str, outcomes.JobProgress]:
        pipe = self.redis.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hmget(self.keys.job(job_id), "state", "runs", "spec_v")
        return {j: outcomes.JobProgress(JobState(v[0]), int(v[1] or 0), int(v[2] or 1))
                for j, v in zip(job_ids, await pipe.execute()) if v[0]}

    async def due_schedule(self, until_ms: int, limit: int = DEFAULT_DUE_LIMIT) -> list[outcomes.ScheduleEntry]:
        rows = await self.redis.zrangebyscore(self.keys.schedule, "-inf", until_ms, start=0, num=limit,
                                              withscores=True)
        return [outcomes.ScheduleEntry(job_id, int(score)) for job_id, score in rows]

    # ---- dispatch ----------------------------------------------------------------------------------

    async def peek_ready(self, group: str, n: int) -> list[Routable]:
        raw = await self._lua("peek", [self.keys.ready(group)], [n])
        return [Routable(t, p, s, r) for t, p, s, r in _groups(raw, 4)]

    async def claim(self, group: str, pairs: Sequence[tuple[str, str]], *, lease_ms: int,
                    timeout_grace_ms: int) -> list[Claim]:
        if not pairs:
            return []
        k = self.keys
        args: list[Any] = [lease_ms, timeout_grace_ms]
        for task_id, worker in pairs:
            args += [task_id, worker]
        raw = await self._lua("claim", [k.ready(group), k.leases, k.fence, k.timeouts], args)
        return [
            Claim(t, w, int(tok), int(att), run, job, int(idx), inp, int(sched), int(count), int(version), upstream)
            for t, w, tok, att, run, job, idx, inp, sched, count, version, upstream in _groups(raw, 12)
        ]

    async def renew(self, worker: str, leases: Sequence[tuple[str, int]], lease_ms: int) -> RenewResult:
        args: list[Any] = [worker, lease_ms]
        for task_id, token in leases:
            args += [task_id, token]
        renewed, lost, deadline = await self._lua("renew", [self.keys.leases], args)
        return RenewResult(
            [outcomes.Lease(t, int(tok)) for t, tok in _groups(renewed, 2)],
            [outcomes.Lease(t, int(tok)) for t, tok in _groups(lost, 2)],
            int(deadline),
        )

    async def report(self, reports: Sequence[Report]) -> list[Verdict]:
        if not reports:
            return []
        k = self.keys
        # The token as a string: report.lua compares it with the task's exactly (see its header).
        batch = json.dumps([[r.task_id, str(r.token), r.outcome, r.result_json, r.error, r.traceback,
                             r.started_ms, r.finished_ms, r.log_path] for r in reports], separators=(",", ":"))
        raw = await self._lua("report", [k.leases, k.delayed, k.timeouts], [batch])
        return [Verdict.of(t, v, s, run, rs, int(nb)) for t, v, s, run, rs, nb in _groups(raw, 6)]

    async def release_due(self, limit: int = DEFAULT_SWEEP_LIMIT,
                          task_ids: Sequence[str] = ()) -> list[outcomes.Released]:
        raw = await self._lua("release", [self.keys.delayed], [limit, *task_ids])
        return [outcomes.Released(t, g) for t, g in _groups(raw, 2)]

    async def delayed_entries(self) -> list[outcomes.Delayed]:
        rows = await self.redis.zrange(self.keys.delayed, 0, -1, withscores=True)
        return [outcomes.Delayed(t, int(s)) for t, s in rows]

    async def reap_expired(self, max_lost: int, limit: int = DEFAULT_SWEEP_LIMIT) -> list[Reaped]:
        raw = await self._lua("reap", [self.keys.leases, self.keys.timeouts], [max_lost, limit, "expired"])
        return self._reaped(raw)

    async def reap_worker(self, worker: str, task_ids: Sequence[str], max_lost: int) -> list[Reaped]:
        if not task_ids:
            return []
        raw = await self._lua("reap", [self.keys.leases, self.keys.timeouts],
                              [max_lost, len(task_ids), "worker", worker, *task_ids])
        return self._reaped(raw)

    @staticmethod
    def _reaped(raw: Sequence[Any]) -> list[Reaped]:
        return [Reaped.of(t, w, s, r, rs, wk, int(nb), int(tok)) for t, w, s, r, rs, wk, nb, tok in _groups(raw, 8)]

    # ---- cancel, pause, resume ---------------------------------------------------------------------

    async def cancel(self, reason: str, *, job_id: str = "", run_ids: Sequence[str] = (),
                     task_ids: Sequence[str] = ()) -> CancelResult:
        raw = await self._lua("cancel", [self.keys.schedule],
                              [reason, job_id, len(run_ids), *run_ids, *task_ids])
        status, cancelled, leased, ended = raw
        return CancelResult(
            outcomes.CancelStatus(status),
            list(cancelled),
            [outcomes.LeasedTask(t, w, int(tok)) for t, w, tok in _groups(leased, 3)],
            [outcomes.EndedRun(r, RunState(s)) for r, s in _groups(ended, 2)],
        )

    async def set_job_state(self, job_id: str, target: JobState, next_fire_ms: int = -1) -> outcomes.StateChange:
        if target not in (JobState.PAUSED, JobState.ACTIVE):
            raise ValueError(f"a job can be set PAUSED or ACTIVE, not {target.value}")
        k = self.keys
        status, state, next_fire = await self._lua("job_state", [k.job(job_id), k.schedule],
                                                   [job_id, target.value, next_fire_ms])
        return outcomes.StateChange(outcomes.StateChangeStatus(status), JobState(state) if state else None,
                                    int(next_fire))

    async def reschedule_after_run(self, job_id: str, run_id: str, next_fire_ms: int) -> outcomes.Rescheduled:
        k = self.keys
        status, next_fire = await self._lua("reschedule", [k.job(job_id), k.schedule, k.awaiting],
                                            [job_id, run_id, next_fire_ms])
        return outcomes.Rescheduled(outcomes.RescheduleStatus(status), int(next_fire))

    def _backfill_keys(self, job_id: str) -> list[str]:
        return [self.keys.job(job_id), self.keys.job_backfill(job_id), self.keys.backfills]

    async def backfill_plan(self, job_id: str, max_concurrent: int,
                            times_ms: Sequence[int]) -> outcomes.BackfillPlanned:
        status, added, pending = await self._lua("backfill", self._backfill_keys(job_id),
                                                 ["plan", job_id, max_concurrent, *times_ms])
        return outcomes.BackfillPlanned(outcomes.BackfillStatus(status), int(added), int(pending))

    async def parents(self) -> set[str]:
        return set(await self.redis.smembers(self.keys.parents))

    async def children(self, job_id: str) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.job_children(job_id)))

    async def backfill_jobs(self) -> dict[str, int]:
        return {job: int(n) for job, n in (await self.redis.hgetall(self.keys.backfills)).items()}

    async def backfill_pending(self, job_id: str, limit: int) -> list[int]:
        return [int(t) for t in await self.redis.zrange(self.keys.job_backfill(job_id), 0, limit - 1)]

    async def backfill_done(self, job_id: str, times_ms: Sequence[int]) -> int:
        _, _, pending = await self._lua("backfill", self._backfill_keys(job_id), ["done", job_id, *times_ms])
        return int(pending)

    async def backfill_drop(self, job_id: str) -> None:
        await self._lua("backfill", self._backfill_keys(job_id), ["drop", job_id])

    async def awaiting_among(self, job_ids: Sequence[str]) -> list[str]:
        if not job_ids:
            return []
        flags = await self.redis.smismember(self.keys.awaiting, list(job_ids))
        return [j for j, member in zip(job_ids, flags) if member]

    async def awaiting_jobs(self) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.awaiting))

    # ---- delete and retention -----------------------------------------------------------------------

    async def delete_job(self, job_id: str, bundle_digests: Sequence[str] = ()) -> outcomes.Deletion:
        k = self.keys
        status, blockers = await self._lua("delete_job", [k.jobs, k.schedule, k.purge], [job_id, *bundle_digests])
        deletion = outcomes.Deletion(outcomes.DeleteStatus(status), list(blockers))
        if deletion.status is outcomes.DeleteStatus.OK:
            self._specs.forget(job_id)
        return deletion

    async def purge_history(self, cursor: int, bounds: RetentionBounds) -> PurgeResult:
        raw = await self._lua("retention", [self.keys.jobs, self.keys.purge],
                              [cursor, bounds.jobs_per_step, bounds.keep_runs, bounds.max_age_ms, bounds.budget])
        return PurgeResult(*(int(x) for x in raw[:4]), more=bool(int(raw[4])))

    # ---- reads ---------------------------------------------------------------------------------------

    async def time_ms(self) -> int:
        if self._test_clock is not None:
            return round(self._test_clock.now() * 1000)
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

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

    async def update_spec(self, job_id: str, base_version: int, spec: pb.JobSpec, next_fire_ms: int,
                          steps: Sequence[tuple[str, pb.JobSpec]] = ()) -> UpdateResult:
        k = self.keys
        step_jobs = [[step_id, spec_to_text(s), s.bundle.digest] for step_id, s in steps]
        cblock = (json.dumps(child_block(spec, base_version + 1, self.priority_aging_ms), separators=(",", ":"))
                  if spec.trigger.WhichOneof("kind") == "after" else "")
        raw = await self._lua("update", [k.job(job_id), k.schedule, k.awaiting],
                              [job_id, base_version, spec_to_text(spec), next_fire_ms, spec.bundle.digest,
                               json.dumps(step_jobs, separators=(",", ":")), cblock, spec.name])
        result = UpdateResult(outcomes.UpdateStatus(raw[0]), JobState(raw[1]) if raw[1] else None, int(raw[2]),
                              int(raw[3]))
        if result.status is outcomes.UpdateStatus.OK:
            self._specs.remember(job_id, spec, result.spec_version)
        return result

    async def job_ids_named(self, name: str) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.job_name(name)))

    async def list_jobs(self, limit: int, state: JobState | None = None, group: str = "") -> list[JobRecord]:
        """Filters are applied while scanning pages of the jobs index, so ``limit`` counts matching jobs. A
        pipeline's step jobs are not listed (the pipeline is; its runs show its steps)."""
        out: list[JobRecord] = []
        start, page = 0, max(limit, 100)
        while len(out) < limit:
            job_ids = await self.redis.zrevrange(self.keys.jobs, start, start + page - 1)
            if not job_ids:
                break
            pipe = self.redis.pipeline(transaction=False)
            for job_id in job_ids:
                pipe.hgetall(self.keys.job(job_id))
            for job_id, h in zip(job_ids, await pipe.execute()):
                if not h:
                    continue
                rec = readable(job_id, lambda: JobRecord.from_hash(job_id, h))
                if rec is None or "pipeline" in h:
                    continue
                if (state is None or rec.state == state) and (not group or rec.spec.group == group):
                    out.append(rec)
                    if len(out) == limit:
                        break
            start += page
        return out

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

    async def pipeline_run_ended_by(self, run_id: str) -> tuple[str, RunState] | None:
        prun = await self.redis.hget(self.keys.run(run_id), "prun")
        if not prun:
            return None
        state, ended_by = await self.redis.hmget(self.keys.run(prun), "state", "ended_by")
        return (prun, RunState(state)) if ended_by == run_id else None

    async def list_runs(self, job_id: str, limit: int, *, with_tasks: bool = False) -> list[RunRecord]:
        run_ids = await self.redis.zrevrange(self.keys.job_runs(job_id), 0, limit - 1)
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hgetall(self.keys.run(run_id))
        read = (readable(r, lambda: RunRecord.from_hash(r, h)) for r, h in zip(run_ids, await pipe.execute()) if h)
        runs = [run for run in read if run is not None]
        if with_tasks:
            for run in runs:
                run.tasks = await self.get_tasks([ids.task_id(run.id, i) for i in range(run.task_count)])
        return runs

    async def get_tasks(self, task_ids: Sequence[str]) -> list[TaskRecord]:
        pipe = self.redis.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hgetall(self.keys.task(task_id))
            pipe.hgetall(self.keys.attempts(task_id))
        raw = await pipe.execute()
        read = (readable(task_id, lambda: TaskRecord.from_hash(task_id, raw[2 * i], raw[2 * i + 1]))
                for i, task_id in enumerate(task_ids) if raw[2 * i])
        return [task for task in read if task is not None]

    async def active_runs(self, job_id: str) -> list[str]:
        return sorted(await self.redis.smembers(self.keys.job_active(job_id)))

    async def run_task_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(self.keys.run(run_id), "task_count")
        return {r: int(c or 0) for r, c in zip(run_ids, await pipe.execute())}

    async def ready_counts(self) -> dict[str, int]:
        groups = sorted(await self.redis.smembers(self.keys.groups))
        pipe = self.redis.pipeline(transaction=False)
        for group in groups:
            pipe.zcard(self.keys.ready(group))
        return dict(zip(groups, await pipe.execute()))

    async def queue_depths(self, limit: int) -> dict[str, QueueDepth]:
        raw = await self._lua("queue_depth", [self.keys.groups], [limit, self.priority_aging_ms])
        out, i = {}, 0
        while i < len(raw):
            group, length, split, pairs = str(raw[i]), int(raw[i + 1]), int(raw[i + 2]), int(raw[i + 3])
            flat = raw[i + 4:i + 4 + 2 * pairs]
            counts = {int(p): int(c) for p, c in zip(flat[::2], flat[1::2])}
            out[group] = QueueDepth(length, counts if split else None)
            i += 4 + 2 * pairs
        return out

    async def ping(self) -> None:
        await self.redis.ping()

    async def counts(self) -> dict[str, int]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.keys.leases)
        pipe.zcard(self.keys.schedule)
        pipe.zcard(self.keys.delayed)
        leased, scheduled, delayed = await pipe.execute()
        return {"leased": leased, "scheduled": scheduled, "delayed": delayed}

    # ---- workers -------------------------------------------------------------------------------------

    async def put_worker(self, worker_id: str, info: dict[str, Any]) -> None:
        await self._lua("worker", [self.keys.workers], [worker_id, json.dumps(info, separators=(",", ":"))])

    async def get_workers(self) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(self.keys.workers)
        return {w: json.loads(v) for w, v in raw.items()}

    async def worker_leases(self, worker_id: str) -> set[str]:
        return set(await self.redis.smembers(self.keys.worker_leases(worker_id)))

    # ---- masters -------------------------------------------------------------------------------------

    async def put_master(self, master_id: str, record: dict[str, Any]) -> None:
        """Record what a master says about itself (``master.lua``: unfenced, a standby records itself too)."""
        await self._lua("master", [], [master_id, json.dumps(record, separators=(",", ":"))])

    async def get_masters(self) -> dict[str, dict[str, Any]]:
        raw = await self.redis.hgetall(self.keys.masters)
        return {m: json.loads(v) for m, v in raw.items()}
