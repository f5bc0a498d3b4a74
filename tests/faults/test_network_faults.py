"""Network faults across hosts: Redis, two masters and two workers, each in a network namespace of its own
(tests/cluster/netcluster.py), cut off with ``ip link set … down`` or partitioned with blackhole routes.

All load runs through the ledger job (``cluster_jobs:ledger``), and every test ends with the ledger
checker (tests/cluster/ledger.py): 0 lost runs, 0 duplicate firings, 0 tasks succeeded twice, 0 attempts
of one task running at once. Each test prints its figures; the bounds asserted are generous (a loaded
2-core machine) — the tight figures are what the prints report (docs/reliability.md).

The cluster is the session's shared ``net_cluster`` (tests/conftest.py): every test leaves it as it found
it — both masters up, both workers ready, every link up.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from pathlib import Path

import pytest

from ledger import check, read
from netcluster import NetCluster, wait_until
from sparkyard.client import Client, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb



@pytest.fixture
def ledger(net: NetCluster, request: pytest.FixtureRequest) -> Path:
    """This test's ledger file, where every host can write it (not in the hidden submit directory)."""
    return net.root / f"ledger-{request.node.name}.jsonl"


# What a worker logs when it leaves a master that has said nothing for a few liveness intervals.
LEFT_SILENT_MASTER = "the master has not answered for"


def running_on(client: Client, run_id: str, worker: str) -> pb.Task | None:
    for task in client.run(run_id).tasks:
        if (task.state == pb.TASK_LEASED and task.worker == worker and task.attempts
                and task.attempts[-1].state == pb.ATTEMPT_RUNNING):
            return task
    return None


def two_tasks_one_held_on_w1(client: Client, net: NetCluster, ledger: Path, held_s: float) -> tuple[pb.Job, pb.Task]:
    """A run of two 0.5 s ledger tasks, one on each worker, w1's working ``held_s``; returns once it runs.

    Once it really runs: its first ledger line written, not only its lease recorded. The master records an
    attempt RUNNING when it leases it, before w1 has the assignment or the job's bundle, and a cut made in
    between kept the task from starting at all (a fresh clone's CI, loaded: "w1's task to end meanwhile")."""
    job = client.submit("cluster_jobs:ledger", args=[str(ledger), "0.5", f"w1={held_s:g}"], parallelism=2,
                        base_dir=net.submit_dir)
    task = wait_until(lambda: running_on(client, first_run_id(job), "w1"), 90, "a task to run on w1",
                      watch=tuple(net.workers.values()))
    wait_until(lambda: any(e.task == task.id and e.worker == "w1" for e in read(ledger)), 90,
               "w1's task to write its first ledger line", watch=tuple(net.workers.values()))
    return job, task


def back_to_normal(net: NetCluster) -> None:
    """Both workers ready again (for the next test)."""
    net.wait_workers("w1", "w2", timeout=120)


@pytest.mark.spark
def test_a_task_that_ends_while_its_worker_is_cut_off_is_delivered_on_reconnect_not_rerun(
        net: NetCluster, client: Client, ledger: Path) -> None:
    job, _ = two_tasks_one_held_on_w1(client, net, ledger, 1.5)
    run_id = first_run_id(job)
    left = net.workers["w1"].log().count(LEFT_SILENT_MASTER)
    net.link_down("w1")
    cut_at = time.monotonic()
    # w1's task ends during the cut, and the cut lasts until w1 has left the silent master (to connect again),
    # not as long as the lease: the link comes back at once then, so w1 has the rest of the lease to return.
    wait_until(lambda: any(e.worker == "w1" and e.ended for e in read(ledger)), 30, "w1's task to end meanwhile")
    wait_until(lambda: net.workers["w1"].log().count(LEFT_SILENT_MASTER) > left, 60, "w1 to leave the silent master")
    net.link_up("w1")
    up_at = time.monotonic()
    run, timed_out = client.wait(run_id, timeout=120)
    delivered = time.monotonic() - up_at
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    assert [len(t.attempts) for t in run.tasks] == [1, 1], run
    found = check(ledger, client, [job.id])
    print(f"w1 cut for {up_at - cut_at:.1f}s (lease {net.lease_s:g}s): its result counted {delivered:.1f}s after the "
          f"link came back; {found.summary()}")
    assert found.reruns == 0
    back_to_normal(net)


