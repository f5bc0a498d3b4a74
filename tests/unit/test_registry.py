"""The master's view of worker slots: leases are held per (task, fencing token), and only the matching
lease frees a slot — a late result of an older attempt must not free the slot of the newer one."""

from __future__ import annotations

import asyncio

from sparkyard.clock import FakeClock
from sparkyard.master.events import Events, WorkReady
from sparkyard.master.registry import WorkerRegistry, WorkerSession


def _session(worker_id: str = "w1", slots: int = 2, outbound: int = 4) -> WorkerSession:
    return WorkerSession(worker_id=worker_id, group="default", slots=slots, host="h", pid=1, labels={},
                         default_runner=0, registered_at=0.0, last_seen=0.0, outbound=asyncio.Queue(outbound))


class _Registry:
    def __init__(self) -> None:
        self.woken = 0
        events = Events()
        events.subscribe(WorkReady, self._wake)
        events.seal()
        self.registry = WorkerRegistry(FakeClock(), events)

    def _wake(self, _: WorkReady) -> None:
        self.woken += 1


async def test_a_release_with_the_leased_token_frees_the_slot_and_wakes_the_scheduler() -> None:
    r = _Registry()
    session = _session()
    r.registry.add(session)
    r.registry.lease("w1", [("t1", 7), ("t2", 8)])
    assert session.idle == 0 and r.registry.idle_slots("default") == 0
    woken = r.woken
    r.registry.release("w1", "t1", 7)
    assert session.idle == 1 and session.leased == {"t2": 8} and r.woken == woken + 1


async def test_a_late_result_of_an_older_attempt_leaves_the_newer_lease_in_place() -> None:
    r = _Registry()
    session = _session(slots=1)
    r.registry.add(session)
    r.registry.lease("w1", [("t1", 9)])  # attempt with token 9 runs; token 7 was an earlier attempt
    woken = r.woken
    r.registry.release("w1", "t1", 7)
    assert session.leased == {"t1": 9} and session.idle == 0 and r.woken == woken


async def test_a_release_frees_only_that_workers_lease() -> None:
    r = _Registry()
    a, b = _session("a"), _session("b")
    r.registry.add(a)
    r.registry.add(b)
    r.registry.lease("a", [("t1", 1)])
    r.registry.lease("b", [("t1", 2)])
    r.registry.release("a", "t1", 1)
    assert a.leased == {} and b.leased == {"t1": 2} and r.registry.idle_slots("default") == 3


async def test_releases_of_unknown_workers_or_tasks_change_nothing() -> None:
    r = _Registry()
    session = _session()
    r.registry.add(session)
    r.registry.lease("w1", [("t1", 1)])
    woken = r.woken
    r.registry.release("nobody", "t1", 1)
    r.registry.release("w1", "other", 1)
    assert session.leased == {"t1": 1} and r.woken == woken


async def test_a_draining_closed_or_backed_up_worker_offers_no_slot() -> None:
    r = _Registry()
    draining, closed, full = _session("d"), _session("c"), _session("f", outbound=1)
    for s in (draining, closed, full):
        r.registry.add(s)
    draining.draining = True
    closed.close("test")
    full.outbound.put_nowait(object())  # type: ignore[arg-type]
    assert r.registry.idle_slots("default") == 0
    assert [load.leased for load in r.registry.loads("default")] == [2, 2, 2]  # counted as full for routing
