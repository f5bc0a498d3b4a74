"""The Store contract, run against RedisStore (the Lua scripts, the only implementation) on a real
redis-server, two ways: measuring time by Redis ``TIME``, as in production, and by a FakeClock (the scripts
as a test store renders them, see master/scripts.py), as the unit tests use it.

Each test gets a fresh store (its own Redis namespace) and ``advance(ms)``, which lets that much of the
store's time pass. With the fake clock the clock moves. ``TIME`` cannot be moved: every deadline the scripts
compare with it (leases, master-side timeouts, retry backoffs) moves that much into the past instead (so
tests compare deadlines with what the store reports, not with ``time_ms()`` readings taken before an
advance), idempotency keys' expiries too; long leases and backoffs keep real time from mattering.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

import pytest

from clocked_store import ClockedStores
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.records import SPEC_MARK, spec_from_text
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store import Store
from sparkyard.master.store_values import Claim, FireRequest, NewJob, Report, ready_score
from sparkyard.master.store_outcomes import (
    CancelStatus,
    Deletion,
    DeleteStatus,
    EndedRun,
    FireStatus,
    JobProgress,
    LeasedTask,
    Rescheduled,
    RescheduleStatus,
    StateChange,
    StateChangeStatus,
    UpdateStatus,
)
from sparkyard.spec import normalize
from sparkyard.states import AttemptState, JobState, RunState, TaskState
from sparkyard.v1 import sparkyard_pb2 as pb

LEASE_MS = 60_000
TTL_MS = 60_000
GROUP = "default"


@dataclass
class Subject:
    store: Store
    advance: Callable[[int], Awaitable[None]]
    set_fence: Callable[[int], Awaitable[None]]  # the last fencing token handed out (the next claim gets more)
    moves_time: bool  # advance() moves the store's clock (a FakeClock), not the deadlines


async def _age_idempotency_keys(store: RedisStore, ms: int) -> None:
    """Each idempotency key's expiry (in its entry, '{expiry ms}:{job id}': submit.lua) ``ms`` sooner."""
    redis: Any = store.redis  # Any: redis-py types replies as bytes | str
    async for bucket in redis.scan_iter(match=store.keys.idempotency("*")):
        for field, entry in (await redis.hgetall(bucket)).items():
            expiry, _, job = entry.partition(":")
            await redis.hset(bucket, field, f"{int(expiry) - ms}:{job}")


async def _shift_deadlines(store: RedisStore, ms: int) -> None:
    redis: Any = store.redis
    for zset in (store.keys.leases, store.keys.timeouts, store.keys.delayed):
        entries = await redis.zrange(zset, 0, -1, withscores=True)
        if entries:
            await redis.zadd(zset, {member: score - ms for member, score in entries})


@pytest.fixture(params=["redis-time", "fake-clock"])
async def subject(request: pytest.FixtureRequest, clocked_stores: ClockedStores) -> AsyncIterator[Subject]:
    clock = FakeClock(start=time.time()) if request.param == "fake-clock" else None
    store = await clocked_stores.make(clock)

    async def advance(ms: int) -> None:
        if clock is None:
            await _shift_deadlines(store, ms)
            await _age_idempotency_keys(store, ms)
        else:
            clock.advance(ms / 1000)  # idempotency keys expire by the store's time too

    async def set_fence(token: int) -> None:
        await store.redis.set(store.keys.fence, token)

    yield Subject(store, advance, set_fence, clock is not None)


@pytest.fixture
def store(subject: Subject) -> Store:
    return subject.store


def job_id(n: int) -> str:
    return f"j{n:021x}"


def spec(**kw: object) -> pb.JobSpec:
    return normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", **kw))


def retry(max_attempts: int, backoff_ms: int, multiplier: float = 2.0, max_backoff_ms: int = 3_600_000) -> pb.RetryPolicy:
    policy = pb.RetryPolicy(max_attempts=max_attempts, multiplier=multiplier)
    policy.initial_backoff.FromMilliseconds(backoff_ms)
    policy.max_backoff.FromMilliseconds(max_backoff_ms)
    return policy


def every(seconds: int, fixed_delay: bool = False) -> pb.Trigger:
    trigger = pb.Trigger(every=pb.Trigger.Every(fixed_delay=fixed_delay))
    trigger.every.interval.FromSeconds(seconds)
    return trigger


def inputs(*values: str) -> list[list[pb.SplitInput]]:
    return [[pb.SplitInput(value=v)] for v in values]


async def fire_now(store: Store, n: int = 1, s: pb.JobSpec | None = None, tasks: int = 1, at: int = 1_000) -> str:
    """Job ``n`` submitted with its run created at once; returns the run id."""
    (res,) = await store.submit_many([NewJob(job_id(n), s or spec(), "abs", at, fire_now=[()] * tasks)], TTL_MS)
    assert res.fired
    return ids.run_id(job_id(n), at)


async def lease(store: Store, task_ids: Sequence[str], worker: str = "w1", lease_ms: int = LEASE_MS,
                grace_ms: int = 0, group: str = GROUP) -> list[Claim]:
    return await store.claim(group, [(t, worker) for t in task_ids], lease_ms=lease_ms, timeout_grace_ms=grace_ms)


async def leased_task(store: Store, n: int = 1, s: pb.JobSpec | None = None, worker: str = "w1") -> Claim:
    run_id = await fire_now(store, n, s)
    (claim,) = await lease(store, [ids.task_id(run_id, 0)], worker)
    return claim


# ---- submit ----------------------------------------------------------------------------------------------


async def test_a_submitted_job_waits_in_the_schedule_at_its_first_fire_time(store: Store) -> None:
    now = await store.time_ms()
    absolute, delayed = await store.submit_many([
        NewJob(job_id(1), spec(), "abs", now + 50_000),
        NewJob(job_id(2), spec(), "delay", 30_000),
    ], TTL_MS)
    assert absolute.next_fire_ms == now + 50_000 and not absolute.fired and not absolute.duplicate
    assert delayed.next_fire_ms == delayed.created_ms + 30_000
    job = await store.get_job(job_id(1))
    assert job is not None and job.state is JobState.ACTIVE and job.next_fire_ms == now + 50_000 and job.runs == 0
    assert await store.due_schedule(now + 40_000) == [(job_id(2), delayed.next_fire_ms)]
    assert await store.due_schedule(now + 60_000, limit=1) == [(job_id(2), delayed.next_fire_ms)]
    assert await store.job_progress([job_id(1), job_id(9)]) == {job_id(1): ("ACTIVE", 0, 1)}
    assert (await store.counts())["scheduled"] == 2


async def test_a_bulk_submit_that_fires_now_queues_every_run_at_once(store: Store) -> None:
    s = spec()
    jobs = [NewJob(job_id(n), s, "abs", 1_000, fire_now=inputs("a", "b", "c")) for n in (1, 2)]
    results = await store.submit_many(jobs, TTL_MS)
    assert [(r.fired, r.next_fire_ms) for r in results] == [(True, 1_000), (True, 1_000)]
    for n in (1, 2):
        run_id = ids.run_id(job_id(n), 1_000)
        job = await store.get_job(job_id(n))
        assert job is not None and job.state is JobState.COMPLETED and job.runs == 1 and job.last_run_id == run_id
        run = await store.get_run(run_id)
        assert run is not None and run.state is RunState.SCHEDULED and run.task_count == 3
        assert [t.id for t in run.tasks] == [ids.task_id(run_id, i) for i in range(3)]
        assert [[i.value for i in t.inputs] for t in run.tasks] == [["a"], ["b"], ["c"]]
        assert all(t.state is TaskState.READY and t.attempts == [] for t in run.tasks)
        assert await store.active_runs(job_id(n)) == [run_id]
    assert await store.ready_counts() == {GROUP: 6}
    assert (await store.counts())["scheduled"] == 0


async def test_an_idempotency_key_names_one_job_until_its_ttl_ends(subject: Subject) -> None:
    store = subject.store
    first, again = await store.submit_many([
        NewJob(job_id(1), spec(), "delay", 5_000, idempotency_key="k"),
        NewJob(job_id(2), spec(), "delay", 5_000, idempotency_key="k"),
    ], TTL_MS)
    assert not first.duplicate and again.duplicate and again.job_id == job_id(1)
    assert (again.created_ms, again.next_fire_ms) == (first.created_ms, first.next_fire_ms)
    (later,) = await store.submit_many([NewJob(job_id(3), spec(), "delay", 5_000, idempotency_key="k")], TTL_MS)
    assert later.duplicate and later.job_id == job_id(1)
    assert await store.get_job(job_id(2)) is None and await store.get_job(job_id(3)) is None
    await subject.advance(TTL_MS + 1)
    (fresh,) = await store.submit_many([NewJob(job_id(4), spec(), "delay", 5_000, idempotency_key="k")], TTL_MS)
    assert not fresh.duplicate and fresh.job_id == job_id(4)


