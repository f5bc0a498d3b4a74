"""Fixtures shared by the integration and fault tests (unit tests need none of them)."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Cluster, RedisServer, start_redis  # noqa: E402

_namespaces = itertools.count(1)
# Clusters of the running test, whose logs are attached to its report when it fails.
_active: list[Cluster] = []


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server for the whole test session, on a free loopback port."""
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def shared_cluster(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and two session-runner workers reused by the tests that do not break anything."""
    cluster = Cluster(redis_server.url, tmp_path_factory.mktemp("shared"), namespace="shared")
    cluster.start_master()
    cluster.start_worker("w1", slots=2)
    cluster.start_worker("w2", slots=2)
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        clusters = list(_active)
        shared = getattr(item, "funcargs", {}).get("shared_cluster")
        if isinstance(shared, Cluster):
            clusters.append(shared)
        for cluster in clusters:
            report.sections.append((f"logs of cluster {cluster.namespace}", cluster.logs()))
