"""Two masters on one Redis (loopback): the standby takes over when the leader is paused or stopped, a
paused leader that wakes up is fenced and comes back as a standby (the same process), and two masters
started at the same moment elect one leader. The same faults under load, with kill -9 and across hosts,
are in test_network_faults.py.

Each test prints its figures (takeover time, firings duplicated); the bounds asserted are generous (a
loaded 2-core machine), the tight figures are what the prints report.
"""

from __future__ import annotations

import signal
import time

from harness import EXAMPLES, Cluster, free_port, no_duplicate_firings, wait_for
from sparkyard.client import Client

TASKS = EXAMPLES / "tasks.py"
# Task leases long enough to outlast a change of leader (leader lease 3 s; workers self-fence at lease - 2 s).
ARGS = ("--lease", "10", "--heartbeat", "1", "--log-level", "DEBUG")


def two_masters(make_cluster: object) -> tuple[Cluster, Cluster, Client]:
    """The leader in the first cluster, a standby in the second; a client given both."""
    first: Cluster = make_cluster()  # type: ignore[operator]
    second: Cluster = make_cluster()  # type: ignore[operator]
    second.namespace = first.namespace
    first.start_master(*ARGS, port=free_port())  # fixed ports: a deposed master comes back on its own
    second.start_master(*ARGS, port=free_port())
    assert Client(second.address).status().role == "standby"
    both = f"{first.address},{second.address}"
    first.address = both  # workers started from the first cluster get both masters
    client = Client(both)
    return first, second, client


def role(address: str) -> str:
    try:
        with Client(address, timeout=2) as client:
            return client.status().role
    except Exception:
        return "unreachable"


def test_a_paused_leader_is_replaced_and_comes_back_fenced_as_a_standby(make_cluster: object) -> None:
    first, second, client = two_masters(make_cluster)
    leader, standby = first.address.split(",")
    job = client.submit(f"{TASKS}:noop", every="1s")
    wait_for(lambda: len(client.runs(job.id)) >= 2, 30, "the 1 s job to fire")
    assert first.master is not None
    paused_at = time.monotonic()
    first.master.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: role(standby) == "leader", 60, "the standby to lead")
        takeover = time.monotonic() - paused_at
    finally:
        first.master.process.send_signal(signal.SIGCONT)
    wait_for(lambda: "lost the leadership" in first.master.log(), 60, "the paused leader to learn it lost")  # type: ignore[union-attr]
    wait_for(lambda: role(leader) == "standby", 60, "the old leader to come back as a standby")
    assert first.master.process.poll() is None  # the same process, started again as a standby
    wait_for(lambda: len(client.runs(job.id)) >= 6, 30, "more firings by the new leader")
    client.pause(job.id)
    no_duplicate_firings(client, job.id)
    print(f"SIGSTOP of the leader: the standby led {takeover:.2f}s after the pause; the woken leader stepped "
          f"down (epoch now {client.status().epoch})")
    assert takeover < 60


def test_a_stopped_leader_hands_over_at_once(make_cluster: object) -> None:
    first, second, client = two_masters(make_cluster)
    standby = first.address.split(",")[1]
    stopped_at = time.monotonic()
    first.stop_master(signal.SIGTERM)
    wait_for(lambda: role(standby) == "leader", 30, "the standby to lead")
    handover = time.monotonic() - stopped_at
    job = client.submit(f"{TASKS}:noop", delay="1s")
    wait_for(lambda: client.runs(job.id), 30, "the new leader to fire a job")
    print(f"SIGTERM of the leader: the standby led {handover:.2f}s after the signal (graceful stop included)")
    assert handover < 30


def test_two_masters_started_at_the_same_moment_elect_one_leader(make_cluster: object) -> None:
    """Both processes are started before either is waited for, so both try to take the lease at start:
    one leads, the other stands by naming it, and a job fires once per scheduled time."""
    first: Cluster = make_cluster()  # type: ignore[operator]
    second: Cluster = make_cluster()  # type: ignore[operator]
    second.namespace = first.namespace
    started = [cluster.spawn_master() for cluster in (first, second)]
    addresses = [cluster.await_master(proc) for cluster, proc in zip((first, second), started)]
    statuses = []
    for address in addresses:
        with Client(address) as one:
            statuses.append(one.status())
    leaders = [a for a, s in zip(addresses, statuses) if s.role == "leader"]
    assert len(leaders) == 1, [(a, s.role) for a, s in zip(addresses, statuses)]
    (standby,) = [s for s in statuses if s.role == "standby"]
    assert standby.leader == leaders[0] and standby.epoch == statuses[addresses.index(leaders[0])].epoch
    standby_first = sorted(addresses, key=lambda a: a == leaders[0])  # the client follows it to the leader
    with Client(",".join(standby_first)) as client:
        job = client.submit(f"{TASKS}:noop", every="1s")
        wait_for(lambda: len(client.runs(job.id)) >= 3, 30, "three firings")
        client.pause(job.id)
        no_duplicate_firings(client, job.id)
        assert client.master == leaders[0]
    print(f"two masters started at once: {leaders[0]} leads (epoch {standby.epoch}), the other stands by naming it")