async def test_a_spec_reads_back_byte_for_byte_whatever_bytes_its_encoding_holds(store: RedisStore) -> None:
    """The stored text carries each protobuf byte as one character (master/records.py): NUL and other control
    bytes, bytes above 0x7F (a negative priority, a two-byte field tag, non-ASCII text) survive the submit's JSON,
    ``update.lua``'s argument and the reply; a spec stored as base64 by an earlier version still reads."""
    awkward = spec(args=["a\x00b\x1f\x7f", "é✓€"], priority=-1, retry=retry(3, 200_000), env={"K": "\x00\xff"})
    raw = awkward.SerializeToString()
    assert b"\x00" in raw and max(raw) > 0x7F
    (res,) = await store.submit_many([NewJob(job_id(1), awkward, "delay", 60_000)], TTL_MS)
    text = await store.redis.hget(store.keys.job(job_id(1)), "spec")
    assert text.startswith(SPEC_MARK) and spec_from_text(text) == awkward
    job = await store.get_job(job_id(1))
    assert job is not None and job.spec == awkward
    changed = pb.JobSpec()
    changed.CopyFrom(awkward)
    changed.args.append("\x01\x80")
    assert (await store.update_spec(job_id(1), 1, changed, res.next_fire_ms)).status is UpdateStatus.OK
    assert spec_from_text(await store.redis.hget(store.keys.job(job_id(1)), "spec")) == changed
    assert spec_from_text(base64.b64encode(raw).decode()) == awkward


async def test_an_idempotency_key_used_just_before_its_period_ends_is_found_after_it(subject: Subject) -> None:
    """submit.lua keeps keys in hashes per period of the TTL: a key is looked up in its period and the one
    before, so it names its job for exactly its TTL across the period's end."""
    if not subject.moves_time:
        pytest.skip("the periods follow the store's clock: only a fake clock can be put just before a period's end")
    store = subject.store
    await subject.advance(TTL_MS - await store.time_ms() % TTL_MS - 1)
    (first,) = await store.submit_many([NewJob(job_id(1), spec(), "delay", 5_000, idempotency_key="k")], TTL_MS)
    await subject.advance(2)
    (again,) = await store.submit_many([NewJob(job_id(2), spec(), "delay", 5_000, idempotency_key="k")], TTL_MS)
    assert not first.duplicate and again.duplicate and again.job_id == job_id(1)
    await subject.advance(TTL_MS - 3)
    (last,) = await store.submit_many([NewJob(job_id(3), spec(), "delay", 5_000, idempotency_key="k")], TTL_MS)
    assert last.duplicate and last.job_id == job_id(1)
    await subject.advance(1)
    (fresh,) = await store.submit_many([NewJob(job_id(4), spec(), "delay", 5_000, idempotency_key="k")], TTL_MS)
    assert not fresh.duplicate and fresh.job_id == job_id(4)


async def test_a_new_job_never_overwrites_one_with_the_same_id(store: Store) -> None:
    (a,) = await store.submit_many([NewJob(job_id(1), spec(name="first"), "delay", 0)], TTL_MS)
    (b,) = await store.submit_many([NewJob(job_id(1), spec(name="second"), "delay", 0)], TTL_MS)
    assert not a.id_taken and b.id_taken and not b.duplicate
    job = await store.get_job(job_id(1))
    assert job is not None and job.spec.name == "first"


# ---- fire --------------------------------------------------------------------------------------------------


async def test_a_schedule_entry_fires_once_and_moves_on(store: Store) -> None:
    s = spec(trigger=every(60))
    (res,) = await store.submit_many([NewJob(job_id(1), s, "abs", 10_000)], TTL_MS)
    run_id, fired = await store.fire(job_id(1), s, 10_000, expected_ms=10_000, next_fire_ms=70_000,
                                     overlap="allow", inputs=[()])
    assert run_id == ids.run_id(job_id(1), 10_000) and (fired.status, fired.run_state) == ("created", "SCHEDULED")
    job = await store.get_job(job_id(1))
    assert job is not None and job.next_fire_ms == 70_000 and job.runs == 1 and job.last_run_id == run_id
    assert await store.due_schedule(100_000) == [(job_id(1), 70_000)]
    _, stale = await store.fire(job_id(1), s, 10_000, expected_ms=10_000, next_fire_ms=70_000, overlap="allow",
                                inputs=[()])
    assert stale.status == "stale"
    _, exists = await store.fire(job_id(1), s, 10_000, expected_ms=None, next_fire_ms=-1, overlap="allow",
                                 inputs=[()])
    assert (exists.status, exists.run_state) == ("exists", "SCHEDULED")
    run = await store.get_run(run_id, with_tasks=False)
    assert run is not None and run.scheduled_ms == 10_000 and run.tasks == [] and run.fired_ms == fired.fired_ms


async def test_fire_many_fires_each_request_on_its_own(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(n), s, "abs", 5_000) for n in (1, 2)], TTL_MS)
    results = await store.fire_many([
        FireRequest(job_id(1), s, 5_000, 5_000, 65_000, "allow", [(), ()]),
        FireRequest(job_id(2), s, 5_000, 4_000, 65_000, "allow", [()]),
        FireRequest(job_id(3), s, 5_000, 5_000, 65_000, "allow", [()]),
    ])
    assert [r.status for _, r in results] == ["created", "stale", "inactive"]
    assert await store.run_task_counts([results[0][0], results[1][0]]) == {results[0][0]: 2, results[1][0]: 0}


async def test_a_firing_that_raises_fails_alone_and_names_why(store: Store) -> None:
    """The firings of a batch are one script call: a job whose data the script cannot read (a run count that
    is no number) fails its own firing, with Redis's error, and the others of the call are fired."""
    trigger = every(60)
    trigger.max_runs = 5
    s = spec(trigger=trigger)
    await store.submit_many([NewJob(job_id(n), s, "abs", 5_000) for n in (1, 2)], TTL_MS)
    redis: Any = store.redis  # type: ignore[attr-defined]
    await redis.hset(store.keys.job(job_id(1)), "runs", "many")  # type: ignore[attr-defined]
    results = await store.fire_many([FireRequest(job_id(n), s, 5_000, 5_000, 65_000, "allow", [()]) for n in (1, 2)])
    assert [r.status for _, r in results] == ["failed", "created"]
    assert "compare" in results[0][1].error and results[1][1].error == ""
    assert await store.due_schedule(10**13) == [(job_id(1), 5_000), (job_id(2), 65_000)]


async def test_the_last_firing_completes_the_job(store: Store) -> None:
    s = spec()
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    _, fired = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=-1, overlap="allow", inputs=[()])
    job = await store.get_job(job_id(1))
    assert fired.status == "created" and job is not None and job.state is JobState.COMPLETED and job.next_fire_ms == -1
    assert await store.due_schedule(10**13) == []


async def test_a_fixed_delay_job_waits_for_its_run_then_is_rescheduled_once(store: Store) -> None:
    s = spec(trigger=every(60, fixed_delay=True))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    run_id, _ = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=-2, overlap="allow", inputs=[()])
    assert await store.awaiting_jobs() == [job_id(1)]
    assert await store.awaiting_among([job_id(2), job_id(1)]) == [job_id(1)] and await store.awaiting_among([]) == []
    assert await store.due_schedule(10**13) == []
    assert await store.reschedule_after_run(job_id(1), "other-run", 90_000) == ("not_awaiting", -1)
    assert await store.reschedule_after_run(job_id(1), run_id, 90_000) == ("ok", 90_000)
    assert await store.reschedule_after_run(job_id(1), run_id, 95_000) == ("not_awaiting", -1)
    assert await store.due_schedule(10**13) == [(job_id(1), 90_000)] and await store.awaiting_jobs() == []
    run2, _ = await store.fire(job_id(1), s, 90_000, expected_ms=90_000, next_fire_ms=-2, overlap="allow", inputs=[()])
    assert await store.reschedule_after_run(job_id(1), run2, -1) == ("ok", -1)
    job = await store.get_job(job_id(1))
    assert job is not None and job.state is JobState.COMPLETED and job.next_fire_ms == -1


async def test_a_fixed_delay_firing_skipped_by_overlap_forbid_waits_for_the_run_that_blocked_it(store: Store) -> None:
    s = spec(trigger=every(60, fixed_delay=True), overlap=pb.OVERLAP_FORBID)
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    manual, _ = await store.fire(job_id(1), s, 4_000, expected_ms=None, next_fire_ms=-1, overlap="forbid",
                                 inputs=[()])
    skipped, res = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=-2, overlap="forbid",
                                    inputs=[()])
    assert res.status == "skipped" and await store.awaiting_jobs() == [job_id(1)]
    job = await store.get_job(job_id(1))
    # The skipped run has ended already: no end of it is coming. The job waits for the run that is active.
    assert job is not None and job.last_run_id == skipped and job.awaited_run_id == manual
    assert await store.reschedule_after_run(job_id(1), skipped, 80_000) == ("not_awaiting", -1)
    assert await store.reschedule_after_run(job_id(1), manual, 90_000) == ("ok", 90_000)
    assert await store.due_schedule(10**13) == [(job_id(1), 90_000)] and await store.awaiting_jobs() == []
    job = await store.get_job(job_id(1))
    assert job is not None and job.awaited_run_id == ""


