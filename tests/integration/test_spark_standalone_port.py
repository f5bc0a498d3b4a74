"""A worker's Spark engine (issue 25 item 5): deploy/spark-standalone.sh --port keeps a cluster's spark:// URL
across a stop and start; a Sparkyard worker on that cluster says ``degraded`` (naming the Spark master) and
hands back the task it held while the cluster is stopped, instead of hanging in a driver that keeps asking a
gone cluster manager for executors; it is ``ready`` again, with a fresh driver registered with the restarted
master, once the cluster is back, and the task then runs there. A bad port is refused in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Callable

from harness import EXAMPLES, ROOT, Cluster, free_port, wait_for
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

SCRIPT = ROOT / "deploy" / "spark-standalone.sh"
TASKS = EXAMPLES / "tasks.py"


def _run(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--data-dir", str(data), *args], capture_output=True, text=True,
                          timeout=180)


def _start(data: Path, port: int) -> str:
    """A Spark master alone on ``port`` (no executor is needed); its URL as the script wrote it."""
    started = _run(data, "--workers", "0", "--port", str(port), "start")
    assert started.returncode == 0, started.stderr
    return (data / "run" / "master.url").read_text().strip()


def test_a_worker_is_degraded_while_its_spark_cluster_is_stopped(make_cluster: Callable[..., Cluster],
                                                                  tmp_path: Path) -> None:
    port, data, gate = free_port(), tmp_path / "spark", tmp_path / "gate"
    try:
        url = _start(data, port)
        assert url == f"spark://127.0.0.1:{port}"
        cluster = make_cluster()
        cluster.start_master()
        cluster.start_worker("eng", slots=1, extra=("--spark-master", url))
        cluster.wait_workers("eng")
        client = cluster.client()
        # Its Spark job waits for an executor the cluster (a master without workers) never gives.
        run_id = first_run_id(client.submit(f"{TASKS}:gated_spark_job", args=[str(gate)]))
        wait_for(lambda: [a.state for a in client.run(run_id).tasks[0].attempts] == [pb.ATTEMPT_RUNNING], 60,
                 "the task to start")

        assert _run(data, "stop").returncode == 0
        worker = wait_for(lambda: next((w for w in client.workers() if w.id == "eng"
                                        and w.readiness == pb.READINESS_DEGRADED), None), 60, "the worker degraded")
        assert worker.readiness_reason.startswith(f"Spark master {url} unreachable ("), worker.readiness_reason
        assert worker.ready_slots == 0
        task = wait_for(lambda: (t := client.run(run_id).tasks[0]).attempts and t.attempts[0].state
                        == pb.ATTEMPT_RELEASED and t, 60, "the held task to be handed back")
        assert f"handed back: Spark master {url} unreachable" in task.attempts[0].error
        assert task.state == pb.TASK_READY  # waits for a worker that can run it; no attempt used up

        gate.touch()
        assert _start(data, port) == url  # the same URL: the worker's --spark-master is right again
        cluster.wait_workers("eng", timeout=120)
        run, timed_out = client.wait(run_id, timeout=180)
        assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
        assert [a.state for a in run.tasks[0].attempts] == [pb.ATTEMPT_RELEASED, pb.ATTEMPT_SUCCEEDED]
        assert "Traceback" not in cluster.workers["eng"].log()
    finally:
        _run(data, "stop")


def test_a_bad_port_is_refused_in_one_line(tmp_path: Path) -> None:
    done = _run(tmp_path, "--port", "70000", "start")
    assert done.returncode == 2
    assert done.stderr.strip() == "spark-standalone: --port '70000' is not a port number (0-65535)"
