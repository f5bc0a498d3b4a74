"""Fixtures shared by the tests: one redis-server per test process, stores and clusters on it."""

from __future__ import annotations

import itertools
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

# Property tests assert nothing about wall time (docs: no test does beyond a bound that holds on a loaded 2-core
# machine): Hypothesis's per-example deadline (200 ms) and its too-slow check would fail one on a starved machine.
# A test's own suppress_health_check replaces this list: it names too_slow again.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "cluster"))

import file_order  # noqa: E402
from clocked_store import ClockedStores  # noqa: E402
from harness import Cluster, RedisServer, free_port, start_redis, worker_jvm_args  # noqa: E402
from netcluster import PROXY_VARS, NetCluster  # noqa: E402
from netns import cleanup_stale, unavailable_reason  # noqa: E402
from sparkyard.certs import DevCerts, make_dev_certs  # noqa: E402
from sparkyard.keys import Keys  # noqa: E402
from sparkyard.master.leader import take_lead  # noqa: E402
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.redis_url import connect  # noqa: E402

# The multi-host cluster's leases: 8 s with heartbeats every 1.2 s. A worker leaves a silent master after 3
# heartbeats (≤ 3.6 s) and fences itself after lease − 2 s, so a cut of ~4.5 s is "shorter than the lease"
# with room on both sides. Leader lease: the default 3 s.
NET_LEASE_S = 8.0
NET_HEARTBEAT_S = 1.2

_namespaces = itertools.count(1)
# Clusters of the running test, whose logs are attached to its report when it fails.
_active: list[Cluster] = []


# SPARKYARD_RECORD_DURATIONS=PATH: this run's seconds per test file are written there (tests/file_order.py).
_RECORD_ENV = "SPARKYARD_RECORD_DURATIONS"
_seconds: dict[str, float] = defaultdict(float)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``-n 3``, as deploy/test.sh runs the slow tiers) a test file runs whole on one
    process, so its module fixtures start once, and the files on the multi-host network all run on one
    process, so the network is built once; the units go out in collection order, which
    :func:`pytest_collection_modifyitems` makes longest first. (xdist's own ``loadgroup`` marks are ignored
    by this pytest.)"""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False  # xdist's own order (most tests first) is not the longest first

    class ByFile(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return file_order.unit(nodeid)

    return ByFile(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order = {nodeid: i for i, nodeid in enumerate(file_order.longest_first([item.nodeid for item in items],
                                                                           file_order.recorded()))}
    items.sort(key=lambda item: order[item.nodeid])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if os.environ.get(_RECORD_ENV):
        _seconds[file_order.test_file(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(_RECORD_ENV)
    if path and _seconds and not hasattr(session.config, "workerinput"):  # the controller, which saw every report
        file_order.record(_seconds, Path(path))


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server for the whole test session, on a free loopback port."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
async def redis_store(redis_server: RedisServer) -> AsyncIterator[RedisStore]:
    """A RedisStore on a namespace of its own, leading it (its write scripts carry the current epoch)."""
    client = connect(f"redis://127.0.0.1:{redis_server.port}", decode=True, max_connections=64)  # as the master does
    store = RedisStore(client, Keys(f"st{os.getpid()}x{next(_namespaces)}"))
    await take_lead(store.scripts, "store-test")
    yield store
    await client.aclose()


@pytest.fixture
async def clocked_stores(redis_server: RedisServer) -> AsyncIterator[ClockedStores]:
    """Makes RedisStores on namespaces of their own, each timed by the FakeClock it is given."""
    stores = ClockedStores(redis_server.port)
    yield stores
    await stores.close()


@pytest.fixture(scope="session")
def dev_certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    """A development CA with a server certificate for loopback and a client certificate (sparkyard certs)."""
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def shared_cluster(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two session-runner workers reused by the tests that do not break anything."""
    cluster = Cluster(redis_server.url, tmp_path_factory.mktemp("shared"), namespace="shared")
    # Every process serves /metrics, as in production (tests/integration/test_metrics.py reads them).
    cluster.http = {name: f"127.0.0.1:{free_port()}" for name in ("master", "w1", "w2")}
    cluster.start_master("--http", cluster.http["master"])
    cluster.start_worker("w1", slots=2, extra=("--metrics", cluster.http["w1"]))
    cluster.start_worker("w2", slots=2, extra=("--metrics", cluster.http["w2"]))
    try:
        cluster.wait_workers()
        yield cluster
    except BaseException:
        print(cluster.logs(), file=sys.stderr)
        raise
    finally:
        cluster.stop()


@pytest.fixture
def make_cluster(redis_server: RedisServer, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """A private cluster (own namespace, own processes) for tests that kill or restart things."""
    made: list[Cluster] = []

    def make(**kwargs: object) -> Cluster:
        cluster = Cluster(redis_server.url, tmp_path / f"cluster{len(made)}",
                          namespace=f"t{os.getpid()}x{next(_namespaces)}", **kwargs)  # type: ignore[arg-type]
        made.append(cluster)
        _active.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.stop()
        _active.remove(cluster)


@pytest.fixture(scope="session")
def net_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NetCluster]:
    """Redis, two masters (``master`` leads at first, ``m2`` stands by) and two session-runner workers
    (``w1``, ``w2``: one slot each, both masters given), each a host of its own on a private network
    (tests/cluster/netcluster.py); the test process is the client host. Masters serve mutual TLS with
    certificates made here, once, and workers use the worker token. One for the whole session (a start
    costs ~15 s, most of it the workers' Spark drivers): every test leaves it as it found it — both masters
    up, both workers ready, every link up. Skips, saying why, where network namespaces cannot be made."""
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    removed = cleanup_stale()
    if removed:
        print(f"removed leftovers of earlier test runs: {' '.join(removed)}", file=sys.stderr)
    root = tmp_path_factory.mktemp("net")
    # Its workers' drivers start as the other test clusters' do (harness.TEST_DRIVER_CONF, the suite's class archive).
    cluster = NetCluster(root / "hosts", root / "client" / "submit", lease_s=NET_LEASE_S, heartbeat_s=NET_HEARTBEAT_S,
                         worker_args=tuple(worker_jvm_args()))
    with pytest.MonkeyPatch.context() as patch:
        for var in PROXY_VARS:  # the client host talks to the test network directly
            patch.delenv(var, raising=False)
        try:
            cluster.root.mkdir(parents=True)
            cluster.submit_dir.mkdir(parents=True)
            cluster.create_network()
            cluster.start_redis()
            cluster.start_master()
            cluster.start_master(name="m2")
            for worker_id in ("w1", "w2"):
                cluster.start_worker(worker_id)
            cluster.wait_workers("w1", "w2")
        except BaseException:
            print(cluster.logs(), file=sys.stderr)
            cluster.stop()
            raise
        yield cluster
        errors = cluster.stop()
    assert not errors, f"teardown of the test network: {errors}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        clusters = list(_active)
        shared = getattr(item, "funcargs", {}).get("shared_cluster")
        if isinstance(shared, Cluster):
            clusters.append(shared)
        for cluster in clusters:
            report.sections.append((f"logs of cluster {cluster.namespace}", cluster.logs()))
        net = getattr(item, "funcargs", {}).get("net_cluster")
        if isinstance(net, NetCluster):
            report.sections.append((f"logs of test network {net.network.tag}", net.logs()))


