"""The Redis implementation of :class:`~sparkyard.master.store.Store`: every mutation one Lua script call,
every read a pipeline or a read-only script (redis_reads.py).

RedisStore holds no state of its own (beyond an immutable job-spec cache), so any number of masters can
use the same Redis; the scripts' invariants make concurrent use safe.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Sequence

from redis.asyncio import Redis

from sparkyard.clock import Clock
from sparkyard.keys import Keys
from sparkyard.master.records import spec_to_text
from sparkyard.master.redis_reads import RedisReads
from sparkyard.master.routing import Routable
from sparkyard.master.scripts import ScriptLibrary
from sparkyard.master import store_outcomes as outcomes
from sparkyard.master.store import Store
from sparkyard.master.children import child_block
from sparkyard.master.pipelines import pipeline_block
from sparkyard.master.store_values import (
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
from sparkyard.states import JobState, RunState
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard import ids


def _groups(flat: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(flat), size):
        yield flat[i:i + size]


class RedisStore(RedisReads, Store):
    """Sparkyard's state in Redis (key schema: :mod:`sparkyard.keys`): the script calls here, the plain reads
    in :class:`RedisReads`."""

    def __init__(self, redis: Redis, keys: Keys, priority_aging_ms: int = DEFAULT_PRIORITY_AGING_MS,
                 min_replicas: int = 0, *, observe: Callable[[str, float], None] | None = None,
                 test_clock: Clock | None = None) -> None:
        """``test_clock``, for tests only, replaces Redis ``TIME`` as the store's clock (ScriptLibrary)."""
        scripts = ScriptLibrary(redis, keys, observe=observe, test_clock=test_clock, min_replicas=min_replicas)
        super().__init__(redis, keys, scripts, test_clock)
        self.priority_aging_ms = priority_aging_ms
        self._lua = self.scripts = scripts

    # ---- submit and fire -------------------------------------------------------------------------

    def _run_block(self, spec: pb.JobSpec, scheduled_ms: int, inputs: Sequence[Sequence[Any]],
                   spec_version: int = 1, rerun_of: str = "", keep_steps: dict[str, str] | None = None,
                   backfill: bool = False) -> dict[str, Any]:
        """create_run's block as JSON (the task ids are built in Lua from the run id, so identical runs of a
        bulk submit share one block). A pipeline's block carries its graph and each step's block."""
        block = RunBlock.of(spec, scheduled_ms, () if spec.steps else inputs, self.priority_aging_ms, spec_version,
                            rerun_of, backfill=backfill).to_wire()
        if spec.steps:
            block.update(pipeline_block(spec, scheduled_ms, self.priority_aging_ms, keep_steps or {}))
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
        # With --redis-min-replicas the reply waits for replicas (ScriptLibrary.execute). A retry that finds its
        # idempotency key used is refused the same way while its job lacks replicas: WAIT counts this
        # connection's writes, and submit.lua rewrites the key for such a retry.
        raw = await self._lua("submit", [self.keys.jobs, self.keys.schedule], args)
        return [SubmitResult(j, int(d) == 1, int(c), int(n), bool(int(f)), id_taken=int(d) == 2,
                             parent_missing=int(d) == 3, bundle_missing=int(d) == 4)
                for j, d, c, n, f in _groups(raw, 5)]

    async def fire_many(self, requests: Sequence[FireRequest]) -> list[Fired]:
        """In one ``fire.lua`` call (one round trip, the script's library run once), each firing atomic on its
        own. Firings whose run blocks are the same (the jobs of a bulk submit due in the same second) send it
        once; a pipeline's block is sent per firing, since making its steps' runs writes into it."""
        blocks: list[str] = []
        block_index: dict[str, int] = {}
        fires: list[list[Any]] = []
        runs = []
        for r in requests:
            run = ids.run_id(r.job_id, r.scheduled_ms if r.run_ms is None else r.run_ms)
            runs.append(run)
            block = json.dumps(self._run_block(r.spec, r.scheduled_ms, r.inputs, r.spec_version, r.rerun_of,
                                               r.keep_steps, r.backfill), separators=(",", ":"))
            bi = block_index.get(block) if not r.spec.steps else None
            if bi is None:
                bi = len(blocks)
                blocks.append(block)
                if not r.spec.steps:
                    block_index[block] = bi
            fires.append([r.job_id, run, r.scheduled_ms, "manual" if r.expected_ms is None else r.expected_ms,
                          r.next_fire_ms, r.overlap, r.skip_reason, bi, r.spec.trigger.max_runs, r.spec_version,
                          max(1, r.spec.max_active_runs)])
        payload = '{"blocks":[' + ",".join(blocks) + '],"fires":' + json.dumps(fires, separators=(",", ":")) + "}"
        raw = await self._lua("fire", [], [payload])
        out = []
        for run, (status, fired_ms, state) in zip(runs, _groups(raw, 3)):
            fire_status = outcomes.FireStatus(status)
            if fire_status is outcomes.FireStatus.FAILED:
                out.append(Fired(run, FireResult(fire_status, int(fired_ms), None, error=state)))
            elif fire_status is outcomes.FireStatus.STALE:
                out.append(Fired(run, FireResult(fire_status, int(fired_ms), None, due_ms=int(state) if state else -1)))
            else:
                out.append(Fired(run, FireResult(fire_status, int(fired_ms), RunState(state) if state else None)))
        return out

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
        return [Verdict.of(t, v, s, run, rs, int(nb), *pipeline) for t, v, s, run, rs, nb, *pipeline in _groups(raw, 9)]

    async def release_due(self, limit: int = DEFAULT_SWEEP_LIMIT,
                          task_ids: Sequence[str] = ()) -> list[outcomes.Released]:
        raw = await self._lua("release", [self.keys.delayed], [limit, *task_ids])
        return [outcomes.Released(t, g) for t, g in _groups(raw, 2)]

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
        return [Reaped.of(t, w, s, r, rs, wk, int(nb), int(tok), *pipeline)
                for t, w, s, r, rs, wk, nb, tok, *pipeline in _groups(raw, 11)]

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
            [outcomes.EndedRun(r, RunState(s), outcomes.PipelineEnd.of(*pipeline))
             for r, s, *pipeline in _groups(ended, 5)],
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

    async def backfill_done(self, job_id: str, times_ms: Sequence[int]) -> int:
        _, _, pending = await self._lua("backfill", self._backfill_keys(job_id), ["done", job_id, *times_ms])
        return int(pending)

    async def backfill_drop(self, job_id: str) -> None:
        await self._lua("backfill", self._backfill_keys(job_id), ["drop", job_id])

    # ---- webhook deliveries ----------------------------------------------------------------------------

    async def webhook_defaults(self, on_failure: bool, on_success: bool) -> None:
        await self._lua("webhook", [], ["defaults", int(on_failure), int(on_success)])

    async def webhook_retry(self, run_id: str, due_ms: int) -> int:
        return int(await self._lua("webhook", [], ["retry", run_id, due_ms]))

    async def webhook_done(self, run_id: str) -> bool:
        return bool(await self._lua("webhook", [], ["done", run_id]))

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

    # ---- update and queue depths ---------------------------------------------------------------------

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

    # ---- workers and masters -------------------------------------------------------------------------

    async def put_worker(self, worker_id: str, info: dict[str, Any]) -> None:
        await self._lua("worker", [self.keys.workers], [worker_id, json.dumps(info, separators=(",", ":"))])

    async def put_master(self, master_id: str, record: dict[str, Any]) -> None:
        """Record what a master says about itself (``master.lua``: unfenced, a standby records itself too)."""
        await self._lua("master", [], [master_id, json.dumps(record, separators=(",", ":"))])
