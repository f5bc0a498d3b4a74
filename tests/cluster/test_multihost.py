"""Redis, masters and two workers as separate hosts (network namespaces; each worker also in a mount
namespace that hides the client's submit directory): a split run spreads over both workers. What happens
when a host is cut off is the fault suite's (tests/faults/test_network_faults.py)."""

from __future__ import annotations

import time

import pytest
import redis

from harness import wait_for
from netcluster import MASTER_PORT, REDIS_PORT, NetCluster, results
from netns import netem_unavailable_reason
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb


@pytest.mark.spark
def test_worker_hosts_run_a_split_job_without_the_client_s_files(net_cluster: NetCluster) -> None:
    cluster = net_cluster
    client = cluster.client()
    # The hosts are separate: addresses on the test network; the master serves mutual TLS and refuses calls
    # without the token, in plaintext, or with the workers' token for anything but a worker's calls.
    assert cluster.address == f"{cluster.host('master').address}:{MASTER_PORT}"
    assert cluster.redis_address == f"{cluster.host('redis').address}:{REDIS_PORT}"
    assert {w.id for w in client.workers() if w.alive} == {"w1", "w2"}
    status = cluster.cli("status")
    assert status.returncode == 0, status.stderr
    no_token = cluster.cli("status", env={"SPARKYARD_TOKEN": ""})
    assert no_token.returncode != 0 and "missing token" in no_token.stderr, no_token.stderr
    plaintext = cluster.cli("status", env={"SPARKYARD_TLS_CA": "", "SPARKYARD_TLS_CERT": "", "SPARKYARD_TLS_KEY": ""})
    assert plaintext.returncode == 69 and "give --tls-ca" in plaintext.stderr, plaintext.stderr  # no master reached
    as_worker = cluster.cli("jobs", env={"SPARKYARD_TOKEN": cluster.worker_token})
    assert as_worker.returncode == 1, as_worker.stderr
    assert "ListJobs needs the admin or viewer role; this token has the worker role" in as_worker.stderr

    # A file of the client's submit directory does not exist for a worker.
    secret = cluster.submit_dir / "secret.txt"
    secret.write_text("client only\n")
    job = client.submit("cluster_jobs:path_exists", args=[str(secret)], base_dir=cluster.submit_dir,
                        parallelism=2)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run
    assert [r["exists"] for r in results(run)] == [False, False]

    # A split run: 4 tasks over the two one-slot workers, both take part. The cluster is shared with the
    # fault tests, whose failovers leave a worker reconnecting for a while: the run starts once both are
    # registered, ready and idle (a worker the master does not see yet takes no part; under load one was
    # still away when the first tasks went out, and its peer ran all four).
    def both_idle() -> bool:
        ready = [w for w in client.workers() if w.alive and w.readiness == pb.READINESS_READY and w.free_slots >= 1]
        return {w.id for w in ready} == {"w1", "w2"}

    wait_for(both_idle, 120, "both workers registered, ready and idle")
    job = client.submit("cluster_jobs:whoami", parallelism=4, base_dir=cluster.submit_dir)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run
    assert run.task_count == 4
    assert sorted(r["task"] for r in results(run)) == [0, 1, 2, 3]
    assert {r["worker"] for r in results(run)} == {"w1", "w2"}


def test_netem_delays_the_traffic_to_a_host(net_cluster: NetCluster) -> None:
    """The harness's `tc netem` control, on the Redis host."""
    reason = netem_unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = net_cluster
    host = cluster.host("redis").address
    r = redis.Redis(host=host, port=REDIS_PORT, socket_timeout=10)

    def round_trip() -> float:
        started = time.monotonic()
        r.ping()
        return time.monotonic() - started

    before = min(round_trip() for _ in range(5))
    cluster.netem("redis", "delay", "100ms")
    try:
        delayed = min(round_trip() for _ in range(5))
    finally:
        cluster.clear_netem("redis")  # the cluster is shared
    after = min(round_trip() for _ in range(5))
    r.close()
    assert delayed >= 0.19 > before and after < 0.19, (before, delayed, after)
