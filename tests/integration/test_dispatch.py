"""Dispatch with real processes: split runs, per-run concurrency caps, priorities, backpressure."""

from __future__ import annotations

import json
from pathlib import Path

from harness import EXAMPLES, Cluster, wait_for
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"


def _intervals(run: pb.Run) -> list[tuple[int, int]]:
    return [(t.attempts[-1].leased_at.ToMilliseconds(), t.attempts[-1].finished_at.ToMilliseconds()) for t in run.tasks]


def _max_overlap(intervals: list[tuple[int, int]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def test_split_run_interleaves_resource_marks_over_both_workers(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    inputs = [(f"a{i}", "db_a") for i in range(4)] + [(f"b{i}", "db_b") for i in range(4)]
    job = client.submit(f"{TASKS}:count", inputs=inputs, parallelism=4, routing="round-robin")
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED and run.task_count == 4
    slices = [[(i.value, i.mark) for i in t.inputs] for t in sorted(run.tasks, key=lambda t: t.index)]
    assert sorted(x for s in slices for x in s) == sorted(inputs)  # every input in exactly one task
    for s in slices:
        assert len(s) == 2 and {m for _, m in s} == {"db_a", "db_b"}  # each task reads both sources
    # The run's result lists each task's result in index order; each task saw its own slice.
    results = json.loads(run.result_json)
    assert [r["inputs"] for r in results] == [[v for v, _ in s] for s in slices]
    assert {t.attempts[-1].worker for t in run.tasks} == {"w1", "w2"}


def test_max_concurrent_caps_the_tasks_of_a_run_leased_at_once(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(f"{TASKS}:sleep_python", args=["0.5"], parallelism=6, max_concurrent=2)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED and run.task_count == 6
    assert _max_overlap(_intervals(run)) <= 2  # 4 slots were free, but the run may use only 2


def test_priorities_are_served_in_order_within_a_group(make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    # queued: no worker yet; each task takes 20 ms, so their starts on the one slot are apart
    jobs = {p: client.submit(f"{TASKS}:sleep_python", args=["0.02"], priority=p) for p in (1, 50, -10, 500, 0)}
    wait_for(lambda: all(client.run(first_run_id(j)).state == pb.RUN_SCHEDULED for j in jobs.values()), 30,
             "the runs to be queued")
    cluster.start_worker("single", slots=1)
    runs = {p: client.wait(first_run_id(j), timeout=120)[0] for p, j in jobs.items()}
    # Started, not leased: a worker may hold several leased tasks queued for its slot (prefetch), and runs
    # them in the order they were leased.
    order = sorted(runs, key=lambda p: runs[p].tasks[0].attempts[0].started_at.ToMilliseconds())
    assert order == [500, 50, 1, 0, -10]


def test_a_full_cluster_leaves_tasks_ready_in_redis(make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    client = cluster.start_with_worker("small", 2)
    jobs = [client.submit(f"{TASKS}:sleep_python", args=["1"]) for _ in range(6)]

    def saturated() -> bool:
        status = client.status()
        (worker,) = client.workers()
        return status.leased == 2 and status.ready_by_group.get("default") == 4 and worker.free_slots == 0

    wait_for(saturated, 60, "2 tasks leased, 4 waiting READY in Redis, no free slot")
    runs = [client.wait(first_run_id(j), timeout=120)[0] for j in jobs]
    assert all(r.state == pb.RUN_SUCCEEDED for r in runs)
    assert _max_overlap([iv for r in runs for iv in _intervals(r)]) <= 2  # never more than its slots


def test_a_prefetched_task_never_waits_behind_a_long_one(shared_cluster: Cluster) -> None:
    """Workers queue tasks beyond their slots (prefetch); one whose slots are taken by long attempts hands
    its queued tasks back, and a worker with free slots runs them."""
    client = shared_cluster.client()
    # Every slot of both workers ready and free: with one taken (a task an earlier test of the shared cluster
    # left running, a driver still warming) the key's worker takes one long task, not both (CI, 2026-11-27).
    wait_for(lambda: all(w.ready_slots == w.slots == w.free_slots for w in client.workers()), 120,
             "every slot of both workers ready and free")
    warm, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop", parallelism=100)), timeout=120)
    assert warm.state == pb.RUN_SUCCEEDED  # both workers now know their tasks are short: they prefetch
    long_job = client.submit(f"{TASKS}:sleep_python", args=["120"], parallelism=2, routing="consistent-hash",
                             routing_key="one-worker")  # both long tasks on the key's worker
    long_run = first_run_id(long_job)
    try:
        def long_ones_started() -> bool:
            tasks = client.run(long_run).tasks
            return len(tasks) == 2 and all(t.state == pb.TASK_LEASED and t.attempts[-1].started_at.seconds
                                           for t in tasks)

        wait_for(long_ones_started, 60, "both long tasks to start")
        assert len({t.attempts[-1].worker for t in client.run(long_run).tasks}) == 1
        short, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop", parallelism=1000)), timeout=100)
        assert short.state == pb.RUN_SUCCEEDED
        assert client.run(long_run).state == pb.RUN_RUNNING  # every short task finished while the long ones ran
    finally:
        client.cancel(long_job.id, "test over")
        wait_for(lambda: client.run(long_run).state != pb.RUN_RUNNING, 60, "the long run to end")
