"""Webhook deliveries are durable in Redis: recorded by the script that ends the run, delivered by whoever
leads, taken out only by a fenced script — over a RedisStore timed by a fake clock and a receiver on loopback
(an aiohttp server in the test's own loop)."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

import pytest
from aiohttp import web

from clocked_store import ClockedStores
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.events import RunEnded
from sparkyard.master.leader import take_lead
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import Fenced
from sparkyard.master.store_values import NewJob, Report
from sparkyard.master.webhooks import WEBHOOK_ATTEMPTS, Webhooks
from sparkyard.spec import normalize
from sparkyard.states import RunState
from sparkyard.v1 import sparkyard_pb2 as pb

DEADLINE_S = 20.0


class Receiver:
    """Records every POST (its headers and body); answers ``status`` (503 while it is "down")."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.status = 204
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def hook(request: web.Request) -> web.Response:
            self.posts.append((dict(request.headers), await request.json()))
            return web.Response(status=self.status)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/hook"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    yield r
    await r.stop()


@pytest.fixture
async def store(clocked_stores: ClockedStores) -> RedisStore:
    return await clocked_stores.make(FakeClock())


def clock_of(store: RedisStore) -> FakeClock:
    clock = store._test_clock
    assert isinstance(clock, FakeClock)
    return clock


async def ended_run(store: RedisStore, n: int, outcome: str = "FAILED", **urls: str) -> str:
    """A one-task run of a new job (with the webhook ``urls`` of its spec), ended with ``outcome``."""
    now = await store.time_ms()
    job_id = f"j{n:021x}"
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", **urls))
    await store.submit_many([NewJob(job_id, spec, "abs", now, fire_now=[[]])], 60_000)
    run_id = ids.run_id(job_id, now)
    (claim,) = await store.claim("default", [(ids.task_id(run_id, 0), "w1")], lease_ms=60_000, timeout_grace_ms=0)
    (verdict,) = await store.report([Report(claim.task_id, claim.token, outcome)])
    assert verdict.run_state is not None and verdict.run_state.value == outcome
    return run_id


async def pending(store: RedisStore) -> list[tuple[str, int]]:
    return await store.due_webhooks(1 << 62, 100)


async def wait_until(what: str, check: Any, nudge: Webhooks | None = None) -> None:
    """Until ``check()`` (maybe a coroutine) is true; the loop keeps serving the deliverer meanwhile.

    ``nudge``: a deliverer woken at each look, as a run's end wakes it. The fake clock moves only when the
    test moves it, so a deliverer whose poll was armed after the clock last moved would never look again.
    """
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while True:
        if nudge is not None:
            nudge.run_ended(RunEnded("r", RunState.FAILED))
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not within {DEADLINE_S} s: {what}")
        await asyncio.sleep(0.01)


async def test_the_script_that_ends_a_run_records_its_delivery_when_a_url_asks_for_it(store: RedisStore) -> None:
    own = await ended_run(store, 1, "FAILED", on_failure="http://127.0.0.1:9/f")
    not_asked = await ended_run(store, 2, "SUCCEEDED", on_failure="http://127.0.0.1:9/f")
    no_url = await ended_run(store, 3, "FAILED")
    assert await pending(store) == [(own, 0)]
    # The leader's default counts for runs that end after it was recorded.
    await store.webhook_defaults(on_failure=True, on_success=False)
    by_default = await ended_run(store, 4, "FAILED")
    still_not = await ended_run(store, 5, "SUCCEEDED")
    assert sorted(r for r, _ in await pending(store)) == sorted([own, by_default])
    assert {not_asked, no_url, still_not}.isdisjoint(r for r, _ in await pending(store))
    await store.webhook_defaults(on_failure=False, on_success=False)
    await ended_run(store, 6, "FAILED")
    assert len(await pending(store)) == 2


