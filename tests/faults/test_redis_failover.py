"""Redis failover under Sentinel: a primary, a replica and a sentinel (real redis-server processes, the
sentinel being the same binary in sentinel mode); the master reaches Redis through the sentinel and
acknowledges a submit only once the replica has it, so after kill -9 of the primary the promoted replica
has every acknowledged job and the master carries on with it."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis

from harness import EXAMPLES, Cluster, free_port, stop_process, wait_for
from sparkyard.errors import Unavailable
from sparkyard.master.embedded_redis import find_redis_server
from sparkyard.master.redis_url import RedisUrlError, connect, parse_sentinel_url

TASKS = EXAMPLES / "tasks.py"
SERVICE = "sy-test"


def _server(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([find_redis_server(), *args], stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _data_server(port: int, data: Path, *extra: str) -> list[str]:
    data.mkdir(exist_ok=True)
    return ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(data), "--appendonly", "yes", "--save", "",
            "--maxmemory-policy", "noeviction", *extra]


@pytest.fixture
def sentinel_setup(tmp_path: Path) -> Iterator[dict[str, object]]:
    """A primary, a replica of it and one sentinel watching them (quorum 1, down after 1 s)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = {name: free_port() for name in ("primary", "replica", "sentinel")}
        procs.append(_server(_data_server(ports["primary"], tmp_path / "primary"), tmp_path / "primary.log"))
        procs.append(_server(_data_server(ports["replica"], tmp_path / "replica", "--replicaof", "127.0.0.1",
                                          str(ports["primary"])), tmp_path / "replica.log"))
        conf = tmp_path / "sentinel.conf"
        conf.write_text(f"port {ports['sentinel']}\nbind 127.0.0.1\ndir {tmp_path}\n"
                        f"sentinel monitor {SERVICE} 127.0.0.1 {ports['primary']} 1\n"
                        f"sentinel down-after-milliseconds {SERVICE} 1000\n"
                        f"sentinel failover-timeout {SERVICE} 5000\n")
        procs.append(_server([str(conf), "--sentinel"], tmp_path / "sentinel.log"))
        replica = redis.Redis(port=ports["replica"], decode_responses=True)
        wait_for(lambda: replica.info("replication").get("master_link_status") == "up", 30, "the replica to sync")
        sentinel = redis.Redis(port=ports["sentinel"], decode_responses=True)
        wait_for(lambda: sentinel.execute_command("SENTINEL", "replicas", SERVICE), 30,
                 "the sentinel to see the replica")
        yield {"ports": ports, "procs": procs, "sentinel": sentinel, "replica": replica, "dir": tmp_path}
    finally:
        for proc in reversed(procs):
            stop_process(proc)


def test_sentinel_urls_are_parsed_and_bad_ones_named() -> None:
    url = parse_sentinel_url("redis+sentinel://:pw@h1:26379,h2:26380/mymaster?db=2")
    assert (url.sentinels, url.service, url.password, url.db) == ((("h1", 26379), ("h2", 26380)), "mymaster", "pw", 2)
    with pytest.raises(RedisUrlError, match="name the sentinel service"):
        parse_sentinel_url("redis+sentinel://h1:26379")
    with pytest.raises(RedisUrlError, match="'h1' is not HOST:PORT"):
        parse_sentinel_url("redis+sentinel://h1/mymaster")