async def test_a_manual_firing_does_not_change_the_run_a_fixed_delay_job_waits_for(store: Store) -> None:
    s = spec(trigger=every(60, fixed_delay=True), overlap=pb.OVERLAP_FORBID)
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    run_id, _ = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=-2, overlap="forbid",
                                 inputs=[()])
    manual, res = await store.fire(job_id(1), s, 6_000, expected_ms=None, next_fire_ms=-1, overlap="forbid",
                                   inputs=[()])
    assert res.status == "skipped"  # a user's trigger while the scheduled run is active
    job = await store.get_job(job_id(1))
    assert job is not None and job.last_run_id == manual and job.awaited_run_id == run_id
    assert await store.reschedule_after_run(job_id(1), manual, 80_000) == ("not_awaiting", -1)
    assert await store.reschedule_after_run(job_id(1), run_id, 90_000) == ("ok", 90_000)
    assert await store.due_schedule(10**13) == [(job_id(1), 90_000)] and await store.awaiting_jobs() == []


async def test_a_scheduled_firing_never_makes_more_runs_than_max_runs(store: Store) -> None:
    # The firing at 65 s was planned while the job had 1 run of 2 (so it is its last); a manual trigger
    # made the second run before it reached the store. It must not create a third.
    s = spec(trigger=pb.Trigger(every=every(60).every, max_runs=2))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="allow", inputs=[()])
    _, manual = await store.fire(job_id(1), s, 6_000, expected_ms=None, next_fire_ms=-1, overlap="allow",
                                 inputs=[()])
    assert manual.status == "created"
    late, res = await store.fire(job_id(1), s, 65_000, expected_ms=65_000, next_fire_ms=-1, overlap="allow",
                                 inputs=[()])
    job = await store.get_job(job_id(1))
    assert res.status == "exhausted" and await store.get_run(late) is None
    assert job is not None and job.runs == 2 and job.state is JobState.COMPLETED and job.next_fire_ms == -1
    assert await store.due_schedule(10**13) == []


async def test_a_scheduled_firing_whose_run_exists_still_moves_the_schedule_on(store: Store) -> None:
    # A manual trigger that landed on the very millisecond of the schedule entry made its run already.
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    manual, _ = await store.fire(job_id(1), s, 5_000, expected_ms=None, next_fire_ms=-1, overlap="allow",
                                 inputs=[()])
    run_id, res = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="allow",
                                   inputs=[()])
    assert run_id == manual and (res.status, res.run_state) == ("exists", "SCHEDULED")
    job = await store.get_job(job_id(1))
    assert job is not None and job.runs == 1 and job.next_fire_ms == 65_000
    assert await store.due_schedule(10**13) == [(job_id(1), 65_000)]


async def test_only_a_manual_trigger_fires_a_paused_job_and_nothing_fires_a_cancelled_one(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    assert (await store.set_job_state(job_id(1), JobState.PAUSED))[0] == "ok"
    _, scheduled = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="allow",
                                    inputs=[()])
    _, manual = await store.fire(job_id(1), s, 7_000, expected_ms=None, next_fire_ms=-1, overlap="allow", inputs=[()])
    assert (scheduled.status, manual.status) == ("inactive", "created")
    assert (await store.cancel("stop", job_id=job_id(1))).status == "retry"  # the manual run is active
    result = await store.cancel("stop", job_id=job_id(1), run_ids=await store.active_runs(job_id(1)),
                                task_ids=[ids.task_id(ids.run_id(job_id(1), 7_000), 0)])
    assert result.status == "ok"
    _, after = await store.fire(job_id(1), s, 8_000, expected_ms=None, next_fire_ms=-1, overlap="allow", inputs=[()])
    assert after.status == "inactive"


async def test_overlap_forbid_and_a_misfire_skip_record_skipped_runs(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    first, _ = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=6_000, overlap="forbid",
                                inputs=[()])
    second, overlap = await store.fire(job_id(1), s, 6_000, expected_ms=6_000, next_fire_ms=7_000, overlap="forbid",
                                       inputs=[()])
    third, misfire = await store.fire(job_id(1), s, 7_000, expected_ms=7_000, next_fire_ms=8_000, overlap="allow",
                                      inputs=[()], skip_reason="misfire: skipped")
    assert (overlap.status, overlap.run_state, misfire.status) == ("skipped", "SKIPPED", "skipped")
    skipped = await store.get_run(second)
    assert skipped is not None and skipped.state is RunState.SKIPPED and skipped.task_count == 0
    assert skipped.reason == f"overlap forbidden: run {first} is still active"
    assert skipped.finished_ms == skipped.fired_ms
    job = await store.get_job(job_id(1))
    assert job is not None and job.runs == 1 and job.last_run_id == third and job.next_fire_ms == 8_000
    assert [r.id for r in await store.list_runs(job_id(1), 10)] == [third, second, first]
    assert [r.id for r in await store.list_runs(job_id(1), 2)] == [third, second]
    assert await store.active_runs(job_id(1)) == [first]


async def test_overlap_forbid_with_max_active_runs_skips_only_once_that_many_are_active(store: Store) -> None:
    s = spec(trigger=every(60), overlap=pb.OVERLAP_FORBID, max_active_runs=2)
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    fired = [await store.fire(job_id(1), s, t, expected_ms=t, next_fire_ms=t + 1_000, overlap="forbid", inputs=[()])
             for t in (5_000, 6_000, 7_000)]
    assert [f[1].status for f in fired] == ["created", "created", "skipped"]
    assert await store.active_runs(job_id(1)) == sorted([fired[0][0], fired[1][0]])


async def test_a_firing_with_no_tasks_ends_its_run_at_once(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    run_id, res = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="forbid",
                                   inputs=[])
    assert (res.status, res.run_state) == ("created", "SUCCEEDED")
    run = await store.get_run(run_id)
    assert run is not None and (run.state, run.task_count, run.tasks) == (RunState.SUCCEEDED, 0, [])
    assert run.finished_ms == run.fired_ms == res.fired_ms
    assert await store.active_runs(job_id(1)) == []
    job = await store.get_job(job_id(1))
    assert job is not None and job.runs == 1 and job.last_run_id == run_id
    _, nxt = await store.fire(job_id(1), s, 65_000, expected_ms=65_000, next_fire_ms=125_000, overlap="forbid",
                              inputs=[()])
    assert nxt.status == "created"  # nothing is still active to forbid it
    await store.submit_many([NewJob(job_id(2), spec(), "abs", 1_000, fire_now=[])], TTL_MS)
    at_submit = await store.get_run(ids.run_id(job_id(2), 1_000))
    assert at_submit is not None and (at_submit.state, at_submit.task_count) == (RunState.SUCCEEDED, 0)
    assert await store.active_runs(job_id(2)) == [] and await store.ready_counts() == {GROUP: 1}


# ---- peek and claim ----------------------------------------------------------------------------------------


async def test_the_ready_queue_goes_by_priority_and_age_then_task_id(store: Store) -> None:
    low_old = await fire_now(store, 1, spec(priority=0), tasks=2, at=1_000)
    high_new = await fire_now(store, 2, spec(priority=5), at=3_000)
    low_new = await fire_now(store, 3, spec(priority=0), at=2_000)
    assert ready_score(5, 3_000) < ready_score(0, 1_000) < ready_score(0, 2_000)
    expected = [ids.task_id(high_new, 0), ids.task_id(low_old, 0), ids.task_id(low_old, 1), ids.task_id(low_new, 0)]
    assert [r.task_id for r in await store.peek_ready(GROUP, 10)] == expected
    assert [r.task_id for r in await store.peek_ready(GROUP, 2)] == expected[:2]  # peeking changes nothing
    assert await store.peek_ready("other", 10) == []


async def test_peek_shows_what_routing_needs(store: Store) -> None:
    s = spec(trigger=every(60), routing=pb.ROUTING_CONSISTENT_HASH, routing_key="tenant-7")
    await store.submit_many([NewJob(job_id(1), s, "abs", 1_000)], TTL_MS)
    first, _ = await store.fire(job_id(1), s, 1_000, expected_ms=1_000, next_fire_ms=2_000, overlap="allow",
                                inputs=[()])
    (claim,) = await lease(store, [ids.task_id(first, 0)], "w7")
    await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    second, _ = await store.fire(job_id(1), s, 2_000, expected_ms=2_000, next_fire_ms=3_000, overlap="allow",
                                 inputs=[()])
    (ready,) = await store.peek_ready(GROUP, 10)
    assert (ready.task_id, ready.prev_worker) == (ids.task_id(second, 0), "w7")  # a recurring job's warm worker
    assert (ready.routing, ready.route_key) == ("ROUTING_CONSISTENT_HASH", "tenant-7")