@pytest.mark.spark
def test_a_worker_cut_off_past_its_lease_stops_its_attempt_before_the_rerun_starts(
        net: NetCluster, client: Client, ledger: Path) -> None:
    job, held = two_tasks_one_held_on_w1(client, net, ledger, 120)
    run_id = first_run_id(job)
    net.link_down("w1")
    cut_at = time.time()

    def rerun_started() -> bool:
        return any(e.task == held.id and e.worker == "w2" for e in read(ledger))

    wait_until(rerun_started, 10 * net.lease_s, "the task to run again on w2")
    net.link_up("w1")
    run, timed_out = client.wait(run_id, timeout=120)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    task = next(t for t in run.tasks if t.id == held.id)
    assert [(a.worker, a.state) for a in task.attempts] == [("w1", pb.ATTEMPT_LOST), ("w2", pb.ATTEMPT_SUCCEEDED)]
    found = check(ledger, client, [job.id])  # among others: w1's attempt stopped before w2's started
    first, second = (e for e in read(ledger) if e.task == held.id)
    print(f"w1 cut past its lease ({net.lease_s:g}s): its attempt stopped {first.last - cut_at:.1f}s after the cut "
          f"(self-fencing), the re-run on w2 started {second.started - first.last:.1f}s later; "
          f"{found.summary()}")
    assert found.reruns == 1 and not first.ended
    back_to_normal(net)


def other(name: str) -> str:
    return "m2" if name == "master" else "master"


def epoch(net: NetCluster, name: str) -> int:
    with Client(net.master_address(name), token=net.token, timeout=5, **net.tls()) as c:
        return c.status().epoch


def first_firing_after(client: Client, job_id: str, moment: float) -> float:
    """Seconds from ``moment`` (wall clock) to the first firing of the job after it."""
    def fired() -> float | None:
        times = [r.fired_at.ToMilliseconds() / 1000 for r in client.runs(job_id, limit=50)]
        later = [t for t in times if t > moment]
        return min(later) - moment if later else None
    return wait_until(fired, 120, "a firing after the fault")


def workers_moved(net: NetCluster, name: str) -> float:
    """Seconds from master ``name``'s last election to both workers registered with it (from its log)."""
    def stamp(line: str) -> float:
        return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()

    def moved() -> float | None:
        lines = net.masters[name].log().splitlines()
        elected = max((i for i, line in enumerate(lines) if "leading (epoch" in line), default=None)
        if elected is None:
            return None
        joined = {}
        for line in lines[elected:]:
            if (found := re.search(r"worker=(w\d) registered", line)) and found.group(1) not in joined:
                joined[found.group(1)] = stamp(line)
        return max(joined.values()) - stamp(lines[elected]) if len(joined) == 2 else None

    return wait_until(moved, 60, f"both workers to register with {name}")


def steady_load(client: Client, net: NetCluster, ledger: Path) -> pb.Job:
    """A 1 s job (misfire catch-up: a missed second is fired late, never dropped) of 0.2 s tasks."""
    job = client.submit("cluster_jobs:ledger", args=[str(ledger), "0.2"], every="1s", misfire="catch-up",
                        catch_up_limit=1000, base_dir=net.submit_dir)
    wait_until(lambda: len(client.runs(job.id, limit=10)) >= 3, 60, "the 1 s job to fire 3 times")
    return job


def end_load(client: Client, jobs: list[str]) -> None:
    """Pause the recurring job and wait for every run of ``jobs`` to end."""
    client.pause(jobs[0])

    def ended() -> bool:
        return all(r.state not in (pb.RUN_SCHEDULED, pb.RUN_RUNNING) for j in jobs for r in client.runs(j, limit=1000))

    wait_until(ended, 120, "every run to end")


