"""sparkyard update / Client.update / UpdateJob against a real master on a real Redis (no workers: runs
are made, not run). What changes, when it takes effect, what history is kept, and bad input."""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest

from harness import EXAMPLES, Cluster, wait_for
from sparkyard import Client, FailedPrecondition, InvalidArgument
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

TASKS = EXAMPLES / "tasks.py"


@pytest.fixture
def master(make_cluster: object) -> Cluster:
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.start_master()
    return cluster


def test_a_fire_time_already_in_the_timing_wheel_does_not_fire_after_the_schedule_moved(master: Cluster) -> None:
    client = master.client()
    due = time.time() + 6  # the two submits and the update come before it, on a loaded machine too
    moved = client.submit(f"{TASKS}:count", every="1h", start_at=due)
    control = client.submit(f"{TASKS}:count", every="1h", start_at=due)  # due at the same moment, not updated
    assert moved.next_fire_at.ToMilliseconds() == control.next_fire_at.ToMilliseconds() == int(due * 1000)
    # Both are within the preloader's horizon (60 s): their timers are in the wheel already.
    updated = client.update(moved.id, every="1h", start_at=time.time() + 3600)
    assert updated.spec_version == 2 and updated.next_fire_at.ToMilliseconds() > (time.time() + 3500) * 1000
    wait_for(lambda: client.runs(control.id), 60, "the control job's run at the old fire time")
    assert client.runs(moved.id) == [] and client.job(moved.id).runs == 0


def test_runs_made_before_an_update_keep_their_spec_and_later_ones_take_the_new(master: Cluster) -> None:
    client = master.client()
    job = client.submit(f"{TASKS}:count", every="1h", args=["a"], retries=1, priority=3, start_at=time.time() + 600)
    before = client.trigger(job.id)
    updated = client.update(job.id, args=["b", "c"], retries=4)
    assert list(updated.spec.args) == ["b", "c"] and updated.spec.retry.max_attempts == 5
    assert updated.spec.priority == 3 and updated.spec.trigger.every.interval.seconds == 3600  # not given: kept
    assert updated.spec_version == 2 and updated.spec_updated_at.ToMilliseconds() > 0
    assert updated.next_fire_at == job.next_fire_at  # the schedule was not among the changes
    after = client.trigger(job.id)
    assert (client.run(before.id).spec_version, client.run(after.id).spec_version) == (1, 2)


def test_an_ended_job_cannot_be_updated_and_bad_values_name_the_option(master: Cluster) -> None:
    client = master.client()
    job = client.submit(f"{TASKS}:count", every="1h")
    with pytest.raises(InvalidArgument, match="trigger.cron"):
        client.update(job.id, cron="not a cron")
    with pytest.raises(InvalidArgument, match="priority"):
        client.update(job.id, priority=5000)
    with pytest.raises(InvalidArgument, match="entrypoint"):
        client.update(job.id, py_files=["x.py"])
    assert client.job(job.id).spec_version == 1  # nothing refused was stored
    client.cancel(job.id)
    with pytest.raises(FailedPrecondition, match="CANCELLED"):
        client.update(job.id, priority=1)


def test_update_job_refuses_unknown_or_missing_fields_by_name(master: Cluster) -> None:
    job = master.client().submit(f"{TASKS}:count", every="1h")
    with grpc.insecure_channel(master.address) as channel:
        stub = pbg.JobServiceStub(channel)
        for fields, named in ((["entrypoint"], "fields: cannot change entrypoint"), ([], "fields")):
            with pytest.raises(grpc.RpcError) as caught:
                stub.UpdateJob(pb.UpdateJobRequest(job_id=job.id, fields=fields))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and named in (caught.value.details() or "")


def test_the_cli_updates_only_the_options_given(master: Cluster) -> None:
    client = master.client()
    job = client.submit(f"{TASKS}:count", every="1h", conf={"spark.x": "1"}, priority=2)
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", master.address, "update", job.id,
                           "--conf", "spark.y=2", "--max-runs", "3"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    spec = client.job(job.id).spec
    assert dict(spec.conf) == {"spark.y": "2"} and spec.trigger.max_runs == 3 and spec.priority == 2
    bad = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", master.address, "update", job.id,
                          "--every", "soon"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "every" in bad.stderr


def test_a_client_that_updates_a_job_it_never_submitted_gets_the_same(master: Cluster) -> None:
    with Client(master.address) as other:
        job = master.client().submit(f"{TASKS}:count", every="1h")
        assert other.update(job.id, name="renamed").spec.name == "renamed"


def test_an_update_repeated_after_a_lost_reply_changes_nothing_more(master: Cluster) -> None:
    client = master.client()
    job = client.submit(f"{TASKS}:count", every="1h", start_at=time.time() + 600)
    first = client.update(job.id, every="2h", start_at=time.time() + 900, args=["x"])
    again = client.update(job.id, every="2h", start_at=first.spec.trigger.start_at.ToMilliseconds() / 1000, args=["x"])
    assert first.spec_version == again.spec_version == 2 and again.next_fire_at == first.next_fire_at
    assert client.job(job.id).spec_version == 2