def test_the_master_follows_a_sentinel_failover_and_keeps_acknowledged_submits(
        make_cluster: object, sentinel_setup: dict[str, object]) -> None:
    ports: dict[str, int] = sentinel_setup["ports"]  # type: ignore[assignment]
    procs: list[subprocess.Popen[bytes]] = sentinel_setup["procs"]  # type: ignore[assignment]
    sentinel: redis.Redis = sentinel_setup["sentinel"]  # type: ignore[assignment]
    cluster: Cluster = make_cluster()  # type: ignore[operator]
    cluster.redis_url = f"redis+sentinel://127.0.0.1:{ports['sentinel']}/{SERVICE}"
    cluster.start_master("--redis-min-replicas", "1", "--lease", "10", "--heartbeat", "1", port=free_port())
    client = cluster.client()
    before = [client.submit(f"{TASKS}:noop", delay="1h") for _ in range(3)]  # each acknowledged by the replica
    killed_at = time.monotonic()
    procs[0].kill()  # kill -9 of the primary
    procs[0].wait(timeout=10)
    wait_for(lambda: sentinel.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)[1] == str(ports["replica"]),
             60, "the sentinel to promote the replica")
    promoted = time.monotonic() - killed_at
    # With no replica left, a submit cannot be acknowledged: it is refused, naming why, rather than kept
    # only on a primary whose loss would lose it. Nor can the leader's lease be renewed (every write waits for
    # the replicas), so once it lapses the refusal says that no master leads.
    with pytest.raises(Unavailable, match="replicas required|no master leads"):
        client.submit(f"{TASKS}:noop", delay="1h")
    # The old primary comes back; the sentinel makes it a replica of the new one: submits work again.
    procs.append(_server(_data_server(ports["primary"], sentinel_setup["dir"] / "primary"),  # type: ignore[operator]
                         sentinel_setup["dir"] / "primary-again.log"))  # type: ignore[operator]

    def submit_once() -> bool:
        client.submit(f"{TASKS}:noop", delay="1h")
        return True

    wait_for(submit_once, 120, "a submit acknowledged again once the old primary is back as a replica")
    recovered = time.monotonic() - killed_at
    # The jobs acknowledged before the kill are on the promoted replica, now the primary. They are read once a
    # master leads again: until a replica is back the leader cannot renew its lease, and past the lease (10 s,
    # the promotion's time included) no master leads and none answers reads.
    wait_for(lambda: all(client.job(job.id).id == job.id for job in before), 90,
             "the master to read the acknowledged jobs from the promoted replica")
    print(f"Redis primary kill -9: replica promoted {promoted:.1f}s after; {len(before)} acknowledged submits "
          f"kept; submits refused until a replica was back, then accepted {recovered:.1f}s after the kill")


async def test_a_connection_left_on_a_demoted_primary_moves_to_the_new_one(sentinel_setup: dict[str, object]) -> None:
    """A primary demoted under an open connection (Sentinel's own failover closes its clients; a demotion it
    did not see, or one racing a reconnect, does not): before, a write inside a script and a WAIT were refused
    on that connection every time, and a master holding one failed every election (the nemesis soak). Now
    the connection is dropped and the call goes to the primary Sentinel names."""
    ports: dict[str, int] = sentinel_setup["ports"]  # type: ignore[assignment]
    sentinel: redis.Redis = sentinel_setup["sentinel"]  # type: ignore[assignment]
    replica: redis.Redis = sentinel_setup["replica"]  # type: ignore[assignment]
    url = f"redis+sentinel://127.0.0.1:{ports['sentinel']}/{SERVICE}"
    scripted, waiting = (connect(url, decode=True, max_connections=1) for _ in range(2))
    write = "return redis.call('SET', KEYS[1], ARGV[1])"
    try:
        assert await scripted.eval(write, 1, "k", "before") == "OK"  # type: ignore[misc]
        assert await waiting.execute_command("WAIT", 0, 0) >= 0  # both connections open, on the primary
        old = redis.Redis(port=ports["primary"], decode_responses=True)
        replica.execute_command("REPLICAOF", "NO", "ONE")
        old.execute_command("REPLICAOF", "127.0.0.1", ports["replica"])
        sentinel.execute_command("SENTINEL", "REMOVE", SERVICE)
        sentinel.execute_command("SENTINEL", "MONITOR", SERVICE, "127.0.0.1", ports["replica"], 1)
        assert old.info("replication")["role"] == "slave"
        assert await scripted.eval(write, 1, "k", "after") == "OK"  # type: ignore[misc]
        assert replica.get("k") == "after"
        pipe = waiting.pipeline(transaction=False)
        pipe.get("k")
        pipe.execute_command("WAIT", 0, 0)
        assert (await pipe.execute())[0] == "after"
    finally:
        await scripted.aclose()
        await waiting.aclose()
