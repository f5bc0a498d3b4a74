"""A pipeline under faults on the multi-host network (tests/cluster/netcluster.py): runs of a 6-step pipeline
with fan-out and fan-in, triggered one after another while the leader is `kill -9`'d (twice) and a worker is
`kill -9`'d (once) at random moments (a seeded schedule). Every step of every run must run to its end exactly
once: each pipeline run SUCCEEDED with each of its steps made once, and the ledger (what really ran, written
by the tasks themselves) shows no task succeeded twice, none lost, no two executions of a task at once.

The step releases are made in the Lua script that ends the upstream step's run, so nothing of this depends
on which master leads or whether it lived; this test is the proof of it (issue #24, point 4)."""

from __future__ import annotations

import random
import time
from typing import Callable, Iterator, TypeVar

import pytest

from ledger import check
from netcluster import NetCluster, wait_until
from sparkyard import errors
from sparkyard.client import Client
from sparkyard.pipeline import Pipeline
from sparkyard.v1 import sparkyard_pb2 as pb

SEED = 24
RUNS = 20
T = TypeVar("T")





def retried(call: Callable[[], T], what: str) -> T:
    """A call made while a master may be changing: retried until it is answered (within 90 s)."""
    def attempt() -> T | None:
        try:
            return call()
        except errors.Unavailable:
            return None
    return wait_until(attempt, 90, what)


def kill_the_leader(net: NetCluster) -> None:
    first = net.leader()
    net.kill(first)
    other = "m2" if first == "master" else "master"
    wait_until(lambda: net.role(other) == "leader", 60, f"{other} to lead")
    net.start_master(name=first)
    wait_until(lambda: net.role(first) == "standby", 60, f"{first} back as a standby")


def kill_a_worker(net: NetCluster, worker: str) -> None:
    net.kill(worker)
    net.start_worker(worker)
    net.wait_workers("w1", "w2", timeout=180)


@pytest.mark.spark
def test_a_pipeline_loses_no_step_and_runs_none_twice_when_the_leader_and_a_worker_are_killed(
        net: NetCluster, client: Client) -> None:
    ledger = net.root / "ledger-pipeline.jsonl"
    rng = random.Random(SEED)
    p = Pipeline("faulted-etl", base_dir=net.submit_dir)

    def step(name: str, after: list) -> object:
        return p.step(name, "cluster_jobs:ledger", args=[str(ledger), "0.2"], after=after)

    extract = step("extract", [])
    parts = [step(f"part{i}", [extract]) for i in range(3)]
    join = step("join", parts)
    step("publish", [join])
    spec = p.to_spec()
    job = client.submit_spec(spec).job
    step_jobs = [s.job_id for s in job.spec.steps]

    faults = dict(zip(sorted(rng.sample(range(1, RUNS - 1), 3)), ["leader", "worker", "leader"]))
    runs: list[str] = []
    for i in range(RUNS):
        runs.append(retried(lambda: client.trigger(job.id), "a trigger").id)
        fault = faults.get(i)
        if fault:
            time.sleep(rng.uniform(0.0, 1.5))  # a random moment in the runs in flight (the seed replays it)
            if fault == "leader":
                kill_the_leader(net)
            else:
                kill_a_worker(net, rng.choice(["w1", "w2"]))

    for run_id in runs:
        run, timed_out = retried(lambda: client.wait(run_id, timeout=240), f"run {run_id} to end")
        assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
        assert [s.state for s in run.steps] == [pb.STEP_SUCCEEDED] * 6, run
    # Each step job has exactly one run per pipeline run (its run id is the pipeline run's time).
    made = sorted(r.pipeline_run for j in step_jobs for r in client.runs(j, limit=1000))
    assert made == sorted(runs * 6)
    found = check(ledger, client, step_jobs)
    print(f"{len(runs)} pipeline runs of 6 steps under {', '.join(faults.values())} kill -9: {found.summary()}")
    client.delete(job.id)
