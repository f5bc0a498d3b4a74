"""Which worker gets which ready task: the routing strategies of the slot scheduler (pure, no I/O).

The scheduler hands :func:`assign` the head of a group's ready queue (already in priority order) and the
idle slots of the group's workers; tasks are placed greedily in queue order, so a higher-priority task
always gets a slot before a lower-priority one. A task no strategy can place stays READY in Redis.

Strategies (per job, ``JobSpec.routing``):

* default — the task's previous worker if it has an idle slot (the worker that last ran this task index
  of the job, or that lost it), else least-loaded: reuse keeps a warm session's caches and imports
  (Doris FE's "previous BE first");
* ``LEAST_LOADED`` — the worker with the lowest leased/slots ratio (most idle slots breaking ties);
* ``PREVIOUS_WORKER`` — the same as the default, named explicitly;
* ``ROUND_ROBIN`` — the next worker with an idle slot after the last one chosen, across rounds;
* ``RANDOM`` — uniformly among workers with an idle slot;
* ``CONSISTENT_HASH`` — the worker that owns the task's routing key on a hash ring (virtual nodes), or
  the next one clockwise with an idle slot, so a key sticks to one worker while the set is stable.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import random
from dataclasses import dataclass, field
from typing import Sequence

# Points per worker on the consistent-hash ring; 64 keeps the spread within a few percent.
RING_REPLICAS = 64


@dataclass
class WorkerLoad:
    """A worker as routing sees it: how many slots it has and how many are leased right now."""

    worker_id: str
    slots: int
    leased: int

    @property
    def idle(self) -> int:
        return max(0, self.slots - self.leased)

    @property
    def load(self) -> float:
        return self.leased / self.slots if self.slots else 1.0


@dataclass(frozen=True)
class Routable:
    """What routing needs of a ready task."""

    task_id: str
    prev_worker: str = ""
    routing: str = ""  # protobuf Routing name; '' or ROUTING_UNSPECIFIED = default
    route_key: str = ""


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@dataclass
class Router:
    """Routing state that outlives one dispatch round (the round-robin cursor, the random source)."""

    rng: random.Random = field(default_factory=random.Random)
    _rr_last: dict[str, str] = field(default_factory=dict)  # group → last worker chosen

    def assign(self, group: str, tasks: Sequence[Routable], workers: Sequence[WorkerLoad]) -> list[tuple[str, str]]:
        """(task id, worker id) pairs for the tasks that can be placed; ``workers`` is updated in place."""
        pool = _Pool(workers)
        ring = _Ring(pool.order) if any(t.routing == "ROUTING_CONSISTENT_HASH" for t in tasks) else None
        out: list[tuple[str, str]] = []
        for task in tasks:
            if not pool.idle:
                break
            chosen = self._choose(group, task, pool, ring)
            if chosen is None:
                continue
            pool.take(chosen)
            out.append((task.task_id, chosen.worker_id))
        return out

    def _choose(self, group: str, task: Routable, pool: _Pool, ring: _Ring | None) -> WorkerLoad | None:
        strategy = task.routing or "ROUTING_UNSPECIFIED"
        by_id = pool.by_id
        if strategy in ("ROUTING_UNSPECIFIED", "ROUTING_PREVIOUS_WORKER"):
            prev = by_id.get(task.prev_worker)
            if prev is not None and prev.idle:
                return prev
            return pool.least_loaded()
        if strategy == "ROUTING_LEAST_LOADED":
            return pool.least_loaded()
        if strategy == "ROUTING_ROUND_ROBIN":
            return self._round_robin(group, by_id, pool.order)
        if strategy == "ROUTING_RANDOM":
            idle = [by_id[w] for w in pool.order if by_id[w].idle]
            return self.rng.choice(idle) if idle else None
        if strategy == "ROUTING_CONSISTENT_HASH" and ring is not None:
            for worker_id in ring.walk(task.route_key):
                if by_id[worker_id].idle:
                    return by_id[worker_id]
            return None
        return pool.least_loaded()

    def _round_robin(self, group: str, by_id: dict[str, WorkerLoad], order: list[str]) -> WorkerLoad | None:
        if not order:
            return None
        last = self._rr_last.get(group, "")
        start = bisect.bisect_right(order, last)
        for i in range(len(order)):
            worker_id = order[(start + i) % len(order)]
            if by_id[worker_id].idle:
                self._rr_last[group] = worker_id
                return by_id[worker_id]
        return None


class _Pool:
    """The workers of one round: how many idle slots they have in all, and the least loaded of them at hand.

    Least loaded is the smallest (load, -idle, worker id). A heap finds it in O(log workers) a task: a scan of
    every worker for every task made routing a round of 1,024 tasks over 20 workers ~9 % of a master's CPU in
    a burst, and grew with the workers. A worker's entry goes stale when it takes a task and is pushed again
    with its new key; stale entries are dropped as they surface."""

    def __init__(self, workers: Sequence[WorkerLoad]) -> None:
        self.by_id = {w.worker_id: w for w in workers}
        self.order = sorted(self.by_id)
        self.idle = sum(w.idle for w in self.by_id.values())
        self._heap = [_rank(w) for w in self.by_id.values() if w.idle]
        heapq.heapify(self._heap)

    def least_loaded(self) -> WorkerLoad | None:
        while self._heap:
            load, minus_idle, worker_id = self._heap[0]
            w = self.by_id[worker_id]
            if w.idle and minus_idle == -w.idle:  # the entry is current: idle alone moves when a worker takes one
                return w
            heapq.heappop(self._heap)
        return None

    def take(self, w: WorkerLoad) -> None:
        w.leased += 1
        self.idle -= 1
        if w.idle:
            heapq.heappush(self._heap, _rank(w))


def _rank(w: WorkerLoad) -> tuple[float, int, str]:
    return (w.load, -w.idle, w.worker_id)


class _Ring:
    """A consistent-hash ring over worker ids with RING_REPLICAS virtual nodes each."""

    def __init__(self, worker_ids: Sequence[str]) -> None:
        points = sorted((_hash(f"{w}#{i}"), w) for w in worker_ids for i in range(RING_REPLICAS))
        self._hashes = [h for h, _ in points]
        self._owners = [w for _, w in points]

    def walk(self, key: str) -> list[str]:
        """Distinct workers clockwise from the key's position: owner first."""
        if not self._hashes:
            return []
        start = bisect.bisect(self._hashes, _hash(key))
        seen: list[str] = []
        for i in range(len(self._owners)):
            owner = self._owners[(start + i) % len(self._owners)]
            if owner not in seen:
                seen.append(owner)
        return seen
