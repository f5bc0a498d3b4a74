"""Child jobs (--after JOB[:succeeded|failed|always]) on a real master and workers: a run's end fires the
children it should, down a chain, each with the parent run's scheduled time; a parent with children cannot be
deleted; bad --after values are refused naming the option."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

from harness import EXAMPLES, Cluster, wait_for
from sparkyard import errors
from sparkyard.v1 import sparkyard_pb2 as pb

import pytest

TASKS = EXAMPLES / "tasks.py"
FAR_CRON = "0 3 1 1 *"  # the parent's own schedule never comes up during the test: it runs when triggered


def one_run(client: object, job_id: str) -> pb.Run:
    """The job's first run, once it has one."""
    found: list[pb.Run] = []

    def has_run() -> bool:
        found[:] = client.runs(job_id)  # type: ignore[attr-defined]
        return bool(found)

    wait_for(has_run, 120, f"a run of job {job_id}")
    return found[0]


def test_a_parent_s_run_fires_its_children_down_a_chain_with_the_parent_s_scheduled_time(
        shared_cluster: Cluster) -> None:
    client = shared_cluster.client()
    parent = client.submit(f"{TASKS}:noop", cron=FAR_CRON, name="extract")
    on_success = client.submit(f"{TASKS}:scheduled_at", after=parent.id, name="transform")
    on_failure = client.submit(f"{TASKS}:noop", after=f"{parent.id}:failed", name="alert")
    paused = client.submit(f"{TASKS}:noop", after=f"{parent.id}:always", name="paused")
    client.pause(paused.id)
    grandchild = client.submit(f"{TASKS}:scheduled_at", after=on_success.id, name="load")
    assert on_success.spec.trigger.after.when == pb.AFTER_SUCCEEDED and not on_success.HasField("next_fire_at")

    fired = client.trigger(parent.id)
    ended, _ = client.wait(fired.id, timeout=120)
    assert ended.state == pb.RUN_SUCCEEDED

    child_run = one_run(client, on_success.id)
    assert child_run.after_run == fired.id and child_run.scheduled_at == fired.scheduled_at
    child_ended, _ = client.wait(child_run.id, timeout=120)
    assert child_ended.state == pb.RUN_SUCCEEDED
    assert json.loads(child_ended.result_json) == [fired.scheduled_at.ToDatetime().isoformat() + "+00:00"]
    last = one_run(client, grandchild.id)
    assert last.after_run == child_run.id and last.scheduled_at == fired.scheduled_at
    assert client.wait(last.id, timeout=120)[0].state == pb.RUN_SUCCEEDED
    # Decided at the same run end as the first child's firing, long done by now.
    assert client.runs(on_failure.id) == [] and client.runs(paused.id) == []

    with pytest.raises(errors.FailedPrecondition, match=f"job {parent.id} has child jobs .*{on_success.id}"):
        client.delete(parent.id)
    with pytest.raises(errors.InvalidArgument, match="an update cannot make a job a child job"):
        client.update(on_failure.id, cron=FAR_CRON)
    for job in (grandchild, on_success, on_failure, paused, parent):
        client.delete(job.id)


def test_bad_after_values_are_refused_naming_the_option(shared_cluster: Cluster) -> None:
    cli = [sys.executable, "-m", "sparkyard.cli.main", "--master", shared_cluster.address, "submit", f"{TASKS}:noop"]
    for after, says in (("j19a8c2f3a1b2c3d4e5f65:sometimes", "submit: --after: 'sometimes' is not one of"),
                        ("j19a8c2f3a1b2c3d4e5f65", "submit: --after: job j19a8c2f3a1b2c3d4e5f65 not found"),
                        ("no-job-has-this-name",
                         "submit: --after: 'no-job-has-this-name' is neither a job id nor the name of a job")):
        done = subprocess.run([*cli, "--after", after], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and says in done.stderr, (after, done.returncode, done.stderr)


def test_a_job_s_name_works_wherever_its_id_does(shared_cluster: Cluster) -> None:
    """``--after NAME``, ``trigger NAME``, ``runs NAME``, ``jobs --name NAME``; a shared name is refused."""
    name = f"named-{uuid.uuid4().hex[:8]}"
    cli = [sys.executable, "-m", "sparkyard.cli.main", "--master", shared_cluster.address]

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*cli, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == code, (args, done.returncode, done.stderr)
        return done

    parent = json.loads(run("submit", f"{TASKS}:noop", "--cron", FAR_CRON, "--name", name, "--json").stdout)
    child = json.loads(run("submit", f"{TASKS}:noop", "--after", name, "--name", f"{name}-child", "--json").stdout)
    assert child["spec"]["trigger"]["after"]["job_id"] == parent["id"]
    assert [j["id"] for j in json.loads(run("jobs", "--name", name, "--json").stdout)] == [parent["id"]]
    fired = json.loads(run("trigger", name, "--json").stdout)
    assert fired["id"].startswith(parent["id"])
    assert [r["id"] for r in json.loads(run("runs", name, "--json").stdout)] == [fired["id"]]
    assert run("wait", fired["id"], "--timeout", "120s").returncode == 0
    wait_for(lambda: len(json.loads(run("runs", f"{name}-child", "--json").stdout)) == 1, 120, "the child's run")

    twin = json.loads(run("submit", f"{TASKS}:noop", "--cron", FAR_CRON, "--name", name, "--json").stdout)
    refused = run("pause", name, code=2)
    assert refused.stderr.strip() == (f"sparkyard pause: ambiguous: 2 jobs named '{name}' ({twin['id']}, {parent['id']}); "
                                      "give a job id"), refused.stderr
    for job_id in (twin["id"], child["id"], parent["id"]):
        run("delete", job_id, "--force")
    assert run("jobs", "--name", name, "--json").stdout.strip() == "[]"
