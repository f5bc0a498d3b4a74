"""Retry policies for calls to infrastructure (Redis, the master), built on tenacity.

Only transport failures are retried — never a refusal (a stale token, an invalid spec): retrying those
cannot succeed and would hide the error. Every delay is jittered so that a fleet of workers reconnecting
after a master restart does not arrive in lock-step.
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import redis.exceptions
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    retry_if_not_exception_type,
    stop_after_delay,
    wait_exponential_jitter,
)

T = TypeVar("T")

# A Redis call is retried for this long (a failover or restart of Redis) before the error surfaces.
REDIS_RETRY_SECONDS = 10.0
# First and largest pause between Redis retries.
REDIS_RETRY_INITIAL_S = 0.05
REDIS_RETRY_MAX_S = 1.0

REDIS_TRANSIENT = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.BusyLoadingError)
# Refusals redis-py raises as ConnectionErrors: a wrong password or user stays wrong.
REDIS_REFUSED = (redis.exceptions.AuthenticationError, redis.exceptions.AuthenticationWrongNumberOfArgsError)


def redis_retrying(seconds: float = REDIS_RETRY_SECONDS) -> AsyncRetrying:
    """An AsyncRetrying for one Redis operation: transport errors only, jittered exponential backoff."""
    return AsyncRetrying(
        retry=retry_if_exception_type(REDIS_TRANSIENT) & retry_if_not_exception_type(REDIS_REFUSED),
        wait=wait_exponential_jitter(multiplier=REDIS_RETRY_INITIAL_S, max=REDIS_RETRY_MAX_S),
        stop=stop_after_delay(seconds),
        reraise=True,
    )


async def with_redis_retry(call: Callable[[], Any], seconds: float = REDIS_RETRY_SECONDS) -> Any:
    """Await ``call()`` again on transport errors for up to ``seconds``."""
    async for attempt in redis_retrying(seconds):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity reraises")
