"""Task code never runs in the worker: a task that exits, segfaults, eats memory or ignores its cancel
fails alone, the worker stays registered and its other tasks finish (session runner: warm drivers)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from harness import EXAMPLES, Cluster, RedisServer, cluster_with_worker, wait_for
from sparkyard.client import Client, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
pytestmark = pytest.mark.spark


def _alive(client: Client, worker_id: str) -> bool:
    return any(w.id == worker_id and w.alive for w in client.workers())


def _ready(client: Client, worker_id: str) -> bool:
    return any(w.id == worker_id and w.alive and w.readiness == pb.READINESS_READY for w in client.workers())


def _driver_records(cluster: Cluster, worker_id: str) -> list[dict[str, int]]:
    return [json.loads(p.read_text()) for p in (cluster.root / worker_id / "children").glob("*.json")]


@pytest.fixture(scope="module")
def pool(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Client]]:
    """A master and one session-runner worker with 2 warm drivers, shared by the tests of this module:
    each test breaks a task, none may break the worker, so each also checks the next one's ground."""
    with cluster_with_worker(redis_server.url, tmp_path_factory.mktemp("isolation"), "w", 2,
                             namespace="isolation") as pool:
        yield pool


def test_crashing_tasks_fail_alone_and_the_worker_keeps_running_others(pool: tuple[Cluster, Client],
                                                                      tmp_path: Path) -> None:
    cluster, client = pool
    markers = tmp_path / "markers"
    survivor = client.submit(f"{TASKS}:sleep_python", args=["6", str(markers)])
    wait_for(lambda: list(markers.glob("*.started")), 60, "the long task to start")
    crashes = {
        "exit": client.submit(f"{TASKS}:exit_hard", args=["7"]),
        "segfault": client.submit(f"{TASKS}:segfault"),
    }
    ended = {name: client.wait(first_run_id(job), timeout=120)[0] for name, job in crashes.items()}
    for name, run in ended.items():
        assert run.state == pb.RUN_FAILED, name
        attempt = run.tasks[0].attempts[-1]  # (an earlier one may have been handed back unstarted: RELEASED)
        assert attempt.state == pb.ATTEMPT_FAILED, name
        assert "driver process" in attempt.error, attempt.error
    assert "exit code 7" in ended["exit"].tasks[0].attempts[-1].error
    assert "SIGSEGV" in ended["segfault"].tasks[0].attempts[-1].error
    run, _ = client.wait(first_run_id(survivor), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED
    assert _alive(client, "w") and cluster.workers["w"].process.poll() is None
    # Replacements are warmed: the worker becomes fully ready again and runs Spark code.
    wait_for(lambda: _ready(client, "w"), 120, "replacement drivers to be warm")
    after, _ = client.wait(first_run_id(client.submit(f"{TASKS}:count", args=["7"])), timeout=120)
    assert after.state == pb.RUN_SUCCEEDED and json.loads(after.tasks[0].result_json)["count"] == 7


def test_a_task_runs_in_a_driver_process_not_in_the_worker(pool: tuple[Cluster, Client]) -> None:
    cluster, client = pool
    run, _ = client.wait(first_run_id(client.submit(f"{TASKS}:driver_pid")), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED
    pid = json.loads(run.tasks[0].result_json)
    assert pid != cluster.workers["w"].pid
    assert pid in {r["pid"] for r in _driver_records(cluster, "w")}


def test_a_task_over_its_memory_limit_is_killed_and_the_worker_stays(pool: tuple[Cluster, Client]) -> None:
    cluster, client = pool
    # The driver's JVM alone holds a few hundred MiB: 1,200 MiB leaves room for it, not for 2 GiB more.
    job = client.submit(f"{TASKS}:hog_memory", args=["2048", "60"], task_memory="1200m")
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_FAILED
    error = run.tasks[0].attempts[-1].error
    assert "memory limit exceeded" in error and "1200 MiB" in error, error
    assert _alive(client, "w")
    ok, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop")), timeout=120)
    assert ok.state == pb.RUN_SUCCEEDED


def test_a_task_that_ignores_its_cancel_is_killed_with_its_driver(pool: tuple[Cluster, Client],
                                                                 tmp_path: Path) -> None:
    cluster, client = pool
    markers = tmp_path / "markers"
    job = client.submit(f"{TASKS}:sleep_uninterruptibly", args=["3600", str(markers)])
    started = wait_for(lambda: list(markers.glob("*.started")), 60, "the task to start")
    driver = int(started[0].read_text())
    client.cancel(job.id)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_CANCELLED
    wait_for(lambda: not Path(f"/proc/{driver}").exists(), 60, "the stuck driver to be killed")
    wait_for(lambda: _ready(client, "w"), 120, "a replacement driver")
    ok, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop")), timeout=120)
    assert ok.state == pb.RUN_SUCCEEDED


def test_a_poison_task_goes_dead_after_its_attempts_without_taking_the_worker(pool: tuple[Cluster, Client]) -> None:
    cluster, client = pool
    job = client.submit(f"{TASKS}:exit_hard", args=["1"], retries=1, backoff="0s")
    run, _ = client.wait(first_run_id(job), timeout=180)
    assert run.state == pb.RUN_FAILED
    assert run.tasks[0].state == pb.TASK_DEAD and len(run.tasks[0].attempts) == 2
    assert _alive(client, "w") and cluster.workers["w"].process.poll() is None


def test_drivers_die_with_a_killed_worker_and_a_restarted_worker_ends_leftovers(
        make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    client = cluster.start_with_worker("w", 2)
    wait_for(lambda: _ready(client, "w"), 120, "the worker's drivers to be warm")
    drivers = [r["pid"] for r in _driver_records(cluster, "w")]
    assert len(drivers) == 2
    # Each driver's JVM keeps its temporary files (local dir, artifacts, native libraries) in a directory of
    # the worker's, not in /tmp.
    temp_dirs = sorted((cluster.root / "w" / "drivers").glob("driver-*.tmp"))
    assert len(temp_dirs) == 2 and all(any(d.iterdir()) for d in temp_dirs), temp_dirs
    cluster.kill_worker("w", signal.SIGKILL)
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in drivers), 30,
             "the drivers to die with their worker (PR_SET_PDEATHSIG)")
    marks = [d / "left-by-a-killed-driver" for d in temp_dirs]
    for mark in marks:
        mark.write_text("")
    # A process a previous worker recorded and left behind (simulated: its own session, recorded as the
    # worker records its children) is ended by the next worker on the same work directory.
    leftover = subprocess.Popen(["sleep", "3600"], start_new_session=True)
    try:
        from sparkyard.worker.children import start_time

        records = cluster.root / "w" / "children"
        records.mkdir(parents=True, exist_ok=True)
        (records / f"{leftover.pid}.json").write_text(json.dumps(
            {"pid": leftover.pid, "pgid": leftover.pid, "start": start_time(leftover.pid), "what": "test"}))
        cluster.start_worker("w", slots=2)
        wait_for(lambda: leftover.poll() is not None, 60, "the restarted worker to end the leftover")
        assert leftover.returncode == -signal.SIGKILL
        wait_for(lambda: not any(m.exists() for m in marks), 60, "the killed drivers' temporary files to go")
    finally:
        if leftover.poll() is None:
            os.kill(leftover.pid, signal.SIGKILL)
            leftover.wait()


def test_an_attempt_for_a_runner_that_cannot_start_fails_with_the_reason_after_the_wait_limit(
        make_cluster: object) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    # The worker's own runner (submit) is ready; the session runner a job asks for can never start a driver.
    cluster.start_worker("w", slots=1, runner="submit",
                         extra=("--spark-master", "nosuch://nowhere", "--runner-wait-max", "3s"))
    cluster.wait_workers("w")
    run, _ = client.wait(first_run_id(client.submit(f"{TASKS}:noop", runner="session")), timeout=180)
    assert run.state == pb.RUN_FAILED, run
    error = run.tasks[0].attempts[0].error
    assert error.startswith("waited 3s for the session runner, which cannot run it:") and "failed to start" in error, \
        error


def test_a_worker_offers_no_slot_until_its_runner_can_run_a_task(make_cluster: object) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    # Drivers that cannot start (no such Spark master): the worker registers, says why, takes nothing.
    cluster.start_worker("broken", slots=1, extra=("--spark-master", "nosuch://nowhere"))
    wait_for(lambda: any(w.id == "broken" and w.readiness == pb.READINESS_DEGRADED for w in client.workers()),
             120, "the broken worker to report itself degraded")
    broken = next(w for w in client.workers() if w.id == "broken")
    assert "failed to start" in broken.readiness_reason and broken.free_slots == 0
    job = client.submit(f"{TASKS}:noop")
    run_id = first_run_id(job)
    # Several heartbeats pass: the task is never offered to the broken worker.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        run = client.run(run_id)
        assert not run.tasks or run.tasks[0].state == pb.TASK_READY
        time.sleep(0.5)  # observing that nothing happens, for a bounded while
    cluster.start_worker("healthy", slots=1)
    run, _ = client.wait(run_id, timeout=180)
    assert run.state == pb.RUN_SUCCEEDED and run.tasks[0].attempts[0].worker == "healthy"


def test_driver_max_tasks_1_runs_every_attempt_on_a_fresh_driver_even_back_to_back(make_cluster: object) -> None:
    """"A fresh spark-submit every time": attempts queued together still each get a driver of their own (a
    retiring driver used to serve on until its replacement was warm, so back-to-back attempts shared it)."""
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    cluster.start_worker("w", slots=1, extra=("--driver-max-tasks", "1"))
    cluster.wait_workers("w")
    client = cluster.client()
    jobs = [client.submit(f"{TASKS}:driver_pid") for _ in range(3)]  # queued at once, behind one slot
    pids = []
    for job in jobs:
        run, _ = client.wait(first_run_id(job), timeout=300)
        assert run.state == pb.RUN_SUCCEEDED, run
        pids.append(json.loads(run.tasks[0].result_json))
    assert len(set(pids)) == 3, pids
    wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in pids[:2]), 60, "the used drivers to exit")