async def test_a_claim_leases_ready_tasks_under_strictly_increasing_tokens(store: Store) -> None:
    run_id = await fire_now(store, 1, tasks=3, at=4_000)
    t0, t1, t2 = (ids.task_id(run_id, i) for i in range(3))
    before = await store.time_ms()
    claims = await store.claim(GROUP, [(t0, "w1"), ("no-such-task", "w1"), (t1, "w2")], lease_ms=LEASE_MS,
                               timeout_grace_ms=0)
    assert [(c.task_id, c.worker, c.attempt, c.index) for c in claims] == [(t0, "w1", 1, 0), (t1, "w2", 1, 1)]
    assert claims[0].token < claims[1].token
    assert all((c.run_id, c.job_id, c.scheduled_ms, c.task_count, c.inputs_json) == (run_id, job_id(1), 4_000, 3, "")
               for c in claims)
    (later,) = await lease(store, [t2])
    assert later.token > claims[1].token
    assert await lease(store, [t0]) == [] and await lease(store, [t2], group="other") == []
    leased = await store.get_task(t0)
    assert leased is not None and leased.state is TaskState.LEASED and leased.worker == "w1"
    assert leased.token == claims[0].token and leased.lease_deadline_ms >= before + LEASE_MS
    assert [(a.number, a.state, a.worker, a.token) for a in leased.attempts] == [
        (1, AttemptState.RUNNING, "w1", claims[0].token)]
    run = await store.get_run(run_id, with_tasks=False)
    assert run is not None and run.state is RunState.RUNNING and run.started_ms >= before
    assert await store.worker_leases("w1") == {t0, t2} and await store.worker_leases("w2") == {t1}
    assert (await store.counts())["leased"] == 3 and await store.ready_counts() == {GROUP: 0}
    assert await store.claim(GROUP, [], lease_ms=LEASE_MS, timeout_grace_ms=0) == []


async def test_a_claim_hands_out_the_task_inputs(store: Store) -> None:
    (res,) = await store.submit_many([NewJob(job_id(1), spec(), "abs", 1_000, fire_now=inputs("part-0"))], TTL_MS)
    (claim,) = await lease(store, [ids.task_id(ids.run_id(job_id(1), 1_000), 0)])
    assert claim.inputs_json == '[["part-0",""]]'


async def test_renewal_needs_the_current_token_and_worker(subject: Subject) -> None:
    store = subject.store
    claim = await leased_task(store)
    wrong_worker = await store.renew("w2", [(claim.task_id, claim.token)], LEASE_MS)
    assert wrong_worker.lost == [(claim.task_id, claim.token)] and not wrong_worker.renewed
    await subject.advance(LEASE_MS - 1_000)
    right = await store.renew("w1", [(claim.task_id, claim.token), (claim.task_id, claim.token + 1),
                                     ("no-such-task", 1)], LEASE_MS)
    assert right.renewed == [(claim.task_id, claim.token)]
    assert right.lost == [(claim.task_id, claim.token + 1), ("no-such-task", 1)]
    assert right.deadline_ms >= await store.time_ms() + LEASE_MS - 1_000
    task = await store.get_task(claim.task_id)
    assert task is not None and task.lease_deadline_ms == right.deadline_ms
    await subject.advance(2_000)
    assert await store.reap_expired(max_lost=3) == []  # renewed: the first deadline has passed, the new one not


# ---- report ------------------------------------------------------------------------------------------------


async def test_only_the_current_token_completes_a_task_and_a_terminal_task_never_changes(store: Store) -> None:
    claim = await leased_task(store)
    (stale,) = await store.report([Report(claim.task_id, claim.token - 1, "SUCCEEDED", result_json='"old"')])
    assert (stale.verdict, stale.task_state, stale.run_id) == ("stale", "LEASED", claim.run_id)
    (ok,) = await store.report([Report(claim.task_id, claim.token, "SUCCEEDED", result_json='"new"')])
    assert (ok.verdict, ok.task_state, ok.run_state, ok.not_before_ms) == ("accepted", "SUCCEEDED", "SUCCEEDED", 0)
    late, unknown = await store.report([Report(claim.task_id, claim.token, "FAILED", error="late"),
                                        Report("no-such-task", 1, "SUCCEEDED")])
    assert (late.verdict, late.task_state) == ("terminal", "SUCCEEDED")
    assert (unknown.verdict, unknown.task_state, unknown.run_id) == ("unknown", None, "")
    task = await store.get_task(claim.task_id)
    assert task is not None and task.state is TaskState.SUCCEEDED and task.result == '"new"' and task.error == ""
    assert [(a.state, a.result, a.worker) for a in task.attempts] == [(AttemptState.SUCCEEDED, '"new"', "w1")]
    run = await store.get_run(claim.run_id, with_tasks=False)
    assert run is not None and run.state is RunState.SUCCEEDED and run.succeeded == 1 and run.finished_ms > 0
    assert await store.active_runs(job_id(1)) == [] and await store.worker_leases("w1") == set()
    assert (await store.counts())["leased"] == 0


async def test_a_started_report_records_the_start_and_log_and_keeps_the_lease(store: Store) -> None:
    claim = await leased_task(store)
    (started,) = await store.report([Report(claim.task_id, claim.token, "STARTED", started_ms=1_234,
                                            log_path="/logs/a.log")])
    assert (started.verdict, started.task_state) == ("accepted", "LEASED")
    task = await store.get_task(claim.task_id)
    assert task is not None and task.state is TaskState.LEASED
    assert (task.attempts[0].started_ms, task.attempts[0].log_path) == (1_234, "/logs/a.log")
    await store.report([Report(claim.task_id, claim.token, "SUCCEEDED", started_ms=1_234)])
    done = await store.get_task(claim.task_id)
    assert done is not None and done.attempts[0].log_path == "/logs/a.log"  # an empty log path keeps the known one


@pytest.mark.parametrize("offset_ms, expect", [(-500, "worker"), (0, "store"), (60_000, "store")])
async def test_an_attempt_ends_at_the_workers_finish_time_within_its_start_and_now(
        store: Store, offset_ms: int, expect: str) -> None:
    """The worker's finish time is recorded, but never later than the store's now or earlier than the
    attempt's start; offset 0 = the worker sent none."""
    claim = await leased_task(store)
    before = await store.time_ms()
    finished = before + offset_ms if offset_ms else 0
    await store.report([Report(claim.task_id, claim.token, "SUCCEEDED", started_ms=before - 1_000,
                               finished_ms=finished)])
    after = await store.time_ms()
    task = await store.get_task(claim.task_id)
    assert task is not None
    recorded = task.attempts[-1].finished_ms
    assert recorded == finished if expect == "worker" else before <= recorded <= after
    start_clamped = await leased_task(store, 2)
    now = await store.time_ms()
    await store.report([Report(start_clamped.task_id, start_clamped.token, "FAILED", error="x", started_ms=now - 100,
                               finished_ms=now - 5_000)])
    failed = await store.get_task(start_clamped.task_id)
    assert failed is not None and failed.attempts[-1].finished_ms == now - 100


async def test_a_failure_with_attempts_left_retries_after_its_backoff_under_a_new_token(subject: Subject) -> None:
    store = subject.store
    claim = await leased_task(store, s=spec(retry=retry(3, 10_000)))
    before = await store.time_ms()
    (failed,) = await store.report([Report(claim.task_id, claim.token, "FAILED", error="boom", traceback="Traceback",
                                           started_ms=5, log_path="/logs/a1.log")])
    assert (failed.verdict, failed.task_state, failed.run_state) == ("accepted", "FAILED", None)
    assert failed.not_before_ms >= before + 10_000
    assert await store.delayed_entries() == [(claim.task_id, failed.not_before_ms)]
    task = await store.get_task(claim.task_id)
    assert task is not None and (task.state, task.failures, task.error, task.worker, task.prev_worker) == (
        TaskState.FAILED, 1, "boom", "", "w1")
    assert task.not_before_ms == failed.not_before_ms and (await store.counts())["delayed"] == 1
    assert await store.release_due(10, [claim.task_id]) == [] and await store.release_due(10) == []
    await subject.advance(10_001)
    assert await store.release_due(10) == [(claim.task_id, GROUP)]
    assert await store.release_due(10) == [] and await store.delayed_entries() == []
    (second,) = await lease(store, [claim.task_id], "w2")
    assert second.token > claim.token and second.attempt == 2
    running = await store.get_task(claim.task_id)
    assert running is not None and running.not_before_ms == 0 and running.attempts_started == 2
    assert [(a.number, a.state, a.worker, a.token) for a in running.attempts] == [
        (1, AttemptState.FAILED, "w1", claim.token), (2, AttemptState.RUNNING, "w2", second.token)]
    first = running.attempts[0]
    assert (first.error, first.traceback, first.log_path, first.started_ms) == ("boom", "Traceback", "/logs/a1.log", 5)
    assert (running.attempts[1].error, running.attempts[1].log_path) == ("", "")  # nothing carried over
    (late,) = await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    assert late.verdict == "stale"
    (ok,) = await store.report([Report(claim.task_id, second.token, "SUCCEEDED", result_json='{"rows": 3}')])
    assert ok.run_state == "SUCCEEDED"
    done = await store.get_task(claim.task_id)
    assert done is not None and [(a.number, a.state, a.result) for a in done.attempts] == [
        (1, AttemptState.FAILED, ""), (2, AttemptState.SUCCEEDED, '{"rows": 3}')]
    assert done.attempts[1].finished_ms >= done.attempts[1].leased_ms > 0