async def test_a_delivery_the_old_leader_could_not_make_is_made_by_the_next_with_its_idempotency_key(
        clocked_stores: ClockedStores, store: RedisStore, receiver: Receiver) -> None:
    clock = clock_of(store)
    old = Webhooks(store, clock, MasterMetrics(), "", "")
    receiver.status = 503  # the receiver is down while the old leader leads
    await old.start()
    run_id = await ended_run(store, 1, "FAILED", on_failure=receiver.url)
    old.run_ended(RunEnded(run_id, RunState.FAILED))
    await wait_until("the old leader's failed try recorded", lambda: _tries(store, run_id, 1))
    await old.stop()  # the old leader dies with the delivery pending

    # A new leader (its own script library on the same namespace) takes over under a newer epoch (the
    # lease is taken over as a restarted master with the old one's id does: at once).
    successor = RedisStore(store.redis, store.keys, test_clock=clock)
    await take_lead(successor.scripts, "unit")
    receiver.status = 204
    new = Webhooks(successor, clock, MasterMetrics(), "", "")
    await new.start()
    try:
        clock.advance(1.0)  # the first retry's backoff
        await wait_until("the delivery taken out", lambda: _none_pending(store), new)
    finally:
        await new.stop()
    headers, body = receiver.posts[-1]
    assert (body["event"], body["run"]["id"], body["run"]["state"]) == ("run.failed", run_id, "FAILED")
    keys = {h["Idempotency-Key"] for h, _ in receiver.posts}
    assert keys == {f"{run_id}:run.failed"} and headers["X-Sparkyard-Event"] == "run.failed"
    assert len(receiver.posts) == 2  # one refused while it was down, one taken
    # The deposed leader can neither take it out nor put it back: its writes are fenced.
    with pytest.raises(Fenced):
        await store.webhook_done(run_id)


async def _tries(store: RedisStore, run_id: str, n: int) -> bool:
    return (run_id, n) in await pending(store)


async def _none_pending(store: RedisStore) -> bool:
    return not await pending(store)


async def test_failed_tries_back_off_and_the_last_gives_up(store: RedisStore, receiver: Receiver) -> None:
    clock = clock_of(store)
    metrics = MasterMetrics()
    hooks = Webhooks(store, clock, metrics, receiver.url, "")  # the master's default URL
    receiver.status = 500
    await hooks.start()
    try:
        run_id = await ended_run(store, 1, "FAILED")
        hooks.run_ended(RunEnded(run_id, RunState.FAILED))
        for failed in range(1, WEBHOOK_ATTEMPTS):
            await wait_until(f"failed try {failed} recorded", lambda: _tries(store, run_id, failed), hooks)
            # Not due before its backoff (1 s, 2 s, 4 s …): a poll in between tries nothing.
            (due,) = [s for r, s in await store.redis.zrange(store.keys.webhooks, 0, -1, withscores=True)
                      if r == run_id]
            assert due == await store.time_ms() + 1000 * 2 ** (failed - 1)
            assert len(receiver.posts) == failed
            clock.advance(2 ** (failed - 1))
        await wait_until("given up", lambda: _none_pending(store), hooks)
    finally:
        await hooks.stop()
    assert len(receiver.posts) == WEBHOOK_ATTEMPTS
    assert metrics.webhooks.labels("failed")._value.get() == 1
    assert metrics.webhooks.labels("retried")._value.get() == WEBHOOK_ATTEMPTS - 1


async def test_a_run_whose_url_is_gone_leaves_nothing_pending(store: RedisStore) -> None:
    """A default URL recorded by one leader that the next does not have: nothing to deliver, and nothing
    left behind."""
    await store.webhook_defaults(on_failure=True, on_success=False)
    await ended_run(store, 1, "FAILED")
    assert len(await pending(store)) == 1
    hooks = Webhooks(store, clock_of(store), MasterMetrics(), "", "")
    await hooks.start()
    try:
        await wait_until("the delivery dropped", lambda: _none_pending(store))
    finally:
        await hooks.stop()
