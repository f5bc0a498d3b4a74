"""The multi-host tests share one private network of Redis, master and worker hosts: the session fixture
``net_cluster`` (tests/conftest.py, built on netcluster.py). Every test here skips, with the reason in one
line, where network namespaces cannot be made (not root, no CAP_NET_ADMIN, no iproute2)."""

from __future__ import annotations

import pytest

from netns import unavailable_reason


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "acceptance: an acceptance test of a feature (tests/cluster)")


@pytest.fixture(autouse=True)
def _needs_network_namespaces() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
