"""The preloader's one firing path on a RedisStore timed by a FakeClock: schedule entries, misfire policies,
overlap REPLACE, manual triggers and a second master's duplicate firing — no waiting."""

from __future__ import annotations

import asyncio
import inspect
from typing import Awaitable, Callable

import pytest
import redis.exceptions

from clocked_store import ClockedStores, settle
from master_rig import HORIZON_MS, MasterRig
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.master import preloader as preloader_module
from sparkyard.master.jobs import PAUSE_WITHDRAWS_MS
from sparkyard.master.preloader import RETRY_BACKOFF_S
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store_outcomes import ScheduleEntry
from sparkyard.master.store_values import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import RunState
from sparkyard.v1 import sparkyard_pb2 as pb

EVERY_MS = 10_000


class Rig(MasterRig):
    def __init__(self, clock: FakeClock, store: RedisStore, cfg: MasterConfig | None = None) -> None:
        super().__init__(clock, store, cfg)
        self.preloader = self.master.preloader

    async def submit(self, job_id: str, first_ms: int, **spec: object) -> pb.JobSpec:
        every = pb.Trigger(every=pb.Trigger.Every(interval={"seconds": EVERY_MS // 1000}))
        norm = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=every, **spec))
        (result,) = await self.store.submit_many([NewJob(job_id, norm, "abs", first_ms)], 60_000)
        assert not result.duplicate and not result.id_taken
        return norm

    async def runs(self, job_id: str) -> list[tuple[int, RunState]]:
        """(scheduled ms, state) of the job's runs, oldest first."""
        runs = await self.store.list_runs(job_id, 100)
        return sorted((r.scheduled_ms, r.state) for r in runs)

    async def has_runs(self, job_id: str, want: list[tuple[int, RunState]]) -> bool:
        return await self.runs(job_id) == want

    async def next_fire(self, job_id: str) -> int:
        job = await self.store.get_job(job_id)
        assert job is not None
        return job.next_fire_ms

    def armed(self) -> list[tuple[str, int]]:
        """Entries whose timers expire within the horizon (moving the fake clock through it)."""
        self.clock.advance(HORIZON_MS / 1000)
        out = []
        while not self.arming.due.empty():
            out.append(self.arming.due.get_nowait())
        return out


@pytest.fixture
async def rig(clocked_stores: ClockedStores) -> Rig:
    clock = FakeClock()
    return Rig(clock, await clocked_stores.make(clock))


async def test_a_due_entry_fires_one_run_and_arms_the_next(rig: Rig) -> None:
    due = rig.now_ms()
    await rig.submit("j1", due)
    await rig.preloader.fire_batch([("j1", due)])
    assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]
    assert await rig.next_fire("j1") == due + EVERY_MS
    assert ("j1", due + EVERY_MS) in rig.armed()


async def test_an_entry_fired_twice_makes_one_run(rig: Rig) -> None:
    """A second master (or a duplicate timer) firing the same entry finds it consumed."""
    due = rig.now_ms()
    await rig.submit("j1", due)
    await rig.preloader.fire_batch([("j1", due)])
    await rig.preloader.fire_batch([("j1", due)])
    assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]
    assert await rig.next_fire("j1") == due + EVERY_MS


async def test_an_entry_whose_run_a_manual_trigger_made_arms_the_next_firing(rig: Rig) -> None:
    """A manual trigger on the entry's very millisecond made its run: the entry still moves on."""
    due = rig.now_ms()
    spec = await rig.submit("j1", due)
    await rig.store.fire("j1", spec, due, expected_ms=None, next_fire_ms=-1, overlap="allow", inputs=[()])
    await rig.preloader.fire_batch([("j1", due)])
    assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]
    assert await rig.next_fire("j1") == due + EVERY_MS
    assert ("j1", due + EVERY_MS) in rig.armed()


async def test_misfire_skip_records_one_skipped_run_and_moves_on(rig: Rig) -> None:
    due = rig.now_ms() - 35_000  # four fire times missed: -35 s, -25 s, -15 s, -5 s
    await rig.submit("j1", due, misfire=pb.MISFIRE_SKIP)
    await rig.preloader.fire_batch([("j1", due)])
    assert await rig.runs("j1") == [(due, RunState.SKIPPED)]
    assert await rig.next_fire("j1") == due + 4 * EVERY_MS
    assert ("j1", due + 4 * EVERY_MS) in rig.armed()


async def test_catch_up_fires_the_latest_missed_runs_in_order_and_skips_the_rest(rig: Rig) -> None:
    due = rig.now_ms() - 35_000
    await rig.submit("j1", due, misfire=pb.MISFIRE_CATCH_UP, misfire_catch_up_limit=2)
    await rig.preloader.fire_batch([("j1", due)])
    assert await rig.runs("j1") == [(due, RunState.SKIPPED), (due + 2 * EVERY_MS, RunState.SCHEDULED),
                                     (due + 3 * EVERY_MS, RunState.SCHEDULED)]
    assert await rig.next_fire("j1") == due + 4 * EVERY_MS


