"""Two masters on one Redis (loopback): the standby takes over when the leader is paused or stopped, a
paused leader that wakes up is fenced and comes back as a standby (the same process), and two masters
started at the same moment elect one leader. The same faults under load, with kill -9 and across hosts,
are in test_network_faults.py.

Each test prints its figures (takeover time, firings duplicated); the bounds asserted are generous (a
loaded 2-core machine), the tight figures are what the prints report.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from redis import Redis

from harness import EXAMPLES, Cluster, free_port, no_duplicate_firings, wait_for
from sparkyard.client import Client, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"
# Task leases long enough to outlast a change of leader (leader lease 3 s; workers self-fence at lease - 2 s).
ARGS = ("--lease", "10", "--heartbeat", "1", "--log-level", "DEBUG")


def two_masters(make_cluster: object, *extra: str) -> tuple[Cluster, Cluster, Client]:
    """The leader in the first cluster, a standby in the second; a client given both."""
    first: Cluster = make_cluster()  # type: ignore[operator]
    second: Cluster = make_cluster()  # type: ignore[operator]
    second.namespace = first.namespace
    first.start_master(*ARGS, *extra, port=free_port())  # fixed ports: a deposed master comes back on its own
    second.start_master(*ARGS, *extra, port=free_port())
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


def test_a_killed_leader_is_replaced_before_its_lease_ends(make_cluster: object) -> None:
    """kill -9 closes the leader's Redis connections: the standby takes over half a lease later, not a whole
    lease. The 20 s lease leaves a loaded machine 10 s of margin between the two."""
    first, second, client = two_masters(make_cluster, "--leader-lease", "20s", "--lease", "30s")
    standby = first.address.split(",")[1]
    job = client.submit(f"{TASKS}:noop", every="1s")
    wait_for(lambda: len(client.runs(job.id)) >= 2, 30, "the 1 s job to fire")
    assert first.master is not None and second.master is not None
    redis = Redis.from_url(first.redis_url, decode_responses=True)
    first.master.process.kill()
    killed_at = time.monotonic()
    lease_left = redis.pttl(f"{first.namespace}:leader") / 1000
    wait_for(lambda: role(standby) == "leader", 60, "the standby to lead")
    takeover = time.monotonic() - killed_at
    assert "its process is gone; taking over before its lease ends" in second.master.log(), second.master.log()[-3000:]
    fired = len(client.runs(job.id))
    wait_for(lambda: len(client.runs(job.id)) >= fired + 3, 30, "more firings by the new leader")
    client.pause(job.id)
    no_duplicate_firings(client, job.id)
    print(f"kill -9 of the leader: the standby led {takeover:.2f}s after it; the lease had {lease_left:.1f}s left")


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


class _Hooks(BaseHTTPRequestHandler):
    """Records each POST's Idempotency-Key and body on its server (``server.posts``)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.posts.append((self.headers["Idempotency-Key"], body))  # type: ignore[attr-defined]
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


def test_a_webhook_the_killed_leader_could_not_deliver_is_delivered_by_the_next(make_cluster: object) -> None:
    """Issue 22: the receiver is down while the leader is kill -9'd after a failed try; it comes up after the
    standby leads, and the delivery, recorded in Redis by the script that ended the run, arrives."""
    first, second, client = two_masters(make_cluster)
    standby = first.address.split(",")[1]
    port = free_port()  # the receiver's, nothing listening on it yet: connection refused
    first.start_worker("w", slots=1)
    first.wait_workers("w")
    job = client.submit(f"{TASKS}:always_fail", on_failure=f"http://127.0.0.1:{port}/hook")
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_FAILED
    assert first.master is not None
    wait_for(lambda: f"webhook for run={run.id}" in first.master.log(), 60, "the leader's failed try")  # type: ignore[union-attr]
    killed_at = time.monotonic()
    first.master.process.kill()
    first.master.process.wait(timeout=10)
    wait_for(lambda: role(standby) == "leader", 60, "the standby to lead")
    led = time.monotonic() - killed_at
    server = ThreadingHTTPServer(("127.0.0.1", port), _Hooks)
    server.posts = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    up_at = time.monotonic()
    try:
        posts = wait_for(lambda: server.posts, 120, "the delivery by the new leader")  # type: ignore[attr-defined]
        arrived = time.monotonic() - up_at
    finally:
        server.shutdown()
        server.server_close()
    key, body = posts[0]
    assert key == f"{run.id}:run.failed"
    assert (body["event"], body["run"]["id"], body["run"]["state"]) == ("run.failed", run.id, "FAILED")
    print(f"webhook across a kill -9 of the leader (receiver down until the standby led, {led:.1f}s after the "
          f"kill): delivered {arrived:.1f}s after the receiver came up, {len(posts)} POST(s) taken")
    assert arrived < 120