async def test_backoffs_grow_by_the_multiplier_up_to_the_maximum(subject: Subject) -> None:
    store = subject.store
    claim = await leased_task(store, s=spec(retry=retry(4, 10_000, multiplier=3.0, max_backoff_ms=50_000)))
    waits = []
    for _ in range(3):
        now = await store.time_ms()
        (failed,) = await store.report([Report(claim.task_id, claim.token, "FAILED", error="boom")])
        waits.append(failed.not_before_ms - now)
        await subject.advance(60_000)
        await store.release_due(10)
        (claim,) = await lease(store, [claim.task_id])
    assert [round(w, -3) for w in waits] == [10_000, 30_000, 50_000]


async def test_the_last_failure_is_dead_and_fails_the_run(store: Store) -> None:
    claim = await leased_task(store)  # no retries: one attempt
    (dead,) = await store.report([Report(claim.task_id, claim.token, "TIMED_OUT", error="too slow")])
    assert (dead.task_state, dead.run_state, dead.not_before_ms) == ("DEAD", "FAILED", 0)
    task = await store.get_task(claim.task_id)
    assert task is not None and (task.state, task.error, task.worker, task.failures) == (TaskState.DEAD, "too slow", "", 1)
    assert task.attempts[0].state is AttemptState.TIMED_OUT and await store.delayed_entries() == []
    run = await store.get_run(claim.run_id, with_tasks=False)
    assert run is not None and (run.state, run.dead) == (RunState.FAILED, 1)


@pytest.mark.parametrize("outcome", ["RELEASED", "CANCELLED"])
async def test_a_task_the_worker_hands_back_is_ready_again_without_using_an_attempt(store: Store, outcome: str) -> None:
    claim = await leased_task(store)
    (back,) = await store.report([Report(claim.task_id, claim.token, outcome, error="undeliverable")])
    assert (back.verdict, back.task_state, back.run_state) == ("accepted", "READY", None)
    task = await store.get_task(claim.task_id)
    assert task is not None and (task.state, task.failures, task.worker, task.prev_worker) == (TaskState.READY, 0, "", "w1")
    assert task.attempts[0].state is AttemptState(outcome)
    assert [r.task_id for r in await store.peek_ready(GROUP, 10)] == [claim.task_id]
    (again,) = await lease(store, [claim.task_id], "w2")
    assert again.attempt == 2 and again.token > claim.token


async def test_a_run_ends_with_its_last_task_failed_if_any_task_is_dead(store: Store) -> None:
    run_id = await fire_now(store, tasks=3)
    claims = await lease(store, [ids.task_id(run_id, i) for i in range(3)])
    verdicts = await store.report([Report(claims[0].task_id, claims[0].token, "SUCCEEDED"),
                                   Report(claims[1].task_id, claims[1].token, "FAILED", error="x")])
    assert [v.run_state for v in verdicts] == [None, None]
    running = await store.get_run(run_id)
    assert running is not None and running.state is RunState.RUNNING and (running.succeeded, running.dead) == (1, 1)
    (last,) = await store.report([Report(claims[2].task_id, claims[2].token, "SUCCEEDED")])
    assert last.run_state == "FAILED"
    assert await store.active_runs(job_id(1)) == []


async def test_a_capped_run_lets_its_next_task_in_as_each_one_ends(store: Store) -> None:
    run_id = await fire_now(store, s=spec(split=pb.SplitSpec(max_concurrent=1)), tasks=3)
    t0, t1, t2 = (ids.task_id(run_id, i) for i in range(3))
    assert [r.task_id for r in await store.peek_ready(GROUP, 10)] == [t0]
    (c0,) = await lease(store, [t0])
    assert await store.peek_ready(GROUP, 10) == []
    await store.report([Report(t0, c0.token, "SUCCEEDED")])
    assert [r.task_id for r in await store.peek_ready(GROUP, 10)] == [t1]
    result = await store.cancel("enough", task_ids=[t1])
    assert result.cancelled == [t1]
    assert [r.task_id for r in await store.peek_ready(GROUP, 10)] == [t2]


@pytest.mark.parametrize("fence", [10**14 - 1, 123_456_789_012_344, 2**53 - 10])
async def test_fencing_tokens_are_compared_exactly_however_large(subject: Subject, fence: int) -> None:
    """Tokens only grow: past 1e14 a token must not be compared or stored as a 14-digit float."""
    store = subject.store
    await subject.set_fence(fence)
    run_id = await fire_now(store, s=spec(retry=retry(2, 1_000)))
    (first,) = await lease(store, [ids.task_id(run_id, 0)])
    assert first.token == fence + 1
    renewed = await store.renew("w1", [(first.task_id, first.token)], LEASE_MS)
    assert renewed.renewed == [(first.task_id, first.token)]
    (failed,) = await store.report([Report(first.task_id, first.token, "FAILED", error="boom")])
    assert (failed.verdict, failed.task_state) == ("accepted", "FAILED")
    await subject.advance(2_000)
    await store.release_due(10)
    (second,) = await lease(store, [first.task_id])
    assert second.token == fence + 2
    (stale,) = await store.report([Report(first.task_id, first.token, "SUCCEEDED")])
    (ok,) = await store.report([Report(second.task_id, second.token, "SUCCEEDED")])
    assert (stale.verdict, ok.verdict, ok.run_state) == ("stale", "accepted", "SUCCEEDED")
    task = await store.get_task(first.task_id)
    assert task is not None and task.token == second.token
    assert [(a.number, a.token) for a in task.attempts] == [(1, first.token), (2, second.token)]


async def test_a_requeued_task_shows_no_error_of_an_earlier_attempt(subject: Subject) -> None:
    """The task's error is that of its ended state (FAILED, DEAD, CANCELLED); each attempt keeps its own."""
    store = subject.store
    claim = await leased_task(store, s=spec(retry=retry(3, 1_000)))
    await store.report([Report(claim.task_id, claim.token, "FAILED", error="boom")])
    failed = await store.get_task(claim.task_id)
    assert failed is not None and (failed.state, failed.error) == (TaskState.FAILED, "boom")
    await subject.advance(2_000)
    assert await store.release_due(10) == [(claim.task_id, GROUP)]
    ready = await store.get_task(claim.task_id)
    assert ready is not None and (ready.state, ready.error) == (TaskState.READY, "")
    await lease(store, [claim.task_id])
    running = await store.get_task(claim.task_id)
    assert running is not None and (running.state, running.error) == (TaskState.LEASED, "")
    await subject.advance(LEASE_MS + 1)
    (reaped,) = await store.reap_expired(max_lost=3)
    assert reaped.task_state == "READY"
    lost = await store.get_task(claim.task_id)
    assert lost is not None and (lost.state, lost.error) == (TaskState.READY, "")
    assert [(a.state, a.error) for a in lost.attempts] == [(AttemptState.FAILED, "boom"),
                                                          (AttemptState.LOST, "lease expired on worker w1")]


# ---- reap --------------------------------------------------------------------------------------------------


async def test_an_expired_lease_is_requeued_once_with_its_worker_remembered(subject: Subject) -> None:
    store = subject.store
    claim = await leased_task(store)
    await subject.advance(LEASE_MS - 1_000)
    assert await store.reap_expired(max_lost=3) == []
    await subject.advance(2_000)
    (reaped,) = await store.reap_expired(max_lost=3)
    assert (reaped.task_id, reaped.what, reaped.task_state, reaped.run_state, reaped.worker, reaped.token) == (
        claim.task_id, "lost", "READY", None, "w1", claim.token)
    assert await store.reap_expired(max_lost=3) == []
    task = await store.get_task(claim.task_id)
    assert task is not None and (task.state, task.lost, task.prev_worker, task.worker) == (TaskState.READY, 1, "w1", "")
    assert [(a.state, a.error) for a in task.attempts] == [(AttemptState.LOST, "lease expired on worker w1")]
    assert await store.worker_leases("w1") == set() and (await store.counts())["leased"] == 0
    (late,) = await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    assert late.verdict != "accepted"
    (again,) = await lease(store, [claim.task_id], "w2")
    (stale,) = await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
    assert again.token > claim.token and stale.verdict == "stale"


