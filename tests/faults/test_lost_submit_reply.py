"""A submit whose reply never reaches the client, retried with the same idempotency key, makes one job;
and with ``--redis-min-replicas`` a retry is acknowledged only once a replica has the job, whichever
connection it comes on.

One Redis primary and one replica (real redis-server processes) and one master with
``--redis-min-replicas 1`` serve the whole module. The replica is paused (SIGSTOP) to hold a submit up:
the master stores the job at once, then waits (WAIT, up to 1 s) for the replica to have it.
"""

from __future__ import annotations

import signal
import threading
import uuid
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from redis.asyncio import Redis

from harness import EXAMPLES, Cluster, RedisServer, start_redis, wait_for
from sparkyard.client import Client, build_spec
from sparkyard.errors import Unavailable
from sparkyard.keys import Keys
from sparkyard.master.leader import take_lead
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.scripts import NotReplicated
from sparkyard.master.store_outcomes import FireStatus
from sparkyard.master.store_values import FireRequest, NewJob
from sparkyard.spec import normalize
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

TASKS = EXAMPLES / "tasks.py"
TTL_MS = 600_000


class Replicated:
    """The module's primary, replica and master."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self.primary = start_redis(root / "primary")
        self.replica: RedisServer | None = None
        self.cluster = Cluster(self.primary.url, root / "cluster", namespace="lost-reply")

    def start(self) -> None:
        self.replica = start_redis(self._root / "replica",
                                   extra=("--replicaof", "127.0.0.1", str(self.primary.port)))
        link = self.replica.client()
        wait_for(lambda: link.info("replication").get("master_link_status") == "up", 30, "the replica to sync")
        self.cluster.start_master("--redis-min-replicas", "1")

    def pause_replica(self) -> None:
        assert self.replica is not None
        self.replica.process.send_signal(signal.SIGSTOP)

    def resume_replica(self) -> None:
        assert self.replica is not None
        self.replica.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.cluster.stop()
        for server in (self.replica, self.primary):
            if server is not None:
                server.process.send_signal(signal.SIGCONT)
                server.stop()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    setup = Replicated(tmp_path_factory.mktemp("replicated"))
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


def _named(client: Client, name: str) -> list[pb.Job]:
    return [j for j in client.jobs() if j.spec.name == name]


def test_a_submit_whose_reply_is_lost_and_is_retried_with_its_key_makes_one_job(replicated: Replicated) -> None:
    client = replicated.cluster.client()
    spec = build_spec(f"{TASKS}:noop", delay="1h", name="warm-up")
    client.submit_spec(spec)  # uploads the bundle, so the call below is the submit alone
    spec.name = name = f"lost-{uuid.uuid4().hex[:8]}"
    key = uuid.uuid4().hex
    # The replica is paused: the master stores the job, then waits for the replica; the client stops
    # waiting first and sees DEADLINE_EXCEEDED, as if the reply had been lost on the way.
    with replicated.cluster.channel() as channel:
        replicated.pause_replica()
        try:
            with pytest.raises(grpc.RpcError) as lost:
                pbg.JobServiceStub(channel).SubmitJob(pb.SubmitJobRequest(spec=spec, idempotency_key=key),
                                                      timeout=0.5)
        finally:
            replicated.resume_replica()
    assert lost.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    (stored,) = wait_for(lambda: _named(client, name), 10, "the job of the lost reply to be stored")
    again = client.submit_spec(spec, idempotency_key=key)
    assert again.duplicate and again.job.id == stored.id
    assert [j.id for j in _named(client, name)] == [stored.id]


def test_the_client_retries_a_refused_submit_by_itself_with_the_same_key(replicated: Replicated) -> None:
    """A submit refused for want of replicas (UNAVAILABLE) after the master stored the job is retried by
    gRPC with the same request, so the same key: once the replica is back, the retry gets that job."""
    client = replicated.cluster.client()
    name = f"auto-{uuid.uuid4().hex[:8]}"
    client.submit(f"{TASKS}:noop", delay="1h", name="warm-up")  # the bundle is uploaded
    waits = replicated.primary.client()

    def wait_calls() -> int:
        return int(waits.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))

    before = wait_calls()
    result: list[pb.Job | BaseException] = []

    def submit() -> None:
        try:
            result.append(client.submit(f"{TASKS}:noop", delay="1h", name=name))
        except BaseException as exc:  # reported by the assertion below
            result.append(exc)

    replicated.pause_replica()
    thread = threading.Thread(target=submit)
    try:
        thread.start()
        # A second WAIT is the retry's: the first try was refused (its job stored on the primary only).
        wait_for(lambda: wait_calls() >= before + 2, 30, "the client's submit to be retried")
    finally:
        replicated.resume_replica()
        thread.join(timeout=60)
    (job,) = result
    assert isinstance(job, pb.Job), job
    assert [j.id for j in _named(client, name)] == [job.id]


async def test_a_retried_submit_is_acknowledged_only_once_a_replica_has_its_job(replicated: Replicated) -> None:
    """The retry finds its key used and returns the stored job; with --redis-min-replicas it is refused
    like the first try until a replica has the job, though it comes on another connection (as from another
    master, or a restarted one). WAIT's contract counts only the writes of its own connection (Redis 6.2
    and 7.0 count every write made before it, so this held there already): the retry rewrites its key,
    unchanged, so that it holds by the contract too."""
    keys = Keys(f"wait-{uuid.uuid4().hex[:8]}")
    first, retry = (RedisStore(Redis(port=replicated.primary.port, decode_responses=True), keys, min_replicas=1)
                    for _ in range(2))
    retry.scripts.epoch = await take_lead(first.scripts, "replica-test")
    spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main"))
    key = uuid.uuid4().hex
    primary = replicated.primary.client()
    primary.config_set("notify-keyspace-events", "Kh")
    writes = primary.pubsub()
    writes.psubscribe(f"__keyspace@0__:{keys.idempotency('*')}")  # the key's bucket (submit.lua)
    assert replicated.replica is not None
    try:
        replicated.pause_replica()
        try:
            with pytest.raises(Unavailable, match="0 of the 1 replicas"):
                await first.submit_many([NewJob("j" + "1" * 22, spec, "delay", 3_600_000, key)], TTL_MS)
            with pytest.raises(Unavailable, match="0 of the 1 replicas"):
                await retry.submit_many([NewJob("j" + "2" * 22, spec, "delay", 3_600_000, key)], TTL_MS)
        finally:
            replicated.resume_replica()
        (res,) = await retry.submit_many([NewJob("j" + "3" * 22, spec, "delay", 3_600_000, key)], TTL_MS)
        assert res.duplicate and res.job_id == "j" + "1" * 22
        assert replicated.replica.client().exists(keys.job(res.job_id))
        messages = iter(lambda: writes.get_message(timeout=0.2), None)  # published before the replies
        events = [m["data"] for m in messages if m["type"] == "pmessage"]
        assert events == ["hset"] * 3  # the first try's, and each retry's rewrite
    finally:
        writes.close()
        primary.config_set("notify-keyspace-events", "")
        for store in (first, retry):
            await store.redis.aclose()


async def test_no_fencing_token_or_trigger_is_given_out_before_a_replica_has_it(replicated: Replicated) -> None:
    """With --redis-min-replicas every write waits for replicas, not only submits: a claim's fencing token
    and a manual firing that only the primary had were lost with it in a failover, and the same token was
    handed out twice (the nemesis soak, seed 11). While the replica is paused both are refused; once it is
    back the claim's token is on the replica before anyone sees it."""
    keys = Keys(f"wait-{uuid.uuid4().hex[:8]}")
    store = RedisStore(Redis(port=replicated.primary.port, decode_responses=True), keys, min_replicas=1)
    assert replicated.replica is not None
    try:
        await take_lead(store.scripts, "replica-test")
        spec = normalize(pb.JobSpec(entrypoint="/jobs/x.py:main"))
        await store.submit_many([NewJob("j" + "4" * 22, spec, "delay", 3_600_000)], TTL_MS)
        trigger = FireRequest("j" + "4" * 22, spec, 1_000, None, -1, "allow", [()])
        replicated.pause_replica()
        try:
            with pytest.raises(NotReplicated, match="0 of the 1 replicas"):
                await store.fire_many([trigger])
        finally:
            replicated.resume_replica()
        ((run, fired),) = await store.fire_many([trigger])  # made again: the same run, now on a replica too
        assert fired.status in (FireStatus.CREATED, FireStatus.EXISTS)
        group = spec.group or "default"
        (ready,) = await store.peek_ready(group, 1)
        replicated.pause_replica()
        try:  # the task stays leased on the primary, its token given to nobody, until the lease lapses
            with pytest.raises(NotReplicated):
                await store.claim(group, [(ready.task_id, "w1")], lease_ms=60_000, timeout_grace_ms=1_000)
        finally:
            replicated.resume_replica()
        await store.fire_many([FireRequest("j" + "4" * 22, spec, 2_000, None, -1, "allow", [()])])
        (second,) = await store.peek_ready(group, 1)
        (claim,) = await store.claim(group, [(second.task_id, "w1")], lease_ms=60_000, timeout_grace_ms=1_000)
        # Answered only once the replica has it: read there at once, the token is already the one handed out.
        assert replicated.replica.client().hget(keys.task(claim.task_id), "token") == str(claim.token)
    finally:
        await store.redis.aclose()
