"""A Redis that refuses a write for now — a primary without enough replicas (NOREPLICAS), one demoted under
the caller (READONLY), one that lost its own primary (MASTERDOWN) — is answered UNAVAILABLE, so clients retry,
not INTERNAL as a bug. Found by the nemesis soak (tests/soak, seed 2026): a submit during a Redis failover
was answered "internal error", and a client following the contract gave up on it."""

from __future__ import annotations

import grpc
import pytest
import redis.exceptions

from sparkyard.master.services import status_of

SCRIPT = "Error running script (call to f_84dd): @user_script:634: @user_script: 634: "


@pytest.mark.parametrize("message", [
    f"{SCRIPT}-NOREPLICAS Not enough good replicas to write.",
    "NOREPLICAS Not enough good replicas to write.",
    f"{SCRIPT}-READONLY You can't write against a read only replica.",
    "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
])
def test_a_redis_refusing_writes_for_now_is_unavailable(message: str) -> None:
    code, text = status_of(redis.exceptions.ResponseError(message))  # type: ignore[misc]
    assert code == grpc.StatusCode.UNAVAILABLE
    assert text.startswith("redis refuses writes for now") and message in text


def test_other_redis_errors_stay_internal() -> None:
    assert status_of(redis.exceptions.ResponseError("ERR wrong number of arguments")) is None
