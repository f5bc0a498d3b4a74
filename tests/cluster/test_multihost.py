"""Redis, a master and two workers as separate hosts (network namespaces; each worker also in a mount
namespace that hides the client's submit directory): a split run spreads over both workers, and a worker
cut off the network for longer than the lease has its task run again on the other one."""

from __future__ import annotations

import time

import pytest
import redis

from netcluster import MASTER_PORT, REDIS_PORT, NetCluster, results, wait_until
from netns import netem_unavailable_reason
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb


@pytest.mark.spark
def test_worker_hosts_run_a_split_job_and_a_cut_off_worker_s_task_reruns_on_the_other(
        net_cluster: NetCluster) -> None:
    cluster = net_cluster
    client = cluster.client()
    # The hosts are separate: addresses on the test network, the master refusing calls without the token.
    assert cluster.address == f"{cluster.host('master').address}:{MASTER_PORT}"
    assert cluster.redis_address == f"{cluster.host('redis').address}:{REDIS_PORT}"
    assert {w.id for w in client.workers() if w.alive} == {"w1", "w2"}
    status = cluster.cli("status")
    assert status.returncode == 0, status.stderr
    no_token = cluster.cli("status", env={"SPARKYARD_TOKEN": ""})
    assert no_token.returncode != 0 and "missing token" in no_token.stderr, no_token.stderr

    # A file of the client's submit directory does not exist for a worker.
    secret = cluster.submit_dir / "secret.txt"
    secret.write_text("client only\n")
    job = client.submit("cluster_jobs:path_exists", args=[str(secret)], base_dir=cluster.submit_dir,
                        parallelism=2)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run
    assert [r["exists"] for r in results(run)] == [False, False]

    # A split run: 4 tasks over the two one-slot workers, both take part.
    job = client.submit("cluster_jobs:whoami", parallelism=4, base_dir=cluster.submit_dir)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run
    assert run.task_count == 4
    assert sorted(r["task"] for r in results(run)) == [0, 1, 2, 3]
    assert {r["worker"] for r in results(run)} == {"w1", "w2"}

    # w1 holds its task; cut w1 off for longer than the lease: the task runs again on w2.
    job = client.submit("cluster_jobs:hold_on", args=["w1", "600"], parallelism=2, base_dir=cluster.submit_dir)
    run_id = first_run_id(job)

    def held_on_w1() -> pb.Task | None:
        for task in client.run(run_id).tasks:
            if (task.state == pb.TASK_LEASED and task.worker == "w1" and task.attempts
                    and task.attempts[-1].state == pb.ATTEMPT_RUNNING):
                return task
        return None

    held: pb.Task = wait_until(held_on_w1, 90, "a task to run on w1", watch=tuple(cluster.workers.values()))
    cut_at = time.monotonic()
    cluster.link_down("w1")
    run, timed_out = client.wait(run_id, timeout=120)
    elapsed = time.monotonic() - cut_at
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    task = next(t for t in run.tasks if t.id == held.id)
    assert [(a.worker, a.state) for a in task.attempts] == [("w1", pb.ATTEMPT_LOST), ("w2", pb.ATTEMPT_SUCCEEDED)]
    assert task.attempts[1].fencing_token > task.attempts[0].fencing_token
    assert {r["worker"] for r in results(run)} == {"w2"}
    # The re-run waits for the lease to expire: typically ~5 s; the bound is 10x for a loaded machine.
    print(f"re-run on w2 finished {elapsed:.1f}s after the cut (lease {cluster.lease_s:g}s)")
    assert elapsed < 10 * (cluster.lease_s + 2), f"recovery took {elapsed:.1f}s"
    assert cluster.workers["w1"].alive()  # w1 itself only lost its network

    # Back on the network, w1 serves again.
    cluster.link_up("w1")
    up_at = time.monotonic()
    cluster.wait_workers("w1", timeout=120)
    print(f"w1 ready again {time.monotonic() - up_at:.1f}s after its link came back")
    job = client.submit("cluster_jobs:whoami", parallelism=2, base_dir=cluster.submit_dir)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run


def test_netem_delays_the_traffic_to_a_host(make_net_cluster: object) -> None:
    """The harness's `tc netem` control, on the Redis host alone (no Spark)."""
    reason = netem_unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster: NetCluster = make_net_cluster(start=False)  # type: ignore[operator]
    cluster.start_redis()
    host = cluster.host("redis").address
    r = redis.Redis(host=host, port=REDIS_PORT, socket_timeout=10)

    def round_trip() -> float:
        started = time.monotonic()
        r.ping()
        return time.monotonic() - started

    before = min(round_trip() for _ in range(5))
    cluster.netem("redis", "delay", "100ms")
    delayed = min(round_trip() for _ in range(5))
    cluster.clear_netem("redis")
    after = min(round_trip() for _ in range(5))
    r.close()
    assert delayed >= 0.19 > before and after < 0.19, (before, delayed, after)
