"""Fixtures of the fault tests that run on the session's shared multi-host cluster (``net_cluster``,
tests/conftest.py): test_network_faults.py and test_pipeline_faults.py."""

from __future__ import annotations

from typing import Iterator

import pytest

from netcluster import NetCluster
from sparkyard.client import Client


@pytest.fixture
def net(net_cluster: NetCluster) -> Iterator[NetCluster]:
    """The shared cluster, put back whole after the test whatever it left: every fault undone (processes
    continued, links up, routes open), a dead master or worker started again, every worker ready, and no
    recurring job of the test left firing on the workers the next tests use. A test that fails mid-fault
    would otherwise hand the next ones a broken cluster: on a fresh clone's CI one test failed with w1 cut
    off, and the four tests after it on the same cluster failed with it."""
    yield net_cluster
    net_cluster.network.heal_all()
    for name, proc in list(net_cluster.masters.items()):
        if not proc.alive():
            net_cluster.start_master(name=name)
    for worker_id, proc in list(net_cluster.workers.items()):
        if not proc.alive():
            net_cluster.start_worker(worker_id)
    net_cluster.wait_workers(*net_cluster.workers, timeout=180)
    with net_cluster.failover_client() as c:
        for job in c.jobs(state="active"):
            if job.spec.trigger.WhichOneof("kind") in ("every", "cron"):
                c.pause(job.id)


@pytest.fixture
def client(net: NetCluster) -> Iterator[Client]:
    """A client given both masters, following whichever leads (NetCluster.failover_client)."""
    c = net.failover_client()
    yield c
    c.close()
