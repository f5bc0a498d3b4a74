"""A master that dies loses nothing: all state is in Redis and workers reconnect."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import EXAMPLES, Cluster, wait_for
from sparkyard.client import Client, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
# A lease long enough to outlast a master restart on a loaded CI machine (the worker self-fences at lease - 2 s;
# a kill -9, MASTER_DOWN_S and the new master's start took 6.5 s there, and the worker's reconnect more).
LONG_LEASE = ("--lease", "20", "--heartbeat", "1")
# How long the master stays down in the restart a waiting CLI must sit through (well inside LONG_LEASE).
MASTER_DOWN_S = 4.0


def _start_with_long_lease(cluster: Cluster, slots: int) -> Client:
    cluster.start_master(*LONG_LEASE)
    cluster.start_worker("w", slots=slots)
    cluster.wait_workers("w")
    return cluster.client()


def _restart_master(cluster: Cluster, down_s: float = 0.0) -> Client:
    """kill -9 the master and, ``down_s`` later, start a new one on the same port (the worker reconnects to the
    address it knows)."""
    port = int(cluster.address.rsplit(":", 1)[1])
    cluster.stop_master(signal.SIGKILL)
    time.sleep(down_s)  # the fault's length: how long no master answers
    cluster.start_master(*LONG_LEASE, port=port)
    return cluster.client()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["graceful", "kill-9"])
def test_queued_and_delayed_jobs_survive_a_master_restart(make_cluster: object, sig: int) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    queued = [client.submit(f"{TASKS}:count", args=["3"]) for _ in range(4)]  # no worker yet: they wait READY
    delayed = [client.submit(f"{TASKS}:count", delay="3s") for _ in range(2)]
    wait_for(lambda: all(client.run(first_run_id(j)).state == pb.RUN_SCHEDULED for j in queued), 30,
             "the queued runs to be created")
    cluster.stop_master(sig)
    cluster.start_master()
    # One slot: the jobs take milliseconds each; a second slot would only warm a second driver (a JVM start).
    cluster.start_worker("w", slots=1)
    client = cluster.client()
    for job in queued + delayed:
        run, timed_out = client.wait(first_run_id(job), timeout=120)
        assert not timed_out and run.state == pb.RUN_SUCCEEDED
        assert [a.state for a in run.tasks[0].attempts] == [pb.ATTEMPT_SUCCEEDED]
        assert len(client.runs(job.id)) == 1
    if sig == signal.SIGTERM:  # a graceful stop with a worker connected says nothing alarming about it
        before = len(cluster.master.log())
        cluster.stop_master(signal.SIGTERM)
        stopping = cluster.master.log()[before:]
        assert "master stopped in" in stopping and "recording worker" not in stopping, stopping


def test_running_tasks_keep_their_leases_across_a_master_restart(make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    client = _start_with_long_lease(cluster, slots=2)
    markers = tmp_path / "markers"
    jobs = [client.submit(f"{TASKS}:sleep_python", args=["3", str(markers)]) for _ in range(2)]
    wait_for(lambda: len(list(markers.glob("*.started"))) == 2, 90, "both tasks to start")
    # A CI script's `sparkyard wait` keeps waiting through the restart: the run goes on without a master.
    # So does `sparkyard logs -f`: it follows the log to the attempt's end, all of it once.
    cli = [sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address]
    waiting = subprocess.Popen([*cli, "wait", first_run_id(jobs[0]), "--timeout", "5m"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    followed = f"{first_run_id(jobs[1])}.00000"
    following = subprocess.Popen([*cli, "logs", "-f", followed], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    client = _restart_master(cluster, down_s=MASTER_DOWN_S)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, f"sparkyard wait exited {waiting.returncode}: {out}{err}"
    log, err = following.communicate(timeout=120)
    assert following.returncode == 0, f"sparkyard logs -f exited {following.returncode}: {err}"
    assert f"of task {followed}" in log and "sleeping 3 s" in log, log  # followed to the attempt's end
    for job in jobs:
        run, _ = client.wait(first_run_id(job), timeout=60)
        assert run.state == pb.RUN_SUCCEEDED
        (attempt,) = run.tasks[0].attempts  # the same attempt finished: no re-run, no loss
        assert attempt.state == pb.ATTEMPT_SUCCEEDED and attempt.worker == "w"


def test_a_fixed_delay_job_is_rescheduled_by_a_master_that_did_not_fire_its_run(make_cluster: object,
                                                                                tmp_path: Path) -> None:
    # The new master has no spec of the job in memory when the run ends: it asks Redis whether the job
    # waits for that run (the `awaiting` set) and schedules the next firing.
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    client = _start_with_long_lease(cluster, slots=1)
    markers = tmp_path / "markers"
    job = client.submit(f"{TASKS}:sleep_python", args=["3", str(markers)], every="1s", fixed_delay=True,
                        max_runs=2)
    wait_for(lambda: list(markers.glob("*.started")), 90, "the first run to start")
    client = _restart_master(cluster)

    def two_runs_succeeded() -> bool:
        runs = client.runs(job.id)
        return len(runs) == 2 and all(r.state == pb.RUN_SUCCEEDED for r in runs)

    wait_for(two_runs_succeeded, 90, "the second run, fired after the first one ended")
    first, second = sorted(client.runs(job.id), key=lambda r: r.scheduled_at.ToMilliseconds())
    assert second.scheduled_at.ToMilliseconds() >= first.finished_at.ToMilliseconds() + 1000


LONGER_LEASE = ("--lease", "30", "--heartbeat", "2")  # outlasts a master and a worker restart, on a loaded CI


def _end_a_task_while_no_master_is_up(cluster: Cluster, markers: Path) -> tuple[pb.Job, int]:
    """A 2 s task starts on worker ``w``, the master is killed, the task ends. Returns the job and the
    master's port (to start it again on)."""
    job = cluster.client().submit(f"{TASKS}:sleep_python", args=["2", str(markers)])
    wait_for(lambda: list(markers.glob("*.started")), 90, "the task to start")
    port = int(cluster.address.rsplit(":", 1)[1])
    cluster.stop_master(signal.SIGKILL)
    wait_for(lambda: list(markers.glob("*.done")), 60, "the task to end while no master is up")
    return job, port


