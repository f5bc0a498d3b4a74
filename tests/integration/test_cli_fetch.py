"""A client fetches what it prints (issue #23 item 2): a wait that will call again gets the run without its
tasks, the ended run comes with them, and a submit whose job is not printed whole asks for the fields it uses
(the split's input list does not come back). A master alone and a worker driven by hand: no Spark."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness import EXAMPLES, Cluster, FakeWorker, wait_for
from sparkyard import InvalidArgument, NotFound
from sparkyard.client import build_spec, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

NOOP = f"{EXAMPLES / 'tasks.py'}:noop"


def test_a_wait_that_calls_again_gets_no_tasks_and_the_ended_run_comes_with_them(make_cluster: object) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    run_id = first_run_id(client.submit(NOOP, inputs=["a", "b", "c"]))
    jobs = pbg.JobServiceStub(cluster.channel())

    def wait(once_ended: bool) -> pb.WaitRunResponse:
        request = pb.WaitRunRequest(run_id=run_id, tasks_once_ended=once_ended)
        request.timeout.FromMilliseconds(200)
        return jobs.WaitRun(request, timeout=30)

    def fired() -> bool:
        try:
            return client.run(run_id).task_count == 3
        except NotFound:
            return False

    wait_for(fired, 30, "the run to fire")
    running = wait(True)
    assert running.timed_out and running.run.task_count == 3 and not running.run.tasks
    assert len(wait(False).run.tasks) == 3  # asked for: the run in progress with its tasks

    worker = FakeWorker(cluster.channel(), "fake", slots=3)
    try:
        leased: list[pb.TaskAssignment] = []
        while len(leased) < 3:
            leased += worker.expect("batch").batch.tasks
        for task in leased:
            worker.result(task, task.task_id)
        ended = wait_for(lambda: None if (reply := wait(True)).timed_out else reply, 30, "the run to end")
    finally:
        worker.close()
    assert ended.run.state == pb.RUN_SUCCEEDED
    assert sorted(json.loads(t.result_json) for t in ended.run.tasks) == sorted(t.task_id for t in leased)


def test_a_submit_reply_carries_the_fields_asked_for_and_the_cli_asks_for_what_it_prints(make_cluster: object) -> None:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    client = cluster.client()
    spec = build_spec(NOOP, inputs=[f"part-{i:03d}" for i in range(50)], delay="1h")
    job = client.submit_spec(spec, read_mask=["id", "spec.name"]).job
    stored = client.job(job.id)
    assert job.id == stored.id and job.spec.name == stored.spec.name
    assert not job.spec.split.inputs and not job.HasField("next_fire_at") and len(stored.spec.split.inputs) == 50

    before = len(client.jobs(limit=1000))
    with pytest.raises(InvalidArgument, match="read_mask: spec.nope"):
        client.submit_spec(spec, read_mask=["spec.nope"])
    assert len(client.jobs(limit=1000)) == before  # refused before anything was submitted

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "submit", NOOP, "--input", "x",
                               "--input", "y", "--delay", "1h", "--master", cluster.address, *args],
                              capture_output=True, text=True, timeout=120)

    line = cli()
    assert line.returncode == 0, line.stderr
    made = client.jobs(limit=1)[0]
    assert line.stdout.strip() == f"submitted job {made.id} ({made.spec.name}); next run {first_run_id(made)}"
    whole = cli("--json")
    assert whole.returncode == 0, whole.stderr
    assert [i["value"] for i in json.loads(whole.stdout)["spec"]["split"]["inputs"]] == ["x", "y"]