async def test_jobs_with_different_step_counts_fire_in_one_batch(rig: Rig) -> None:
    now = rig.now_ms()
    await rig.submit("late", now - 35_000, misfire=pb.MISFIRE_CATCH_UP, misfire_catch_up_limit=3)
    await rig.submit("on-time", now)
    await rig.submit("gone", now)
    await rig.store.cancel("test", job_id="gone")
    await rig.preloader.fire_batch([("late", now - 35_000), ("on-time", now), ("gone", now)])
    assert len(await rig.runs("late")) == 4  # one skipped, three caught up
    assert await rig.runs("on-time") == [(now, RunState.SCHEDULED)]
    assert await rig.runs("gone") == []
    armed = dict(rig.armed())
    assert armed.get("late") == now + 5_000 and armed.get("on-time") == now + EVERY_MS and "gone" not in armed


async def test_a_batch_reads_the_specs_of_its_jobs_in_one_call(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new leader has no spec cached: a second of many due jobs must not wait on one read per job."""
    now = rig.now_ms()
    for i in range(5):
        await rig.submit(f"j{i}", now)
    calls: list[int] = []
    read_many = rig.store.get_specs

    async def counted(versions: object) -> object:
        calls.append(len(list(versions)))  # type: ignore[call-overload]
        return await read_many(versions)

    async def one_by_one(*_: object) -> None:
        raise AssertionError("a spec read one by one")

    monkeypatch.setattr(rig.store, "get_specs", counted)
    monkeypatch.setattr(rig.store, "get_spec", one_by_one)
    await rig.preloader.fire_batch([(f"j{i}", now) for i in range(5)])
    assert calls == [5]
    for i in range(5):
        assert await rig.runs(f"j{i}") == [(now, RunState.SCHEDULED)]


async def test_overlap_replace_cancels_the_active_run_before_firing(rig: Rig) -> None:
    due = rig.now_ms()
    await rig.submit("j1", due, overlap=pb.OVERLAP_REPLACE)
    await rig.preloader.fire_batch([("j1", due)])
    rig.clock.advance(EVERY_MS / 1000)
    await rig.preloader.fire_batch([("j1", due + EVERY_MS)])
    assert await rig.runs("j1") == [(due, RunState.CANCELLED), (due + EVERY_MS, RunState.SCHEDULED)]


async def test_overlap_forbid_skips_while_a_run_is_active(rig: Rig) -> None:
    due = rig.now_ms()
    await rig.submit("j1", due, overlap=pb.OVERLAP_FORBID)
    await rig.preloader.fire_batch([("j1", due)])
    rig.clock.advance(EVERY_MS / 1000)
    await rig.preloader.fire_batch([("j1", due + EVERY_MS)])
    assert await rig.runs("j1") == [(due, RunState.SCHEDULED), (due + EVERY_MS, RunState.SKIPPED)]
    assert await rig.next_fire("j1") == due + 2 * EVERY_MS


async def test_a_manual_trigger_fires_now_and_leaves_the_schedule(rig: Rig) -> None:
    first = rig.now_ms() + 30_000
    spec = await rig.submit("j1", first)
    rig.clock.advance(1.0)
    run_id, status = await rig.preloader.trigger_now("j1", spec, 1)
    assert status == "created" and run_id.startswith("j1.")
    assert await rig.runs("j1") == [(rig.now_ms(), RunState.SCHEDULED)]
    assert await rig.next_fire("j1") == first


async def test_the_firing_loop_fires_entries_as_their_timers_expire(rig: Rig) -> None:
    due = rig.now_ms() + 5_000
    await rig.submit("j1", due)
    async with rig.firing():
        rig.clock.advance(5.0)
        await settle(rig.store)  # the firing coroutines run on this loop: let them take the entry
        assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]


async def test_the_firing_loop_fires_a_run_ahead_of_its_time_by_the_fire_ahead(rig: Rig) -> None:
    """Fired (created, its tasks ready to lease) the master's fire-ahead before its time; the worker is
    told to wait the rest (test_scheduler.py)."""
    ahead_s = rig.arming.ahead_ms / 1000
    assert ahead_s > 0  # the default
    due = rig.now_ms() + 5_000
    await rig.submit("j1", due)
    async with rig.firing():
        rig.clock.advance(5.0 - ahead_s - 0.05)
        await settle(rig.store)
        assert await rig.runs("j1") == []
        rig.clock.advance(0.06)
        await settle(rig.store)
        assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]


async def test_a_pause_cancels_the_run_fired_ahead_that_has_not_reached_its_time(clocked_stores: ClockedStores) -> None:
    """A pause stops every firing from its moment on, as when runs were made at their time; a run whose
    time has come, or is nearer than PAUSE_WITHDRAWS_MS (it may be starting on its worker), is left to run.
    Fired 2 s ahead here (as a burst's runs are): a run of the default fire-ahead is always that near."""
    clock = FakeClock()
    rig = Rig(clock, await clocked_stores.make(clock), MasterConfig(fire_ahead_s=2.0))
    ahead_job, due_job, near_job = "j" + "a" * 21, "j" + "d" * 21, "j" + "e" * 21  # job ids as the API takes them
    due = rig.now_ms() + 5_000
    await rig.submit(ahead_job, due)
    await rig.submit(due_job, due - 2_000)
    await rig.submit(near_job, due - PAUSE_WITHDRAWS_MS + 50)
    async with rig.firing():
        rig.clock.advance(3.2)  # fired 2 s ahead, at 3.0; now 1.8 s from its time: more than PAUSE_WITHDRAWS_MS
        await settle(rig.store)
        assert await rig.runs(ahead_job) == [(due, RunState.SCHEDULED)]
        await rig.master.jobs.pause(ahead_job)
        await rig.master.jobs.pause(due_job)
        await rig.master.jobs.pause(near_job)
        assert await rig.runs(ahead_job) == [(due, RunState.CANCELLED)]
        assert await rig.runs(due_job) == [(due - 2_000, RunState.SCHEDULED)]
        assert await rig.runs(near_job) == [(due - PAUSE_WITHDRAWS_MS + 50, RunState.SCHEDULED)]


@pytest.mark.parametrize("overlap", [pb.OVERLAP_FORBID, pb.OVERLAP_REPLACE])
async def test_a_job_whose_overlap_looks_at_its_active_runs_fires_at_its_time_not_ahead(rig: Rig,
                                                                                         overlap: int) -> None:
    """Whether an earlier run is still active is decided at the firing's time: a run that ends in the
    fire-ahead window before it must not make the firing skip (forbid) or be cancelled (replace)."""
    due = rig.now_ms() + 5_000
    await rig.submit("j1", due, overlap=overlap)
    async with rig.firing():
        rig.clock.advance(5.0 - 0.01)
        await settle(rig.store)
        assert await rig.runs("j1") == []
        rig.clock.advance(0.02)
        await settle(rig.store)
        assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]


async def test_a_fixed_delay_firing_skipped_by_overlap_forbid_does_not_stall_the_job(rig: Rig) -> None:
    """The skipped run has ended at once, so the job waits for the end of the run that blocked it (it used
    to wait in `awaiting` for the end of the skipped run, which never comes), then fires an interval later."""
    first = rig.now_ms()
    every = pb.Trigger(every=pb.Trigger.Every(interval={"seconds": EVERY_MS // 1000}, fixed_delay=True))
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=every, overlap=pb.OVERLAP_FORBID))
    await rig.store.submit_many([NewJob("j1", spec, "abs", first)], 60_000)
    rig.clock.advance(1.0)
    manual, _ = await rig.preloader.trigger_now("j1", spec, 1)  # a manual run is active when the firing comes
    await rig.preloader.fire_batch([("j1", first)])
    assert [state for _, state in await rig.runs("j1")].count(RunState.SKIPPED) == 1
    await settle(rig.store)  # the master's look at the skipped run's end is one store call on this loop
    assert await rig.next_fire("j1") == -1 and await rig.store.awaiting_jobs() == ["j1"]
    rig.clock.advance(3.0)
    (claim,) = await rig.store.claim("default", [(ids.task_id(manual, 0), "w1")], lease_ms=60_000,
                                     timeout_grace_ms=0)
    rig.outcomes.apply_verdicts(await rig.store.report([Report(claim.task_id, claim.token, "SUCCEEDED")]))
    await settle(rig.store)  # the reschedule is one store call on this loop
    assert await rig.next_fire("j1") == rig.now_ms() + EVERY_MS and await rig.store.awaiting_jobs() == []


async def test_a_firing_with_no_tasks_ends_its_run_and_a_fixed_delay_job_moves_on(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run with no tasks is SUCCEEDED as it is fired; the master treats it as ended (a fixed-delay job
    waiting for it gets its next fire time) instead of keeping it active forever."""
    monkeypatch.setattr("sparkyard.master.preloader.split_job", lambda spec: [])  # inputs that yield no task
    first = rig.now_ms()
    every = pb.Trigger(every=pb.Trigger.Every(interval={"seconds": EVERY_MS // 1000}, fixed_delay=True))
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", trigger=every, overlap=pb.OVERLAP_FORBID))
    await rig.store.submit_many([NewJob("j1", spec, "abs", first)], 60_000)
    await rig.preloader.fire_batch([("j1", first)])
    assert await rig.runs("j1") == [(first, RunState.SUCCEEDED)] and await rig.store.active_runs("j1") == []
    await settle(rig.store)  # the reschedule is one store call on this loop
    assert await rig.next_fire("j1") == rig.now_ms() + EVERY_MS and await rig.store.awaiting_jobs() == []



class RedisBlip:
    """Makes one store method fail like an unreachable Redis for its next ``times`` calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, store: object, method: str, times: int = 1) -> None:
        self.left = times
        real = getattr(store, method)

        async def flaky(*args: object, **kwargs: object) -> object:
            if self.left:
                self.left -= 1
                raise redis.exceptions.ConnectionError("Connection refused (redis restarting)")
            return await real(*args, **kwargs)

        monkeypatch.setattr(store, method, flaky)


async def turns(done: Callable[[], bool | Awaitable[bool]], timeout: float = 10.0) -> bool:
    """Let the coroutines on this loop run until ``done`` (False if it is not within ``timeout`` seconds)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        result = done()
        if await result if inspect.isawaitable(result) else result:
            return True
        await asyncio.sleep(0)
    return False


async def test_a_firing_that_failed_for_want_of_redis_is_tried_again_after_a_short_pause(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not at the next top-up, half a horizon later: a Redis blip must not silence the jobs due during it."""
    due = rig.now_ms() + 1_000
    await rig.submit("j1", due)
    blip = RedisBlip(monkeypatch, rig.store, "fire_many")
    async with rig.firing():
        rig.clock.advance(1.0)
        assert await turns(lambda: blip.left == 0) and await rig.runs("j1") == [] and rig.arming.armed == 0
        rig.clock.advance(RETRY_BACKOFF_S + 0.002)  # a top-up re-arms the entry (timers round up to 1 ms)
        assert await turns(lambda: rig.arming.armed == 1)
        rig.clock.advance(0)  # it is due already: it expires at once, and fires
        assert await turns(lambda: rig.has_runs("j1", [(due, RunState.SCHEDULED)]))


async def test_a_top_up_that_failed_for_want_of_redis_is_followed_by_another(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to be the last one: entries beyond the horizon then were never armed."""
    due = rig.now_ms() + 80_000  # beyond the first load's horizon; within the top-ups' after 30 s
    await rig.submit("j1", due)
    async with rig.firing():
        blip = RedisBlip(monkeypatch, rig.store, "due_schedule")
        rig.clock.advance(HORIZON_MS / 2000)  # the first top-up fails
        assert await turns(lambda: blip.left == 0) and rig.arming.armed == 0
        rig.clock.advance(RETRY_BACKOFF_S + 0.002)  # the next one arms the entry
        assert await turns(lambda: rig.arming.armed == 1)
        rig.clock.advance(80 - HORIZON_MS / 2000)
        assert await turns(lambda: rig.has_runs("j1", [(due, RunState.SCHEDULED)]))


async def test_a_load_lets_the_event_loop_run_between_chunks_and_arms_every_entry(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(preloader_module, "ARM_CHUNK", 2)
    order: list[str] = []
    entries = [ScheduleEntry(f"j{i}", rig.now_ms() + 1_000) for i in range(5)]

    async def due_schedule(until_ms: int, limit: int = 0) -> list[ScheduleEntry]:
        return entries

    async def elsewhere() -> None:
        order.append("elsewhere")  # e.g. the lease's renewal while a new leader starts

    monkeypatch.setattr(rig.store, "due_schedule", due_schedule)
    monkeypatch.setattr(rig.arming, "consider", lambda job_id, due_ms: order.append(job_id))
    other = asyncio.ensure_future(elsewhere())
    await rig.preloader.start()
    try:
        await other
        assert order == ["j0", "j1", "elsewhere", "j2", "j3", "j4"]
    finally:
        await rig.preloader.stop()


async def test_an_entry_armed_again_at_its_old_time_after_it_fired_is_armed_where_it_is_now(rig: Rig) -> None:
    """A load that read an entry before it fired arms it at its old time, displacing the next time's timer: the
    stale firing arms the entry where the schedule says it is now."""
    due = rig.now_ms() + 100
    await rig.submit("j1", due)
    await rig.preloader.fire_batch([("j1", due)])  # fired: armed at due + EVERY_MS
    rig.arming.consider("j1", due)  # a load's later chunk, read before the firing
    stale = rig.armed()
    assert stale == [("j1", due)]
    await rig.preloader.fire_batch(stale)
    assert await rig.runs("j1") == [(due, RunState.SCHEDULED)]
    assert ("j1", due + EVERY_MS) in rig.armed()