async def test_a_task_lost_more_than_max_lost_times_is_dead(subject: Subject) -> None:
    store = subject.store
    claim = await leased_task(store)
    states = []
    for _ in range(3):
        await subject.advance(LEASE_MS + 1)
        (reaped,) = await store.reap_expired(max_lost=2)
        states.append((reaped.task_state, reaped.run_state))
        if reaped.task_state == "READY":
            await lease(store, [claim.task_id])
    assert states == [("READY", None), ("READY", None), ("DEAD", "FAILED")]
    task = await store.get_task(claim.task_id)
    assert task is not None and task.lost == 3 and task.error == "lost 3 times (last: lease expired on worker w1)"
    assert [a.state for a in task.attempts] == [AttemptState.LOST] * 3


async def test_an_attempt_past_its_timeout_and_grace_fails_while_its_lease_is_renewed(subject: Subject) -> None:
    store = subject.store
    timeout = pb.JobSpec().timeout
    timeout.FromSeconds(30)
    run_id = await fire_now(store, s=spec(timeout=timeout, retry=retry(2, 10_000)))
    (claim,) = await lease(store, [ids.task_id(run_id, 0)], grace_ms=5_000)
    await subject.advance(34_000)
    assert await store.reap_expired(max_lost=3) == []
    await subject.advance(2_000)
    (reaped,) = await store.reap_expired(max_lost=3)
    assert (reaped.what, reaped.task_state, reaped.worker, reaped.token) == ("timeout", "FAILED", "w1", claim.token)
    assert reaped.not_before_ms > 0 and await store.delayed_entries() == [(claim.task_id, reaped.not_before_ms)]
    task = await store.get_task(claim.task_id)
    assert task is not None and task.attempts[0].state is AttemptState.TIMED_OUT
    assert task.error == "timed out: no result from worker w1 within the task timeout"
    assert (await store.counts())["leased"] == 0


async def test_one_reap_call_handles_at_most_its_limit_of_expired_leases_and_timeouts_together(
        subject: Subject) -> None:
    store = subject.store
    timeout = pb.JobSpec().timeout
    timeout.FromSeconds(30)
    short = await fire_now(store, 1, tasks=3)
    timed = await fire_now(store, 2, s=spec(timeout=timeout), tasks=3)
    await lease(store, [ids.task_id(short, i) for i in range(3)], lease_ms=10_000)
    await lease(store, [ids.task_id(timed, i) for i in range(3)], lease_ms=LEASE_MS)
    await subject.advance(40_000)  # three leases expired, three attempts past their timeout (leases still on)
    first = await store.reap_expired(max_lost=3, limit=4)
    assert [r.what for r in first] == ["lost"] * 3 + ["timeout"]
    second = await store.reap_expired(max_lost=3, limit=4)
    assert [r.what for r in second] == ["timeout"] * 2
    assert await store.reap_expired(max_lost=3, limit=4) == []


async def test_a_reconnecting_worker_loses_only_the_leases_it_no_longer_has(store: Store) -> None:
    run_id = await fire_now(store, tasks=3)
    t0, t1, t2 = (ids.task_id(run_id, i) for i in range(3))
    c0, c1 = await lease(store, [t0, t1], "w1")
    await lease(store, [t2], "w2")
    assert await store.reap_worker("w1", [], max_lost=3) == []
    reaped = await store.reap_worker("w1", [t1, t2], max_lost=3)
    assert [(r.task_id, r.what, r.task_state, r.worker, r.token) for r in reaped] == [(t1, "lost", "READY", "w1", c1.token)]
    assert await store.worker_leases("w1") == {t0} and await store.worker_leases("w2") == {t2}
    task = await store.get_task(t1)
    assert task is not None and task.attempts[0].error == "worker w1 restarted"


# ---- cancel, pause, resume -----------------------------------------------------------------------------------


async def test_cancelling_a_job_ends_every_task_and_leaves_no_queue_entry(subject: Subject) -> None:
    store = subject.store
    s = spec(trigger=every(60), retry=retry(2, 10_000))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    run_id, _ = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="allow",
                                 inputs=[()] * 4)
    t0, t1, t2, t3 = (ids.task_id(run_id, i) for i in range(4))
    c0, c1, c2 = await lease(store, [t0, t1, t2], "w1")
    await store.report([Report(t0, c0.token, "SUCCEEDED"), Report(t1, c1.token, "FAILED", error="x")])
    result = await store.cancel("user asked", job_id=job_id(1), run_ids=[run_id], task_ids=[t0, t1, t2, t3])
    assert result.status == "ok"
    assert result.cancelled == [job_id(1), t1, t2, t3, run_id]
    assert result.leased == [(t2, "w1", c2.token)] and result.ended_runs == [(run_id, "CANCELLED", None)]
    job = await store.get_job(job_id(1))
    assert job is not None and job.state is JobState.CANCELLED and job.next_fire_ms == -1
    run = await store.get_run(run_id)
    assert run is not None and (run.state, run.succeeded, run.cancelled, run.reason) == (
        RunState.CANCELLED, 1, 3, "user asked")
    assert [t.state for t in run.tasks] == [TaskState.SUCCEEDED] + [TaskState.CANCELLED] * 3
    assert all(t.error == "user asked" and t.worker == "" for t in run.tasks[1:])
    assert run.tasks[2].attempts[0].state is AttemptState.CANCELLED
    assert await store.counts() == {"leased": 0, "scheduled": 0, "delayed": 0}
    assert await store.ready_counts() == {GROUP: 0} and await store.worker_leases("w1") == set()
    await subject.advance(20_000)
    assert await store.release_due(10) == []
    (late,) = await store.report([Report(t2, c2.token, "SUCCEEDED")])
    assert late.verdict == "terminal"
    again = await store.cancel("twice", job_id=job_id(1), run_ids=[run_id], task_ids=[t0, t1, t2, t3])
    assert (again.status, again.cancelled, again.leased, again.ended_runs) == ("ok", [], [], [])


async def test_a_cancelled_fixed_delay_job_no_longer_awaits_its_run(store: Store) -> None:
    s = spec(trigger=every(60, fixed_delay=True))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    run_id, _ = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=-2, overlap="allow", inputs=[()])
    assert await store.awaiting_jobs() == [job_id(1)]
    result = await store.cancel("user", job_id=job_id(1), run_ids=[run_id], task_ids=[ids.task_id(run_id, 0)])
    assert result.status == "ok" and await store.awaiting_jobs() == []
    job = await store.get_job(job_id(1))
    assert job is not None and job.awaited_run_id == ""
    assert await store.reschedule_after_run(job_id(1), run_id, 90_000) == ("not_awaiting", -1)


@pytest.mark.parametrize("target", [JobState.COMPLETED, JobState.CANCELLED])
async def test_a_job_is_only_ever_set_paused_or_active(store: Store, target: JobState) -> None:
    await store.submit_many([NewJob(job_id(1), spec(trigger=every(60)), "abs", 5_000)], TTL_MS)
    with pytest.raises(ValueError, match="PAUSED or ACTIVE"):
        await store.set_job_state(job_id(1), target)
    job = await store.get_job(job_id(1))
    assert job is not None and job.state is JobState.ACTIVE and await store.due_schedule(10**13) == [(job_id(1), 5_000)]


