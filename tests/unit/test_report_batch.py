"""One report.lua call carrying the ends of many tasks of one run (a worker's batch of a split run): the run
ends once, with the call's last task, and a capped run lets a gated task in for every task that ends."""

from __future__ import annotations

from clocked_store import ClockedStores
from sparkyard import ids
from sparkyard.clock import FakeClock
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.store_values import NewJob, Report
from sparkyard.spec import normalize
from sparkyard.states import RunState, TaskState, VerdictKind
from sparkyard.v1 import sparkyard_pb2 as pb

GROUP = "default"
JOB = f"j{7:021x}"
AT = 1_000


async def split_run(store: RedisStore, tasks: int, max_concurrent: int = 0) -> str:
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main", split=pb.SplitSpec(max_concurrent=max_concurrent)))
    inputs = [[pb.SplitInput(value=f"p{i}")] for i in range(tasks)]
    await store.submit_many([NewJob(JOB, spec, "abs", AT, fire_now=inputs)], 60_000)
    return ids.run_id(JOB, AT)


async def claim_ready(store: RedisStore) -> list[tuple[str, int]]:
    ready = await store.peek_ready(GROUP, 1000)
    claims = await store.claim(GROUP, [(r.task_id, "w1") for r in ready], lease_ms=60_000, timeout_grace_ms=0)
    return [(c.task_id, c.token) for c in claims]


def ended(task_id: str, token: int, outcome: str = "SUCCEEDED") -> Report:
    return Report(task_id, token, outcome, result_json="null", started_ms=AT, finished_ms=AT + 1)


async def test_a_batch_of_a_runs_results_ends_the_run_once_with_its_last_task(clocked_stores: ClockedStores) -> None:
    store = await clocked_stores.make(FakeClock(start=10.0))
    run_id = await split_run(store, tasks=6)
    leased = await claim_ready(store)
    assert len(leased) == 6
    first = await store.report([ended(t, tok) for t, tok in leased[:2]])  # not the run's end yet
    assert [v.run_state for v in first] == [None, None]
    last = await store.report([ended(t, tok, "FAILED" if t == leased[3][0] else "SUCCEEDED") for t, tok in leased[2:]])
    assert [v.verdict for v in last] == [VerdictKind.ACCEPTED] * 4
    assert [v.run_state for v in last] == [None, None, None, RunState.FAILED]  # one end, with the last task
    assert (await store.get_run(run_id)).state is RunState.FAILED


async def test_a_capped_run_lets_a_gated_task_in_for_each_task_a_batch_ends(clocked_stores: ClockedStores) -> None:
    store = await clocked_stores.make(FakeClock(start=10.0))
    run_id = await split_run(store, tasks=7, max_concurrent=2)
    leased = await claim_ready(store)
    assert len(leased) == 2  # the cap: five wait behind the gate
    await store.report([ended(t, tok) for t, tok in leased])  # two end in one call: two come in
    leased = await claim_ready(store)
    assert len(leased) == 2
    await store.report([ended(t, tok) for t, tok in leased])
    leased = await claim_ready(store)
    await store.report([ended(t, tok) for t, tok in leased])
    leased = await claim_ready(store)
    assert len(leased) == 1  # the seventh
    verdicts = await store.report([ended(t, tok) for t, tok in leased])
    assert [v.run_state for v in verdicts] == [RunState.SUCCEEDED]
    run = await store.get_run(run_id)
    assert run.state is RunState.SUCCEEDED and all(t.state is TaskState.SUCCEEDED for t in run.tasks)
