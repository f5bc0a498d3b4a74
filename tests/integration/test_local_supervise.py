"""``sparkyard local`` restarts a dead worker at once after a long run, and with a growing delay when it
keeps dying right after its start (real master and worker processes; the supervisor's clock is driven
by the test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import free_port, worker_jvm_env
from sparkyard import Client
from sparkyard.cli.local import RESTART_BASE_S, STABLE_S, LocalCluster


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_worker_dying_at_start_is_restarted_with_backoff_and_a_stable_one_at_once(tmp_path: Path) -> None:
    clock = _Clock()
    # slots=0: each worker refuses its configuration and exits at once — a crash loop.
    cluster = LocalCluster(workers=1, slots=0, listen=f"127.0.0.1:{free_port()}", data_dir=tmp_path, monotonic=clock)
    try:
        cluster.start_master()
        worker = cluster._start_worker(1)

        def died() -> None:
            assert cluster.processes[1].wait(timeout=60) != 0

        died()
        clock.now = 0.5
        assert cluster.supervise() and cluster.restarts == 0  # first quick exit: wait RESTART_BASE_S
        clock.now = 0.5 + RESTART_BASE_S
        assert cluster.supervise() and cluster.restarts == 1 and cluster.processes[1] is not worker
        died()
        clock.now += 0.5
        assert cluster.supervise() and cluster.restarts == 1  # second quick exit: twice the delay
        clock.now += 2 * RESTART_BASE_S - 0.01
        assert cluster.supervise() and cluster.restarts == 1
        clock.now += 0.01
        assert cluster.supervise() and cluster.restarts == 2
        died()
        clock.now += STABLE_S  # it "ran" long enough: restarted in the same pass, backoff forgotten
        assert cluster.supervise() and cluster.restarts == 3
        died()
        clock.now += 0.1
        assert cluster.supervise() and cluster.restarts == 3  # a quick exit again waits the base delay
        clock.now += RESTART_BASE_S
        assert cluster.supervise() and cluster.restarts == 4
    finally:
        cluster.stop()


def test_the_local_cluster_talks_plaintext_whatever_tls_settings_the_environment_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Meant for some remote cluster; a worker given them would try TLS (and refuse to start: no such file).
    for name in ("ca", "cert", "key"):
        monkeypatch.setenv(f"SPARKYARD_TLS_{name.upper()}", str(tmp_path / f"no-such-{name}.pem"))
    # Its worker's JVMs as the other test workers' (else its start trains an archive in ~/.cache, killed at once).
    for name, value in worker_jvm_env().items():
        monkeypatch.setenv(name, value)
    cluster = LocalCluster(workers=1, slots=1, listen=f"127.0.0.1:{free_port()}", data_dir=tmp_path, runner="submit")
    try:
        address = cluster.start()  # returns once the worker registered, asked over plaintext
        with Client(address, tls_ca="", tls_cert="", tls_key="") as client:
            assert [w.id for w in client.workers() if w.alive] == ["local-1"]
    finally:
        cluster.stop()
