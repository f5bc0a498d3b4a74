"""A master's in-memory parts over a RedisStore timed by a FakeClock (tests/clocked_store.py), for unit
tests of MasterCore and the Preloader: no gRPC, no waiting."""

from __future__ import annotations

from sparkyard.clock import FakeClock
from sparkyard.config import MasterConfig
from sparkyard.master.arming import Arming
from sparkyard.master.core import MasterCore
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.timer import SystemTimer

HORIZON_MS = 60_000


class MasterRig:
    def __init__(self, clock: FakeClock, store: RedisStore, cfg: MasterConfig | None = None) -> None:
        self.clock = clock
        self.store = store
        self.timer = SystemTimer(self.clock)
        self.timer.start()
        self.arming = Arming(self.timer, self.clock, HORIZON_MS)
        self.core = MasterCore(cfg or MasterConfig(), self.store, self.clock, self.timer, arm=self.arming.consider)

    def now_ms(self) -> int:
        return round(self.clock.now() * 1000)
