"""A master built by its composition root (:func:`sparkyard.master.assembly.build_master`), as every master
is, over a RedisStore timed by a FakeClock (tests/clocked_store.py): no gRPC, no waiting.

The rig's tests never submit a job that carries a bundle; its bundle door shares the store's client (which
decodes replies, so it could not read a bundle's bytes back)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import AsyncIterator

from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.master.assembly import build_master
from sparkyard.master.bundles import BundleStore
from sparkyard.master.redis_bundles import RedisBundles
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.timer import SystemTimer

HORIZON_MS = 60_000


class MasterRig:
    def __init__(self, clock: FakeClock, store: RedisStore, cfg: MasterConfig | None = None) -> None:
        cfg = cfg or MasterConfig()
        self.clock = clock
        self.store = store
        self.timer = SystemTimer(self.clock)
        self.timer.start()
        bundles = BundleStore(RedisBundles(store.redis, store.keys, store.scripts), 1 << 20)
        self.master = build_master(cfg.model_copy(update={"preload_horizon_s": HORIZON_MS / 1000}), self.store,
                                   self.clock, self.timer, bundles)
        self.arming = self.master.arming
        self.outcomes = self.master.outcomes

    @contextlib.asynccontextmanager
    async def firing(self) -> AsyncIterator[None]:
        """The preloader's firing loop running (its timers expire as the fake clock moves), stopped after."""
        await self.master.preloader.start()
        try:
            yield
        finally:
            await self.master.preloader.stop()

    def now_ms(self) -> int:
        return round(self.clock.now() * 1000)

    async def settle(self) -> None:
        """Let the background work spawned by run ends and refreshes finish (within 10 s)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10.0
        await asyncio.sleep(0)
        while self.master.background._tasks:
            if loop.time() > deadline:
                raise AssertionError("background work did not finish")
            await asyncio.sleep(0)
