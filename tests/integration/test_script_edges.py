"""The Lua scripts change a state only along an edge of the transition tables they are rendered with.

Each case renders every script with ``EDGES`` lacking one edge (as :func:`sparkyard.states.lua_tables`
would render a table without it) and drives the script that takes that edge: it must refuse and leave
the state as it was. A script that tested a literal state instead of consulting the table would take the
edge anyway — so the tables in :mod:`sparkyard.states` stay the single source of the scripts' rules.
"""

from __future__ import annotations

import itertools
from typing import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from harness import RedisServer
from sparkyard.keys import Keys
from sparkyard.master import scripts
from sparkyard.master.leader import take_lead
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store_values import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import TABLES, JobState, lua_tables
from sparkyard.v1 import sparkyard_pb2 as pb

_ns = itertools.count(1)
LEASE_MS = 60_000
JOB = "j0000000000100000000001"


def _tables_without(kind: str, source: str, target: str) -> str:
    """``lua_tables()`` as it would be with that one edge removed from the ``kind`` table."""
    edge = f"    {source} = {{"
    lines = []
    current_kind = ""
    for line in lua_tables().splitlines():
        if line.startswith("  ") and not line.startswith("    ") and line.strip().endswith("{"):
            current_kind = line.strip().split(" ")[0]
        if current_kind == kind and line.startswith(edge):
            kept = sorted(t for t in TABLES[kind][source] if t != target)
            line = f"{edge}{', '.join(f'{t} = true' for t in kept)}}},"
        lines.append(line)
    return "\n".join(lines)


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:
    client = Redis(port=redis_server.port, decode_responses=True)
    yield client
    await client.aclose()


async def _store(redis: Redis, monkeypatch: pytest.MonkeyPatch, kind: str, source: str, target: str) -> RedisStore:
    rendered = _tables_without(kind, source, target)
    assert rendered != lua_tables()
    monkeypatch.setattr(scripts, "lua_tables", lambda: rendered)
    store = RedisStore(redis, Keys(f"edges{next(_ns)}"))
    await take_lead(store.scripts, "edges-test")
    return store


def _spec(**kw: object) -> pb.JobSpec:
    return normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", **kw))  # type: ignore[arg-type]


async def _ready(store: RedisStore, **kw: object) -> str:
    (res,) = await store.submit_many([NewJob(JOB, _spec(**kw), "abs", 1_000, fire_now=[()])], 60_000)
    assert res.fired
    (ready,) = await store.peek_ready("default", 10)
    return ready.task_id


async def _leased(store: RedisStore, **kw: object) -> tuple[str, int]:
    task_id = await _ready(store, **kw)
    (claim,) = await store.claim("default", [(task_id, "w1")], lease_ms=LEASE_MS, timeout_grace_ms=0)
    return task_id, claim.token


async def _task_state(store: RedisStore, task_id: str) -> str:
    task = await store.get_task(task_id)
    assert task is not None
    return task.state.value


async def _past(store: RedisStore, zset: str, task_id: str) -> None:
    """Move a task's deadline in ``zset`` (leases or timeouts) into the past."""
    await store.redis.zadd(zset, {task_id: 0})


async def claim_leases_no_task(store: RedisStore) -> None:
    task_id = await _ready(store)
    assert await store.claim("default", [(task_id, "w1")], lease_ms=LEASE_MS, timeout_grace_ms=0) == []
    assert await _task_state(store, task_id) == "READY"


async def claim_leaves_the_run_scheduled(store: RedisStore) -> None:
    task_id, _ = await _leased(store)
    run = await store.get_run(task_id.rsplit(".", 1)[0], with_tasks=False)
    assert run is not None and run.state.value == "SCHEDULED"


def _report_refused(outcome: str) -> Callable[[RedisStore], Awaitable[None]]:
    async def case(store: RedisStore) -> None:
        task_id, token = await _leased(store)
        (verdict,) = await store.report([Report(task_id, token, outcome)])
        assert verdict.verdict.value == "terminal" and await _task_state(store, task_id) == "LEASED"
    return case


async def reap_keeps_an_expired_lease(store: RedisStore) -> None:
    task_id, _ = await _leased(store)
    await _past(store, store.keys.leases, task_id)
    assert await store.reap_expired(3, 100) == []
    assert await _task_state(store, task_id) == "LEASED"


async def reap_keeps_an_overdue_attempt(store: RedisStore) -> None:
    timeout = pb.JobSpec().timeout
    timeout.FromSeconds(60)
    task_id, _ = await _leased(store, timeout=timeout)
    await _past(store, store.keys.timeouts, task_id)
    assert await store.reap_expired(3, 100) == []
    assert await _task_state(store, task_id) == "LEASED"


async def cancel_keeps_a_running_attempt(store: RedisStore) -> None:
    task_id, _ = await _leased(store)
    result = await store.cancel("stop", task_ids=[task_id])
    assert result.cancelled == [] and await _task_state(store, task_id) == "LEASED"


async def pause_keeps_the_job_active(store: RedisStore) -> None:
    await store.submit_many([NewJob(JOB, _spec(), "abs", 10**13)], 60_000)
    assert (await store.set_job_state(JOB, JobState.PAUSED))[0] == "illegal"


CASES: dict[tuple[str, str, str], Callable[[RedisStore], Awaitable[None]]] = {
    ("task", "READY", "LEASED"): claim_leases_no_task,
    ("run", "SCHEDULED", "RUNNING"): claim_leaves_the_run_scheduled,
    ("task", "LEASED", "SUCCEEDED"): _report_refused("SUCCEEDED"),
    ("attempt", "RUNNING", "SUCCEEDED"): _report_refused("SUCCEEDED"),
    ("attempt", "RUNNING", "FAILED"): _report_refused("FAILED"),
    ("task", "LEASED", "DEAD"): _report_refused("FAILED"),
    ("attempt", "RUNNING", "RELEASED"): _report_refused("RELEASED"),
    ("task", "LEASED", "READY"): reap_keeps_an_expired_lease,
    ("attempt", "RUNNING", "LOST"): reap_keeps_an_expired_lease,
    ("attempt", "RUNNING", "TIMED_OUT"): reap_keeps_an_overdue_attempt,
    ("attempt", "RUNNING", "CANCELLED"): cancel_keeps_a_running_attempt,
    ("task", "LEASED", "CANCELLED"): cancel_keeps_a_running_attempt,
    ("job", "ACTIVE", "PAUSED"): pause_keeps_the_job_active,
}


@pytest.mark.parametrize("edge", sorted(CASES), ids=lambda e: f"{e[0]}:{e[1]}->{e[2]}")
async def test_a_script_refuses_an_edge_missing_from_its_table(
        redis: Redis, monkeypatch: pytest.MonkeyPatch, edge: tuple[str, str, str]) -> None:
    store = await _store(redis, monkeypatch, *edge)
    await CASES[edge](store)
