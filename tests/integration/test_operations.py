"""Running Sparkyard as an operator would: tokens, the embedded local cluster, draining, logs."""

from __future__ import annotations

import json
import os
import select
import socket
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from harness import EXAMPLES, Cluster, free_port, wait_for, worker_jvm_env
from sparkyard import Client, Unauthenticated
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"


def test_with_a_token_every_call_must_carry_it(make_cluster: object) -> None:
    cluster: Cluster = make_cluster(token="s3cret")  # type: ignore[operator]
    cluster.start_master("--token", "s3cret")
    cluster.start_worker("w", slots=1)  # gets SPARKYARD_TOKEN from the cluster's environment
    cluster.wait_workers("w")
    with Client(cluster.address, token="wrong") as wrong, pytest.raises(Unauthenticated, match="wrong token"):
        wrong.jobs()
    env = {k: v for k, v in os.environ.items() if k != "SPARKYARD_TOKEN"}
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address, "jobs"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 1 and "missing token" in done.stderr
    client = cluster.client()
    run, _ = client.wait(first_run_id(client.submit(f"{TASKS}:count")), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED
    with cluster.channel() as channel:  # health stays open for probes
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_master_and_worker_refuse_public_metrics_without_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPARKYARD_TOKEN"}
    master = subprocess.run([sys.executable, "-m", "sparkyard.master.main", "--http", f"0.0.0.0:{free_port()}",
                             "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)
    assert master.returncode == 2 and "refusing to serve http on 0.0.0.0" in master.stderr
    assert not (tmp_path / "redis").exists()
    worker = subprocess.run([sys.executable, "-m", "sparkyard.worker.main", "--metrics", f"0.0.0.0:{free_port()}",
                             "--work-dir", str(tmp_path / "w")], capture_output=True, text=True, timeout=60, env=env)
    assert worker.returncode == 2 and "refusing to serve /metrics on 0.0.0.0" in worker.stderr


def test_local_cluster_runs_jobs_on_its_embedded_redis_survives_a_worker_crash_and_stops_everything(
        tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    data = tmp_path / "local"
    local = subprocess.Popen([sys.executable, "-m", "sparkyard.cli.main", "local", "--workers", "1", "--slots", "1",
                              "--listen", address, "--data-dir", str(data), "--json"],
                             stdout=subprocess.PIPE, text=True, env={**os.environ, **worker_jvm_env()})
    try:
        assert local.stdout is not None
        info = json.loads(local.stdout.readline())  # one line: its stdout is a pipe
        assert info["master"] == address
        done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", address, "submit",
                               f"{TASKS}:count", "--wait", "--json"], capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["state"] == "SUCCEEDED"
        assert (data / "redis" / "appendonlydir").exists() or list((data / "redis").glob("*.aof*"))
        redis_pids = [int(p) for p in subprocess.run(["pgrep", "-f", str(data / "redis")], capture_output=True,
                                                       text=True).stdout.split()]
        assert redis_pids, "the embedded redis-server is running"
        # kill -9 the worker mid-task: the cluster starts it again and the task still succeeds, once.
        markers = tmp_path / "markers"
        with Client(address) as client:
            job = client.submit(f"{TASKS}:sleep_python", args=["3", str(markers)])
            wait_for(lambda: list(markers.glob("*.started")), 60, "the task to start")
            (worker,) = client.workers()
            os.kill(worker.pid, signal.SIGKILL)
            run, timed_out = client.wait(first_run_id(job), timeout=120)
            assert not timed_out and run.state == pb.RUN_SUCCEEDED
            assert [a.state for a in run.tasks[0].attempts] == [pb.ATTEMPT_LOST, pb.ATTEMPT_SUCCEEDED]
            restarted = next(w for w in client.workers() if w.alive)
            assert restarted.id == worker.id and restarted.pid != worker.pid
            info["pids"].append(restarted.pid)
    finally:
        local.send_signal(signal.SIGTERM)
        local.wait(timeout=120)
    for pid in [*info["pids"], *redis_pids]:
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
                 30, f"process {pid} to exit")


def test_draining_worker_finishes_short_tasks_and_hands_back_long_ones(make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    client = cluster.start_with_worker("leaving", 2)
    markers = tmp_path / "markers"
    short = client.submit(f"{TASKS}:sleep_python", args=["2", str(markers)])
    long = client.submit(f"{TASKS}:sleep_python", args=["120", str(markers)])
    wait_for(lambda: len(list(markers.glob("*.started"))) == 2, 90, "both tasks to start")
    cluster.kill_worker("leaving", signal.SIGTERM)  # drain timeout is 5 s in tests
    short_run, _ = client.wait(first_run_id(short), timeout=60)
    assert short_run.state == pb.RUN_SUCCEEDED
    assert [a.state for a in short_run.tasks[0].attempts] == [pb.ATTEMPT_SUCCEEDED]
    wait_for(lambda: client.run(first_run_id(long)).tasks[0].state == pb.TASK_READY, 60,
             "the long task to be handed back")
    assert cluster.workers["leaving"].process.wait(timeout=60) == 0
    task = client.run(first_run_id(long)).tasks[0]
    assert [a.state for a in task.attempts] == [pb.ATTEMPT_RELEASED]
    client.cancel(long.id)


def test_logs_follow_streams_a_running_attempt_until_it_ends(shared_cluster: Cluster, tmp_path: Path) -> None:
    client = shared_cluster.client()
    job = client.submit(f"{TASKS}:sleep_python", args=["2", str(tmp_path / "m")])
    run_id = first_run_id(job)
    wait_for(lambda: client.run(run_id).tasks[0].attempts, 60, "the attempt to start")
    task_id = client.run(run_id).tasks[0].id
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", shared_cluster.address, "logs",
                           task_id, "-f"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"attempt 1 of task {task_id}" in done.stdout and "sleeping 2 s" in done.stdout
    assert client.run(run_id).state == pb.RUN_SUCCEEDED  # -f returned because the attempt ended


def test_logs_follow_goes_on_into_the_retry_of_a_failed_attempt_until_the_task_ends(shared_cluster: Cluster,
                                                                                        tmp_path: Path) -> None:
    client = shared_cluster.client()
    gate = tmp_path / "fail-now"
    job = client.submit(f"{TASKS}:fail_first_when", args=[str(gate)], retries=1, backoff="1s")
    run_id = first_run_id(job)
    wait_for(lambda: client.run(run_id).tasks[0].attempts, 60, "the first attempt to start")
    task_id = client.run(run_id).tasks[0].id
    logs = [sys.executable, "-m", "sparkyard.cli.main", "--master", shared_cluster.address, "logs", task_id]
    # Attempt 1 fails only once the follow is under way: a follow that starts after the retry ran shows the
    # latest attempt's log, as `logs TASK` does (a loaded machine once took longer than the 1 s backoff to start it).
    follow = subprocess.Popen([*logs, "-f"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        assert select.select([follow.stdout], [], [], 120)[0], "logs -f printed nothing in 120 s"
        head = follow.stdout.readline()  # the first line of attempt 1's log: the follow has begun
        gate.touch()
        rest, errors = follow.communicate(timeout=120)
    finally:
        gate.touch()  # also when the follow failed: attempt 1 must not hold a slot of the shared cluster
        follow.kill()
    out = head + rest
    assert follow.returncode == 0, errors
    assert f"attempt 1 of task {task_id}" in head, out
    first, second = out.index(f"attempt 1 of task {task_id}"), out.index(f"attempt 2 of task {task_id}")
    assert first < out.index("planned failure on attempt 1") < second, out
    assert client.run(run_id).state == pb.RUN_SUCCEEDED  # -f returned because the task ended
    one = subprocess.run([*logs, "--attempt", "1", "-f"], capture_output=True, text=True, timeout=60)
    assert one.returncode == 0 and "planned failure on attempt 1" in one.stdout, one.stderr
    assert f"attempt 2 of task {task_id}" not in one.stdout  # --attempt N: that attempt's log alone


def test_a_result_over_the_size_limit_fails_the_attempt_clearly(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    run, _ = client.wait(first_run_id(client.submit(f"{TASKS}:big_result")), timeout=120)
    assert run.state == pb.RUN_FAILED
    assert "over the 1048576-byte limit" in run.tasks[0].attempts[0].error


def test_wait_shows_a_bar_of_tasks_done_on_a_terminal_and_nothing_extra_with_json(shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    job = client.submit(f"{TASKS}:sleep_python", args=["1.5"], inputs=["a", "b", "c"])
    run_id = first_run_id(job)
    cli = [sys.executable, "-m", "sparkyard.cli.main", "--master", shared_cluster.address, "wait", run_id]
    # FORCE_COLOR makes rich treat stderr as a terminal, as it is when a person runs the command.
    terminal = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "160"}
    shown = subprocess.run(cli, capture_output=True, text=True, timeout=120, env=terminal)
    assert shown.returncode == 0, shown.stderr
    assert f"{run_id} SUCCEEDED" in shown.stderr and "3/3" in shown.stderr  # the bar, on stderr
    assert "SUCCEEDED" in shown.stdout  # the run itself, on stdout as before
    as_json = subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=120, env=terminal)
    assert as_json.returncode == 0 and as_json.stderr == ""
    assert json.loads(as_json.stdout)["state"] == "SUCCEEDED"


def test_a_second_master_on_a_taken_port_refuses_to_start_naming_the_address(make_cluster: object) -> None:
    first: Cluster = make_cluster()  # type: ignore[operator]
    address = first.start_master()
    second: Cluster = make_cluster()  # type: ignore[operator]
    proc = second.spawn_master(port=int(address.rpartition(":")[2]))
    assert proc.wait(timeout=60) != 0
    assert first.master is not None
    said = f"cannot listen on 127.0.0.1:{address.rpartition(':')[2]}: address in use by pid {first.master.pid} ("
    assert said in (second.root / "master.log").read_text()
    assert first.client().status().role == "leader"  # the first master still serves alone


def test_a_master_whose_http_address_is_taken_exits_2_naming_it(make_cluster: object) -> None:
    """The console's port is bound as the master starts (before it takes the lease): its start-up error must end
    the process (its background loops once kept it alive, and `sparkyard local --http` on a taken port hung)."""
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = cluster.spawn_master("--http", f"127.0.0.1:{port}")
        assert proc.wait(timeout=60) == 2
    said = [line for line in (cluster.root / "master.log").read_text().splitlines() if "cannot serve" in line]
    assert len(said) == 1 and said[0].startswith(f"sparkyard-master: cannot serve http on 127.0.0.1:{port}: ")
    assert f"address already in use by pid {os.getpid()} (" in said[0]
