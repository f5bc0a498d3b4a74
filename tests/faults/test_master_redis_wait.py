"""A master and a Redis that is not there at its start: a first start, like a master restarted after losing
the leadership, waits however long it takes (saying so every --redis-connect-wait, naming Redis) and comes
up once Redis does; a stop asked meanwhile ends it at once. A Redis that answers but refuses writes (a
primary whose replica is not back, under ``min-replicas-to-write``) leaves the master standing by until it
takes them: found by the nemesis soak (tests/soak, seed 7), where a master restarting as a standby ended
with NOREPLICAS on its first election."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from harness import Cluster, free_port, start_redis, stop_process, wait_for

WAIT = ("--redis-connect-wait", "1")


def _master(tmp_path: Path, port: int) -> tuple[Cluster, subprocess.Popen[bytes]]:
    cluster = Cluster(f"redis://127.0.0.1:{port}/0", tmp_path / "cluster")
    return cluster, cluster.spawn_master(*WAIT)


def test_a_first_start_waits_for_redis_past_the_wait_and_comes_up_with_it(tmp_path: Path) -> None:
    port = free_port()
    cluster, proc = _master(tmp_path, port)
    try:
        log = cluster.master.log  # type: ignore[union-attr]
        wait_for(lambda: "still waiting" in log(), 60, "the master to say it waits for Redis past --redis-connect-wait")
        assert f"redis at redis://127.0.0.1:{port}/0 unreachable" in log()
        assert proc.poll() is None
        redis_server = start_redis(tmp_path / "redis", port=port)
        try:
            address = cluster.await_master(proc)
            assert address and proc.poll() is None
        finally:
            stop_process(proc)
            redis_server.stop()
    finally:
        stop_process(proc)


def test_a_start_on_a_redis_that_refuses_writes_stands_by_and_leads_once_it_takes_them(tmp_path: Path) -> None:
    redis_server = start_redis(tmp_path / "redis")
    refusing = redis_server.client()
    refusing.config_set("min-replicas-to-write", 1)  # no replica: every write is refused NOREPLICAS
    cluster = Cluster(f"redis://127.0.0.1:{redis_server.port}/0", tmp_path / "cluster")
    proc = cluster.spawn_master(*WAIT)
    try:
        cluster.await_master(proc)
        assert "NOREPLICAS" in cluster.master.log()  # type: ignore[union-attr]
        assert cluster.client().status().role == "standby"
        refusing.config_set("min-replicas-to-write", 0)
        wait_for(lambda: cluster.client().status().role == "leader", 30, "the master to lead once Redis takes writes")
        assert proc.poll() is None
    finally:
        stop_process(proc)
        cluster.stop()
        redis_server.stop()


def test_a_stop_while_waiting_for_redis_ends_the_master_at_once(tmp_path: Path) -> None:
    cluster, proc = _master(tmp_path, free_port())
    try:
        wait_for(lambda: "still waiting" in cluster.master.log(), 60, "the master to wait for Redis")  # type: ignore[union-attr]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        stop_process(proc)
