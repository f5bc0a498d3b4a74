"""The slot scheduler (Doris FE's routine-load scheduler): ready tasks → idle worker slots.

It is event driven. Anything that can make a dispatch possible — a task becoming READY (fired,
retried, requeued), a slot freeing, a worker connecting — is published as
:class:`~sparkyard.master.events.WorkReady`, which calls :meth:`SlotScheduler.wake`; the loop
then runs dispatch rounds until no group has both an idle slot and a ready task, and sleeps on its
event again. It never polls.

One round for one node group:

1. ``idle`` = Σ idle slots of the group's workers (a draining or backed-up worker has none);
2. peek the first ``min(idle, dispatch_batch)`` tasks of the group's ready queue (priority order);
3. route them (:mod:`sparkyard.master.routing`);
4. claim them in one Lua call (lease, fencing token, attempt record); from then on they hold their slots;
5. send each worker ONE ``TaskBatch`` with its tasks — never more than its idle slots.

In a burst (a round filled a whole batch and idle slots remain) step 5 of a round is done by the next one, while
Redis runs that round's claim: building a batch of 1,024 assignments takes the master about as long as Redis
takes to claim one, so the two overlap instead of taking turns (100,000 due in one second: leased at ~9,000 a
second after it instead of ~8,000; docs/benchmarks.md, "Bursts"). Any other round sends its tasks before it
returns.

An assignment carries its job's spec without the split's input list: the task's own inputs travel in
``TaskAssignment.inputs``, and a run split over N inputs would otherwise send every input N times (a run of
2,000 input files: ~120 KB per assignment, 240 MB per run, all serialised by the master and parsed by
the workers). The spec sent is built once per job version (:class:`WireSpecs`).

A task of a run fired ahead of its time (:mod:`sparkyard.master.arming`) is sent with ``start_after``, how
long before its scheduled time it is by the master's clock, so the worker starts it at that time: a relative
wait, which a worker's clock skew does not shift. It is bounded by the furthest fire-ahead (a burst's), so
a run whose scheduled time is ahead of this master's clock for another reason (a trigger timed by Redis's
clock) waits no longer.

Tasks that cannot be placed stay READY in Redis; the master keeps no queue of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, defaultdict
from typing import Awaitable, Callable

from sparkyard.clock import Clock
from sparkyard.master.records import add_inputs
from sparkyard.master.registry import WorkerRegistry, WorkerSession
from sparkyard.master.routing import Router
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Store
from sparkyard.master.store_values import Claim
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# A worker's connection, and the send time of its latest message read on it (its own monotonic clock, µs).
_Asked = tuple[WorkerSession, int]

# After an unexpected error (Redis down) the loop waits this long before trying again, doubling up to
# the maximum, so a broken Redis is not hammered; any wake() during the pause is kept.
ERROR_BACKOFF_S = 0.1
ERROR_BACKOFF_MAX_S = 5.0
# Specs as sent to workers, kept per job version (a version's spec never changes).
WIRE_SPECS_KEPT = 1024


class WireSpecs:
    """A job version's spec as assignments carry it: the split's input list left out (each task has its own)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, int], tuple[pb.JobSpec, pb.JobSpec]] = OrderedDict()

    def of(self, key: tuple[str, int], spec: pb.JobSpec) -> pb.JobSpec:
        kept = self._kept.get(key)
        if kept is not None and kept[0] is spec:
            self._kept.move_to_end(key)
            return kept[1]
        wire = spec
        if spec.split.inputs:
            wire = pb.JobSpec()
            wire.CopyFrom(spec)
            del wire.split.inputs[:]
        self._kept[key] = (spec, wire)
        if len(self._kept) > WIRE_SPECS_KEPT:
            self._kept.popitem(last=False)
        return wire


def _retrieved(future: asyncio.Future[list[Claim]]) -> None:
    """A claim left in flight by a failed round: its outcome is not needed (nor an error worth a second log)."""
    if not future.cancelled():
        future.exception()