async def test_pause_removes_the_schedule_entry_and_resume_puts_it_back(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    assert await store.set_job_state(job_id(1), JobState.PAUSED) == ("ok", "PAUSED", 5_000)
    assert await store.due_schedule(10**13) == []
    assert await store.set_job_state(job_id(1), JobState.PAUSED) == ("unchanged", "PAUSED", 5_000)
    assert await store.set_job_state(job_id(1), JobState.ACTIVE) == ("ok", "ACTIVE", 5_000)
    assert await store.due_schedule(10**13) == [(job_id(1), 5_000)]
    await store.set_job_state(job_id(1), JobState.PAUSED)
    assert await store.set_job_state(job_id(1), JobState.ACTIVE, 9_000) == ("ok", "ACTIVE", 9_000)
    job = await store.get_job(job_id(1))
    assert job is not None and job.next_fire_ms == 9_000 and await store.due_schedule(10**13) == [(job_id(1), 9_000)]
    assert await store.set_job_state(job_id(2), JobState.PAUSED) == (StateChangeStatus.MISSING, None, -1)
    await fire_now(store, 3)  # a one-shot job fired at submit is COMPLETED
    assert await store.set_job_state(job_id(3), JobState.PAUSED) == ("illegal", "COMPLETED", -1)


# ---- reads ---------------------------------------------------------------------------------------------------


# ---- update -------------------------------------------------------------------------------------------


async def test_an_update_changes_the_spec_for_later_runs_and_runs_made_before_keep_theirs(store: Store) -> None:
    old, new = spec(trigger=every(60), args=["a"]), spec(trigger=every(60), args=["b"])
    await store.submit_many([NewJob(job_id(1), old, "abs", 5_000)], TTL_MS)
    before, _ = await store.fire(job_id(1), old, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="allow",
                                 inputs=[()])
    result = await store.update_spec(job_id(1), 1, new, -1)
    assert (result.status, result.state, result.spec_version, result.next_fire_ms) == ("ok", "ACTIVE", 2, 65_000)
    job = await store.get_job(job_id(1))
    assert job is not None and job.spec == new and job.spec_version == 2 and job.spec_updated_ms > 0
    assert await store.due_schedule(10**13) == [(job_id(1), 65_000)]  # the schedule is as it was
    # A firing planned with the old version is refused; planned again with the new one it makes its run.
    _, refused = await store.fire(job_id(1), old, 65_000, expected_ms=65_000, next_fire_ms=125_000,
                                  overlap="allow", inputs=[()])
    ((after, made),) = await store.fire_many([FireRequest(job_id(1), new, 65_000, 65_000, 125_000, "allow", [()],
                                                          spec_version=2)])
    assert refused.status == "changed" and made.status == "created"
    claims = await lease(store, [ids.task_id(before, 0), ids.task_id(after, 0)])
    assert sorted((c.run_id, c.spec_version) for c in claims) == [(before, 1), (after, 2)]
    found = await store.get_specs([(job_id(1), 1), (job_id(1), 2)])
    assert found == {(job_id(1), 1): old, (job_id(1), 2): new}
    run = await store.get_run(after, with_tasks=False)
    assert run is not None and run.spec_version == 2


async def test_an_update_with_a_new_schedule_replaces_the_entry_in_the_same_step(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    assert (await store.update_spec(job_id(1), 1, s, 3_600_000)).next_fire_ms == 3_600_000
    assert await store.due_schedule(10**13) == [(job_id(1), 3_600_000)]
    _, old_time = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=65_000, overlap="allow",
                                   inputs=[()])
    assert old_time.status == "stale"  # the old fire time, even if a timer still holds it, fires nothing


async def test_a_paused_job_takes_a_new_schedule_when_it_resumes(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    await store.set_job_state(job_id(1), JobState.PAUSED)
    result = await store.update_spec(job_id(1), 1, s, 90_000)
    assert (result.status, result.state) == ("ok", "PAUSED") and await store.due_schedule(10**13) == []
    assert await store.set_job_state(job_id(1), JobState.ACTIVE) == ("ok", "ACTIVE", 90_000)
    assert await store.due_schedule(10**13) == [(job_id(1), 90_000)]


async def test_a_fixed_delay_job_given_a_new_schedule_awaits_its_run_no_more(store: Store) -> None:
    s = spec(trigger=every(60, fixed_delay=True))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    run_id, _ = await store.fire(job_id(1), s, 5_000, expected_ms=5_000, next_fire_ms=-2, overlap="allow", inputs=[()])
    await store.update_spec(job_id(1), 1, spec(trigger=every(30)), 50_000)
    assert await store.awaiting_jobs() == [] and await store.due_schedule(10**13) == [(job_id(1), 50_000)]
    assert await store.reschedule_after_run(job_id(1), run_id, 90_000) == ("not_awaiting", -1)


async def test_only_an_active_or_paused_job_is_updated_and_from_its_current_version(store: Store) -> None:
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    assert (await store.update_spec(job_id(1), 1, s, -1)).spec_version == 2
    conflict = await store.update_spec(job_id(1), 1, s, -1)
    assert (conflict.status, conflict.spec_version) == ("conflict", 2)
    await store.cancel("stop", job_id=job_id(1))
    ended = await store.update_spec(job_id(1), 2, s, -1)
    assert (ended.status, ended.state) == ("ended", "CANCELLED")
    assert (await store.update_spec(job_id(9), 1, s, -1)).status == "missing"


async def test_jobs_are_listed_newest_first_with_filters_before_the_limit(subject: Subject) -> None:
    store = subject.store
    for n, group in ((1, "a"), (2, "b"), (3, "a")):
        await store.submit_many([NewJob(job_id(n), spec(group=group), "delay", 60_000)], TTL_MS)
        await subject.advance(5)
    await store.set_job_state(job_id(3), JobState.PAUSED)
    assert [j.id for j in await store.list_jobs(10)] == [job_id(3), job_id(2), job_id(1)]
    assert [j.id for j in await store.list_jobs(1, group="a")] == [job_id(3)]
    assert [j.id for j in await store.list_jobs(10, state=JobState.ACTIVE, group="a")] == [job_id(1)]
    assert await store.list_jobs(0) == []


async def test_specs_are_read_back_as_submitted(store: Store) -> None:
    s = spec(name="report", priority=3)
    await store.submit_many([NewJob(job_id(1), s, "delay", 60_000)], TTL_MS)
    found = await store.get_specs([(job_id(1), 1), (job_id(2), 1)])
    assert list(found) == [(job_id(1), 1)] and found[(job_id(1), 1)] == s
    assert await store.get_spec(job_id(1)) == s and await store.get_spec(job_id(2)) is None
    assert store.cached_spec(job_id(1)) == s and store.cached_spec(job_id(2)) is None


async def test_reads_of_what_does_not_exist_come_back_empty(store: Store) -> None:
    assert await store.get_job(job_id(1)) is None and await store.get_run("nope") is None
    assert await store.get_task("nope") is None and await store.get_tasks(["nope"]) == []
    assert await store.list_runs(job_id(1), 10) == [] and await store.active_runs(job_id(1)) == []
    assert await store.run_task_counts(["nope"]) == {"nope": 0}
    assert await store.worker_leases("w1") == set() and await store.get_workers() == {}
    assert await store.ready_counts() == {} and await store.job_progress([job_id(1)]) == {}


async def test_runs_are_listed_with_their_tasks_on_request(store: Store) -> None:
    run_id = await fire_now(store, tasks=2)
    (with_tasks,) = await store.list_runs(job_id(1), 5, with_tasks=True)
    (without,) = await store.list_runs(job_id(1), 5)
    assert [t.index for t in with_tasks.tasks] == [0, 1] and without.tasks == [] and without.id == run_id
    assert [t.id for t in await store.get_tasks([ids.task_id(run_id, 1), "nope", ids.task_id(run_id, 0)])] == [
        ids.task_id(run_id, 1), ids.task_id(run_id, 0)]


async def test_tasks_read_in_several_calls_come_back_whole_and_in_the_order_asked(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sparkyard.master.redis_reads.TASKS_PER_READ", 2)  # Redis: one tasks.lua call per 2
    run_id = await fire_now(store, tasks=5)
    task_ids = [ids.task_id(run_id, i) for i in range(5)]
    (claim,) = await lease(store, [task_ids[3]])
    await store.report([Report(claim.task_id, claim.token, "SUCCEEDED", result_json='"three"', log_path="l@0-9")])
    asked = [task_ids[4], "nope", task_ids[0], task_ids[3], "nope", task_ids[2], task_ids[1]]
    read = await store.get_tasks(asked)
    assert [t.id for t in read] == [t for t in asked if t != "nope"]
    assert read == [await store.get_task(t) for t in asked if t != "nope"]
    (three,) = [t for t in read if t.id == task_ids[3]]
    assert [(a.number, a.state, a.result, a.log_path) for a in three.attempts] == [
        (1, "SUCCEEDED", '"three"', "l@0-9")]


async def test_worker_records_are_kept_as_given(store: Store) -> None:
    await store.put_worker("w1", {"host": "h1", "slots": 2, "alive": True})
    await store.put_worker("w1", {"host": "h1", "slots": 4, "alive": False})
    await store.put_worker("w2", {"host": "h2", "labels": {"zone": "a"}})
    assert await store.get_workers() == {"w1": {"host": "h1", "slots": 4, "alive": False},
                                         "w2": {"host": "h2", "labels": {"zone": "a"}}}


# ---- backfill --------------------------------------------------------------------------------------------


async def test_a_backfill_plan_keeps_each_time_once_until_it_is_done_and_goes_with_its_job(store: Store) -> None:
    now = await store.time_ms()
    await store.submit_many([NewJob(job_id(1), spec(trigger=every(3600)), "abs", now + 3_600_000)], TTL_MS)
    assert await store.backfill_plan(job_id(1), 2, [3_000, 1_000, 2_000]) == ("ok", 3, 3)
    assert await store.backfill_plan(job_id(1), 3, [2_000, 4_000]) == ("ok", 1, 4)  # 2_000 is pending already
    assert await store.backfill_jobs() == {job_id(1): 3}
    assert await store.backfill_pending(job_id(1), 2) == [1_000, 2_000]  # earliest first
    assert await store.backfill_done(job_id(1), [1_000, 2_000]) == 2
    assert await store.backfill_pending(job_id(1), 10) == [3_000, 4_000]
    assert await store.backfill_done(job_id(1), [3_000, 4_000]) == 0
    assert await store.backfill_jobs() == {}  # the last time done: the job leaves the list
    assert await store.backfill_plan(job_id(9), 1, [1_000]) == ("missing", 0, 0)
    await store.backfill_plan(job_id(1), 1, [5_000])
    await store.backfill_drop(job_id(1))
    assert await store.backfill_jobs() == {} and await store.backfill_pending(job_id(1), 10) == []
    await store.cancel("stop", job_id=job_id(1))
    assert await store.backfill_plan(job_id(1), 1, [1_000]) == ("cancelled", 0, 0)


async def test_deleting_a_job_drops_its_backfill_plan(store: Store) -> None:
    now = await store.time_ms()
    await store.submit_many([NewJob(job_id(1), spec(trigger=every(3600)), "abs", now + 3_600_000)], TTL_MS)
    await store.backfill_plan(job_id(1), 1, [1_000, 2_000])
    assert (await store.delete_job(job_id(1)))[0] == "ok"
    assert await store.backfill_jobs() == {} and await store.backfill_pending(job_id(1), 10) == []


async def test_a_rerun_firing_gets_its_own_id_keeps_the_scheduled_time_and_names_its_original(store: Store) -> None:
    original = await fire_now(store, 1, tasks=2, at=1_000)
    rerun = FireRequest(job_id(1), spec(), 1_000, None, -1, "allow", inputs("b"), run_ms=9_000, rerun_of=original)
    ((run_id, res),) = await store.fire_many([rerun])
    assert res.status == "created" and run_id == ids.run_id(job_id(1), 9_000)
    run = await store.get_run(run_id)
    assert run is not None and run.scheduled_ms == 1_000 and run.rerun_of == original and run.task_count == 1
    assert [[i.value for i in t.inputs] for t in run.tasks] == [["b"]]
    first = await store.get_run(original)
    assert first is not None and first.rerun_of == "" and first.task_count == 2


async def test_queue_depths_count_each_group_s_ready_tasks_by_priority_up_to_a_limit(store: Store) -> None:
    low, high = spec(priority=-5, group="etl"), spec(priority=7, group="etl")
    await store.submit_many([NewJob(job_id(1), low, "abs", 1_000, fire_now=inputs("a", "b")),
                             NewJob(job_id(2), high, "abs", 2_000, fire_now=inputs("c")),
                             NewJob(job_id(3), spec(), "abs", 3_000, fire_now=inputs("d"))], TTL_MS)
    depths = await store.queue_depths(limit=100)
    assert {g: (d.length, d.by_priority) for g, d in depths.items()} == {"etl": (3, {-5: 2, 7: 1}),
                                                                          GROUP: (1, {0: 1})}
    capped = await store.queue_depths(limit=3)  # the first group (sorted) fits, the second does not
    assert {g: (d.length, d.by_priority) for g, d in capped.items()} == {GROUP: (1, {0: 1}), "etl": (3, None)}


def after(parent: str, when: int = pb.AFTER_SUCCEEDED) -> pb.Trigger:
    return pb.Trigger(after=pb.Trigger.After(job_id=parent, when=when))


async def test_a_child_job_is_stored_without_a_schedule_entry_only_while_its_parent_exists(store: Store) -> None:
    (orphan,) = await store.submit_many([NewJob(job_id(2), spec(trigger=after(job_id(1))), "after", -1,
                                                after=job_id(1))], TTL_MS)
    assert orphan.parent_missing and await store.get_job(job_id(2)) is None and await store.parents() == set()
    await fire_now(store, 1)
    (child,) = await store.submit_many([NewJob(job_id(2), spec(trigger=after(job_id(1))), "after", -1,
                                               after=job_id(1))], TTL_MS)
    assert not child.parent_missing and not child.fired and child.next_fire_ms == -1
    job = await store.get_job(job_id(2))
    assert job is not None and job.state is JobState.ACTIVE and job.next_fire_ms == -1
    assert await store.due_schedule(2**53) == []
    assert await store.parents() == {job_id(1)} and await store.children(job_id(1)) == [job_id(2)]


async def test_a_parent_is_deleted_only_after_its_children_and_a_deleted_child_leaves_the_index(store: Store) -> None:
    await fire_now(store, 1)
    for n in (2, 3):
        await store.submit_many([NewJob(job_id(n), spec(trigger=after(job_id(1))), "after", -1, after=job_id(1))],
                                TTL_MS)
    (run,) = await store.active_runs(job_id(1))
    await store.cancel("stop", job_id=job_id(1), run_ids=[run], task_ids=[ids.task_id(run, 0)])
    assert await store.delete_job(job_id(1)) == ("children", [job_id(2), job_id(3)])
    assert await store.delete_job(job_id(2)) == ("ok", [])
    assert await store.children(job_id(1)) == [job_id(3)] and await store.parents() == {job_id(1)}
    assert await store.delete_job(job_id(3)) == ("ok", [])
    assert await store.children(job_id(1)) == [] and await store.parents() == set()
    assert await store.delete_job(job_id(1)) == ("ok", [])


async def test_a_parent_run_s_end_fires_its_active_children_once_in_the_same_script(store: Store) -> None:
    child_spec = spec(trigger=after(job_id(1)))
    await fire_now(store, 1, at=500)  # the parent exists before its child
    await store.submit_many([NewJob(job_id(2), child_spec, "after", -1, after=job_id(1))], TTL_MS)

    async def parent_run_ending(at: int) -> str:
        ((run_id, fired),) = await store.fire_many([FireRequest(job_id(1), spec(), at, None, -1, "allow", inputs("a"))])
        assert fired.status == "created"
        (claim,) = await lease(store, [ids.task_id(run_id, 0)])
        await store.report([Report(claim.task_id, claim.token, "SUCCEEDED")])
        return run_id

    assert (await store.set_job_state(job_id(2), JobState.PAUSED))[0] == "ok"
    await parent_run_ending(1_000)
    assert await store.list_runs(job_id(2), 10) == []  # a paused child skips
    assert (await store.set_job_state(job_id(2), JobState.ACTIVE))[:2] == ("ok", "ACTIVE")
    assert await store.due_schedule(2**53) == []  # a resumed child is still not on the schedule
    parent_run = await parent_run_ending(2_000)
    (run,) = await store.list_runs(job_id(2), 10)
    assert run.id == ids.run_id(job_id(2), ids.parse_run_ms(parent_run))
    assert run.after_run == parent_run and run.scheduled_ms == 2_000 and run.rerun_of == ""
    manual = FireRequest(job_id(2), child_spec, 5_000, None, -1, "allow", inputs("a"))
    await store.set_job_state(job_id(2), JobState.PAUSED)
    ((_, by_hand),) = await store.fire_many([manual])
    assert by_hand.status == "created"  # a user's trigger runs a paused job, as for any job


@pytest.mark.parametrize("target", [JobState.COMPLETED, JobState.CANCELLED])
async def test_a_job_state_change_other_than_pause_or_resume_is_refused(store: Store, target: JobState) -> None:
    with pytest.raises(ValueError, match=f"not {target.value}"):
        await store.set_job_state(job_id(1), target)


async def test_replies_are_parsed_into_enums_and_named_records(store: Store) -> None:
    """The scripts' words become enum members (an unknown word would raise), their tuples named records."""
    s = spec(trigger=every(60))
    await store.submit_many([NewJob(job_id(1), s, "abs", 5_000)], TTL_MS)
    (fired,) = await store.fire_many([FireRequest(job_id(1), s, 5_000, 5_000, 65_000, "allow", [()])])
    assert fired.result.status is FireStatus.CREATED and fired.result.run_state is RunState.SCHEDULED
    assert await store.job_progress([job_id(1)]) == {job_id(1): JobProgress(JobState.ACTIVE, 1, 1)}
    (claim,) = await lease(store, [ids.task_id(fired.run_id, 0)])
    assert await store.set_job_state(job_id(1), JobState.PAUSED) == StateChange(StateChangeStatus.OK,
                                                                                 JobState.PAUSED, 65_000)
    assert (await store.update_spec(job_id(1), 1, s, -1)).status is UpdateStatus.OK
    cancelled = await store.cancel("stop", job_id=job_id(1), run_ids=[fired.run_id], task_ids=[claim.task_id])
    assert cancelled.status is CancelStatus.OK
    assert cancelled.leased == [LeasedTask(claim.task_id, "w1", claim.token)]
    assert cancelled.ended_runs == [EndedRun(fired.run_id, RunState.CANCELLED)]
    assert cancelled.ended_runs[0].state is RunState.CANCELLED
    assert await store.reschedule_after_run(job_id(1), fired.run_id, 9_000) == Rescheduled(
        RescheduleStatus.NOT_AWAITING, -1)
    assert await store.delete_job(job_id(1)) == Deletion(DeleteStatus.OK, [])