@pytest.mark.spark
def test_masters_partitioned_from_each_other_or_briefly_from_redis_keep_their_leader_and_one_cut_longer_is_replaced(
        net: NetCluster, client: Client, ledger: Path) -> None:
    first = net.leader()
    start_epoch = epoch(net, first)
    job = steady_load(client, net, ledger)

    # Masters talk only through Redis: cut from each other, nothing changes.
    net.partition("master", "m2")
    time.sleep(2 * 3.0)  # two leader leases: a wrong election would happen in this window
    net.heal("master", "m2")
    assert (net.leader(), epoch(net, first)) == (first, start_epoch)

    # The leader cut from Redis for less than its lease (3 s) renews on its return and leads on. Half a
    # second: a renewal lost in the cut is sent again by TCP at +0.2, +0.6, +1.4 and +3.0 s (the master's
    # Redis connection has no socket timeout), so a cut that a loaded machine stretches past 1.4 s would
    # leave the next retry after the lease.
    net.partition(first, "redis")
    time.sleep(0.5)
    net.heal(first, "redis")
    time.sleep(3.0)  # a leader lease: a lapse would show as a new epoch
    assert (net.leader(), epoch(net, first)) == (first, start_epoch)

    # Cut for longer: the other master takes the lease; the cut leader cannot write, steps down, and comes
    # back as a standby when the cut heals.
    net.partition(first, "redis")
    cut_at = time.time()
    second = other(first)
    wait_until(lambda: net.role(second) == "leader", 60, f"{second} to lead")
    led = time.time() - cut_at
    takeover = first_firing_after(client, job.id, cut_at)
    net.heal(first, "redis")
    wait_until(lambda: net.role(first) == "standby", 60, f"{first} to stand by")
    assert epoch(net, second) > start_epoch
    wait_until(lambda: len(client.runs(job.id, limit=1000)) >= 3 + round(time.time() - cut_at), 60,
               "the 1 s job to catch up")
    end_load(client, [job.id])
    found = check(ledger, client, [job.id], period_ms={job.id: 1000})
    print(f"leader cut from Redis: {second} led {led:.1f}s after the cut, first firing after the cut at "
          f"{takeover:.1f}s; {found.summary()}")
    back_to_normal(net)


@pytest.mark.spark
def test_kill_9_and_sigstop_of_the_leader_under_a_1s_job_and_a_split_run(
        net: NetCluster, client: Client, ledger: Path) -> None:
    job = steady_load(client, net, ledger)
    split = client.submit("cluster_jobs:ledger", args=[str(ledger), "2"], parallelism=6, base_dir=net.submit_dir)
    figures = []

    # kill -9 of the leader: the other takes the lapsed lease; the killed one restarts as a standby.
    first = net.leader()
    killed_at = time.time()
    net.kill(first)
    wait_until(lambda: net.role(other(first)) == "leader", 60, f"{other(first)} to lead")
    figures.append(f"kill -9: first firing by the new leader {first_firing_after(client, job.id, killed_at):.1f}s "
                   f"after the kill, both workers with it {workers_moved(net, other(first)):.2f}s after its election")
    net.start_master(name=first)
    wait_until(lambda: net.role(first) == "standby", 60, f"{first} back as a standby")

    # SIGSTOP of the new leader past its lease, then SIGCONT: it wakes fenced and comes back as a standby.
    second = other(first)
    stopped_at = time.time()
    net.freeze(second)
    wait_until(lambda: net.role(first) == "leader", 60, f"{first} to lead again")
    figures.append(f"SIGSTOP: first firing by the new leader {first_firing_after(client, job.id, stopped_at):.1f}s "
                   f"after the pause, both workers with it {workers_moved(net, first):.2f}s after its election")
    net.thaw(second)
    wait_until(lambda: net.role(second) == "standby", 60, f"{second} to stand by after SIGCONT")

    run, timed_out = client.wait(first_run_id(split), timeout=180)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    end_load(client, [job.id, split.id])
    found = check(ledger, client, [job.id, split.id], period_ms={job.id: 1000})
    print(f"{'; '.join(figures)}; {found.summary()}")
    back_to_normal(net)
