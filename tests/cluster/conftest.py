"""Fixtures of the multi-host tests: a private network of Redis, master and worker hosts (netcluster.py).

Every test here skips, with the reason in one line, where network namespaces cannot be made (not root,
no CAP_NET_ADMIN, no iproute2).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netcluster import PROXY_VARS, NetCluster  # noqa: E402
from netns import cleanup_stale, unavailable_reason  # noqa: E402

# Clusters of the running test, whose logs are attached to its report when it fails.
_active: list[NetCluster] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "acceptance: an acceptance test of a feature (tests/cluster)")


@pytest.fixture(scope="session")
def _network_namespaces() -> str | None:
    """Why the test network cannot be made here, or None (after removing what killed runs left behind)."""
    reason = unavailable_reason()
    if reason is None:
        removed = cleanup_stale()
        if removed:
            print(f"removed leftovers of earlier test runs: {' '.join(removed)}", file=sys.stderr)
    return reason


@pytest.fixture(autouse=True)
def _needs_network_namespaces(_network_namespaces: str | None) -> None:
    if _network_namespaces:
        pytest.skip(_network_namespaces)


@pytest.fixture
def make_net_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., NetCluster]]:
    """``make(workers=("w1", "w2"), slots=1, runner="session", master_args=(), start=True)``: a cluster of
    hosts on a private network (one per test). With ``start=False`` nothing runs yet: call its
    ``start_*`` methods. Torn down after the test, failed or not; leftovers fail the teardown."""
    for var in PROXY_VARS:  # the client host talks to the test network directly
        monkeypatch.delenv(var, raising=False)
    made: list[NetCluster] = []

    def make(*, workers: tuple[str, ...] = ("w1", "w2"), slots: int = 1, runner: str = "session",
             master_args: tuple[str, ...] = (), start: bool = True) -> NetCluster:
        if made:
            raise RuntimeError("one net cluster per test (the network is named after the test process)")
        cluster = NetCluster(tmp_path / "hosts", tmp_path / "client" / "submit")
        made.append(cluster)
        _active.append(cluster)
        if start:
            cluster.start(workers, slots=slots, runner=runner, master_args=master_args)
        else:
            cluster.root.mkdir(parents=True, exist_ok=True)
            cluster.submit_dir.mkdir(parents=True, exist_ok=True)
            cluster.network.create()
        return cluster

    yield make
    errors = []
    for cluster in made:
        errors += cluster.stop()
        _active.remove(cluster)
    assert not errors, f"teardown of the test network: {errors}"


@pytest.fixture
def net_cluster(make_net_cluster: Callable[..., NetCluster]) -> NetCluster:
    """Redis, a master and two session-runner workers (w1, w2; one slot each), each on its own host, all
    ready; the test process is the client host. See NetCluster for the controls."""
    return make_net_cluster()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("setup", "call"):
        for cluster in _active:
            report.sections.append((f"logs of test network {cluster.network.tag}", cluster.logs()))