def _ran_once(cluster: Cluster, job: pb.Job, markers: Path) -> None:
    run, timed_out = cluster.client().wait(first_run_id(job), timeout=120)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED
    (attempt,) = run.tasks[0].attempts
    assert attempt.state == pb.ATTEMPT_SUCCEEDED and len(list(markers.glob("*.started"))) == 1


def test_a_result_that_ends_while_no_master_is_up_counts_once_one_is_even_if_its_worker_restarts(
        make_cluster: object, tmp_path: Path) -> None:
    """First the worker stays up: it declares the unacknowledged result's lease when it registers again,
    so the master does not requeue the task, and the result it resends is accepted. Then the worker is
    killed too before any master acknowledged the result: restarted with the same id and work dir, it
    reads the result back from its outbox and sends it. Neither task runs twice."""
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master(*LONGER_LEASE)
    cluster.start_worker("w", slots=1)
    cluster.wait_workers("w")
    job, port = _end_a_task_while_no_master_is_up(cluster, tmp_path / "first")
    cluster.start_master(*LONGER_LEASE, port=port)
    _ran_once(cluster, job, tmp_path / "first")

    job, port = _end_a_task_while_no_master_is_up(cluster, tmp_path / "second")
    # The task's own marker comes before the worker has its result: kill -9 only once the result is in the
    # outbox (never acknowledged), or there is nothing to recover.
    outbox = cluster.root / "w" / "outbox.log"
    wait_for(lambda: outbox.exists() and job.id.encode() in outbox.read_bytes(), 60,
             "the result to be in the worker's outbox")
    cluster.kill_worker("w")
    cluster.start_master(*LONGER_LEASE, port=port)
    cluster.start_worker("w", slots=1)
    _ran_once(cluster, job, tmp_path / "second")
    assert "results from before the restart not yet acknowledged" in cluster.workers["w"].log()
