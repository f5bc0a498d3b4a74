"""A pool's readiness as its drivers start, fail and come back (worker/runner/pool_health.py)."""

from __future__ import annotations

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.backoff import RESTART_BACKOFF_MAX_S
from sparkyard.worker.runner.pool_health import PoolHealth


def test_a_pool_is_starting_until_every_driver_was_ready_once_then_degraded_when_one_is_missing() -> None:
    health = PoolHealth(2, "session", "Spark drivers")
    assert health.readiness(False, 0) == (pb.READINESS_STARTING, "session runner not started", 0)
    assert health.readiness(True, 1) == (pb.READINESS_STARTING, "warming Spark drivers, 1 of 2 ready", 1)
    assert health.readiness(True, 3) == (pb.READINESS_READY, "", 2)
    health.warm = True
    assert health.readiness(True, 1) == (pb.READINESS_DEGRADED,
                                         "1 of 2 Spark drivers ready (replacements warming)", 1)


def test_failed_starts_back_off_doubling_to_the_maximum_and_name_the_last_error() -> None:
    health = PoolHealth(2, "session", "Spark drivers")
    delays = [health.failed(f"error {n}") for n in range(10)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and delays[-1] == RESTART_BACKOFF_MAX_S
    assert health.readiness(True, 0) == (pb.READINESS_DEGRADED,
                                         "0 of 2 Spark drivers ready; one failed to start (error 9), retrying", 0)
    health.started()
    assert health.failed("again") == 1.0


def test_a_cluster_manager_back_warms_a_new_pool_from_scratch() -> None:
    health = PoolHealth(1, "session", "Spark drivers")
    health.warm = True
    health.failed("lost")
    health.engine_problem = "the Spark master does not answer"
    health.engine_back()
    assert (health.engine_problem, health.failures, health.warm) == ("", 0, False)
    assert health.readiness(True, 0)[0] == pb.READINESS_STARTING