class SlotScheduler:
    def __init__(self, store: Store, registry: WorkerRegistry, clock: Clock, *, lease_ms: int,
                 timeout_grace_ms: int, dispatch_batch: int, undelivered: Callable[[list[Claim]], None],
                 router: Router | None = None,
                 on_claimed: Callable[[list[Claim]], Awaitable[None]] | None = None,
                 start_after_max_ms: int = 0) -> None:
        """``undelivered`` hands back tasks claimed for a worker that vanished before they were sent
        (:meth:`sparkyard.master.reports.ReportSink.undelivered`: the path every report takes)."""
        self._store = store
        self._undelivered = undelivered
        self._registry = registry
        self._clock = clock
        self._lease_ms = lease_ms
        self._grace_ms = timeout_grace_ms
        self._batch = dispatch_batch
        self._start_after_max_ms = start_after_max_ms
        self._router = router or Router()
        self._on_claimed = on_claimed
        self._event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._wire = WireSpecs()
        self._pending: list[Claim] = []  # a round's claims the next round sends (dispatch_round)
        self._pending_asked: dict[str, _Asked] = {}  # what their workers had said before the claim (_deliver)
        self.dispatched = 0

    def wake(self) -> None:
        self._event.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="slot-scheduler")
        self.wake()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _run(self) -> None:
        backoff = ERROR_BACKOFF_S
        while True:
            await self._event.wait()
            self._event.clear()
            try:
                while await self.dispatch_round():
                    pass
                backoff = ERROR_BACKOFF_S
            except asyncio.CancelledError:
                raise
            except Exception:
                log_failure(log, "dispatch round failed; retrying in %.1fs", backoff)
                await self._clock.sleep(backoff)
                backoff = min(backoff * 2, ERROR_BACKOFF_MAX_S)
                self._event.set()

    async def dispatch_round(self) -> bool:
        """One round over every group; True when another round may place more tasks.

        A round that may be followed by another (it filled a whole batch and idle slots remain: a burst) leaves
        its claims to be built and sent by the next round, while Redis runs that round's claim; every other
        round sends its own before it returns. Claimed tasks hold their slots from the claim on."""
        pending, self._pending = self._pending, []
        pending_asked, self._pending_asked = self._pending_asked, {}
        specs = self._specs_of(pending) if pending else None  # asked for with this round's first peek
        claimed: list[Claim] = []
        asked: dict[str, _Asked] = {}  # per worker, what it had said before the round's first claim for it
        claiming: asyncio.Future[list[Claim]] | None = None
        more = False
        try:
            for group in sorted(self._registry.groups()):
                idle = self._registry.idle_slots(group)
                if idle == 0:
                    continue
                want = min(idle, self._batch)
                ready = await self._store.peek_ready(group, want)
                if not ready:
                    continue
                pairs = self._router.assign(group, ready, self._registry.loads(group))
                if not pairs:
                    continue
                for worker_id in {worker for _, worker in pairs}:
                    session = self._registry.get(worker_id)
                    if session is not None:
                        asked.setdefault(worker_id, (session, session.heard_us))
                claiming = asyncio.ensure_future(self._store.claim(group, pairs, lease_ms=self._lease_ms,
                                                                   timeout_grace_ms=self._grace_ms))
                if specs is not None:
                    await asyncio.sleep(0)  # the claim goes out; the round before is built while Redis runs it
                    await self._deliver(pending, await specs, pending_asked)
                    specs = None
                claims = await claiming
                for claim in claims:
                    self._registry.lease(claim.worker, ((claim.task_id, claim.token),))
                claimed += claims
                if len(ready) == want and claims and self._registry.idle_slots(group):
                    more = True
            if specs is not None:
                await self._deliver(pending, await specs, pending_asked)
                specs = None
            if more:
                self._pending, self._pending_asked, claimed = claimed, asked, []
            elif claimed:
                await self._deliver(claimed, await self._specs_of(claimed), asked)
        except BaseException:
            self._unreserve(pending + claimed)  # still LEASED in Redis: their leases expire, the reaper requeues
            if specs is not None:
                specs.cancel()
            if claiming is not None and not claiming.done():  # its claims wait in Redis for their leases to expire
                claiming.add_done_callback(_retrieved)
            raise
        return more

    def _specs_of(self, claims: list[Claim]) -> asyncio.Future[dict[tuple[str, int], pb.JobSpec]]:
        return asyncio.ensure_future(self._store.get_specs({(c.job_id, c.spec_version) for c in claims}))

    def _unreserve(self, claims: list[Claim]) -> None:
        for claim in claims:
            self._registry.release(claim.worker, claim.task_id, claim.token)

    async def _deliver(self, claims: list[Claim], specs: dict[tuple[str, int], pb.JobSpec],
                       asked: dict[str, _Asked]) -> None:
        """Build every worker's batch, then send them. ``claims`` is emptied once the batches are built: from
        then on its tasks are the workers' (or handed back), not the round's to free if something fails.
        ``asked``: per worker, its connection and the send time of its latest message read on it before its tasks
        were claimed (the lease began after it: the worker counts the first lease from then, TaskBatch.asked_us).
        A worker that connected again since gets none of them (they go back to the ready queue): that time was on
        the clock of the connection it had then, perhaps another process's on another host."""
        by_worker: dict[str, list[Claim]] = defaultdict(list)
        for claim in claims:
            by_worker[claim.worker].append(claim)
        undeliverable: list[Claim] = []
        batches: list[tuple[str, pb.MasterMessage, list[Claim]]] = []
        now_ms = int(self._clock.now() * 1000)
        for worker_id, batch in by_worker.items():
            # Built in the message (a TaskBatch made from a list copies every assignment and its spec again).
            message = pb.MasterMessage()
            tasks = message.batch.tasks
            built: list[Claim] = []
            for claim in batch:
                key = (claim.job_id, claim.spec_version)
                spec = specs.get(key)
                if spec is None:
                    undeliverable.append(claim)
                    continue
                self._assignment(tasks.add(), claim, self._wire.of(key, spec), now_ms)
                built.append(claim)
            if built:
                batches.append((worker_id, message, built))
        delivered = list(claims)
        claims.clear()
        for worker_id, message, built in batches:
            session = self._registry.get(worker_id)
            said = asked.get(worker_id)
            if session is None or said is None or said[0] is not session:
                undeliverable.extend(built)
                continue
            message.batch.reports_seq = session.reports_seq
            message.batch.asked_us = said[1]
            if not self._registry.send(worker_id, message):
                undeliverable.extend(built)
                continue
            self.dispatched += len(built)
            log.debug("worker=%s batch of %d tasks", worker_id, len(built))
        if undeliverable:
            log.info("returning %d undeliverable tasks to the ready queue", len(undeliverable))
            self._unreserve(undeliverable)
            self._undelivered(undeliverable)
        if self._on_claimed is not None:
            await self._on_claimed(delivered)

    def _assignment(self, a: pb.TaskAssignment, claim: Claim, spec: pb.JobSpec, now_ms: int) -> None:
        """Fill the batch's new assignment ``a`` for ``claim``."""
        a.task_id = claim.task_id
        a.run_id = claim.run_id
        a.job_id = claim.job_id
        a.index = claim.index
        a.task_count = claim.task_count
        a.attempt = claim.attempt
        a.fencing_token = claim.token
        a.spec.CopyFrom(spec)
        add_inputs(a.inputs, claim.inputs_json)
        a.upstream_json = claim.upstream_json
        a.scheduled_at.FromMilliseconds(claim.scheduled_ms)
        a.lease.FromMilliseconds(self._lease_ms)
        early_ms = min(claim.scheduled_ms - now_ms, self._start_after_max_ms)
        if early_ms > 0:
            a.start_after.FromMilliseconds(early_ms)
