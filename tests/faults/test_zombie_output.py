"""Fenced output under a real fault: an attempt paused (SIGSTOP) after writing, whose task is re-run on
another worker, cannot publish over the re-run's output when it wakes (docs/fenced-output.md)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from harness import EXAMPLES, Cluster, wait_for
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

TASKS = EXAMPLES / "tasks.py"


def published(final: Path) -> dict[str, int]:
    (part,) = final.glob("part-*.json")
    return dict(json.loads(part.read_text()))


def test_a_zombie_attempt_woken_after_its_re_run_committed_cannot_publish(make_cluster: object, tmp_path: Path) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    # Session runner: the attempt runs in a warm driver, whose watchdog (worker/driver.py) would stop it a second
    # after it sees its worker stopped — before it commits, on a loaded machine (CI, twice). Here it must try to
    # commit: what stops it is the fencing of its output.
    cluster.start_worker("paused", slots=1, extra=("--driver-frozen-limit", "10m"))
    cluster.wait_workers("paused")
    client = cluster.client()
    shared, final = tmp_path / "shared", tmp_path / "out" / "daily"
    shared.mkdir()
    run_id = first_run_id(client.submit(f"{TASKS}:fenced_write", args=[str(shared), str(final)]))
    staged = wait_for(lambda: (shared / "staged.a1").exists() and (shared / "staged.a1").read_text(), 120,
                      "the first attempt to write its staging directory")
    driver_group = os.getpgid(int(staged))
    cluster.start_worker("rerun", slots=1, runner="submit")  # the re-run: a spark-submit of its own
    cluster.wait_workers("rerun")
    worker = cluster.workers["paused"].process
    os.killpg(driver_group, signal.SIGSTOP)
    worker.send_signal(signal.SIGSTOP)
    try:
        (shared / "go").touch()  # the paused attempt sees it only once it wakes
        run, _ = client.wait(run_id, timeout=180)
        assert run.state == pb.RUN_SUCCEEDED
        first, second = run.tasks[0].attempts
        assert first.worker == "paused" and second.worker == "rerun"
        assert (shared / "outcome.a2").read_text() == (
            f"committed; read back token {second.fencing_token}\nagain: ctx.commit() was already called for this attempt")
        assert published(final) == {"token": second.fencing_token, "attempt": 2}

        # The zombie wakes (the attempt's own process: its JVM and the rest of its group stay frozen until the end,
        # since refusing the commit needs no Spark); its worker stays paused.
        os.kill(int(staged), signal.SIGCONT)
        outcome = wait_for(lambda: (shared / "outcome.a1").exists() and (shared / "outcome.a1").read_text(), 60,
                           "the woken attempt to try to commit")
        assert outcome.startswith(f"refused: {final}: not published: fencing token {first.fencing_token} is stale; "
                                  f"attempt 2 of task {run.tasks[0].id} (token {second.fencing_token}) "
                                  "has published it"), outcome
        assert "\nagain: " in outcome and outcome.count("is stale") == 2
        assert published(final) == {"token": second.fencing_token, "attempt": 2}
    finally:
        os.killpg(driver_group, signal.SIGCONT)
        worker.send_signal(signal.SIGCONT)

    # The master, asked directly (as a worker's fence desk asks it), says the first token is stale.
    stub = pbg.WorkerServiceStub(cluster.channel())
    stale = stub.CheckFence(pb.CheckFenceRequest(task_id=run.tasks[0].id, fencing_token=first.fencing_token))
    assert not stale.current and f"is at token {second.fencing_token}" in stale.reason
    ended = stub.CheckFence(pb.CheckFenceRequest(task_id=run.tasks[0].id, fencing_token=second.fencing_token))
    assert not ended.current and "SUCCEEDED" in ended.reason
    assert published(final) == {"token": second.fencing_token, "attempt": 2}
