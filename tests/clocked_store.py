"""RedisStores for unit and contract tests: each on a namespace of its own of one redis-server, leading it,
with its time from a FakeClock (``RedisStore(test_clock=...)``), so a test moves time without waiting —
or, for the contract suite, from Redis ``TIME`` as in production."""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any


from sparkyard.clock import Clock
from sparkyard.keys import Keys
from sparkyard.master.leader import take_lead
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.redis_url import connect

_namespaces = itertools.count(1)
# A quiet loop: this many turns in a row with no Redis call in flight.
QUIET_TURNS = 20


class ClockedStores:
    """Makes stores on one redis-server and closes their clients at the end (:meth:`close`)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._clients: list[Any] = []  # Any: redis-py types replies as bytes | str

    async def make(self, clock: Clock | None, cls: type[RedisStore] = RedisStore) -> RedisStore:
        """A store of ``cls`` (RedisStore or a test's subclass of it) on a new namespace, leading it; timed
        by ``clock``, or by Redis ``TIME`` (as in production) for None."""
        client = connect(f"redis://127.0.0.1:{self.port}", decode=True, max_connections=64)  # as the master does
        self._clients.append(client)
        store = cls(client, Keys(f"u{os.getpid()}x{next(_namespaces)}"), test_clock=clock)
        await take_lead(store.scripts, "unit")
        return store

    async def close(self) -> None:
        for client in self._clients:
            await client.aclose()
        self._clients.clear()


async def settle(store: RedisStore, timeout: float = 10.0) -> None:
    """Let the work this loop started (timer callbacks, background tasks) run until no Redis call has been
    in flight for :data:`QUIET_TURNS` turns of the loop; raises after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    quiet = 0
    while quiet < QUIET_TURNS:
        if loop.time() > deadline:
            raise AssertionError(f"Redis calls kept running for {timeout} s")
        await asyncio.sleep(0)
        quiet = 0 if store.redis.connection_pool._in_use_connections else quiet + 1
