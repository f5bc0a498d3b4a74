"""How a worker speaks of a master it cannot reach (issue 25 item 5).

The link retries every second or so, and must: a master that restarts or fails over has to find its
workers back within their tasks' leases. But a wrong ``--master`` would then print a warning a second for
ever, burying everything else in the log. So the first failure is said at once, then at most one "still
cannot reach" line a minute, and the registration that ends the outage says how long it lasted.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from sparkyard.clock import Clock

# At most one "still cannot reach" line this often while the failures go on.
REMIND_EVERY_S = 60.0


def unreachable_text(exc: BaseException | None) -> str:
    """Why a connection attempt failed, in one line (a gRPC error's repr is five, with its debug string)."""
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details() or 'no details'}".replace("\n", " ")
    if isinstance(exc, asyncio.TimeoutError):
        return "no answer to the registration in time"
    return f"{type(exc).__name__}: {exc}".replace("\n", " ") if exc is not None else "unknown"


class UnreachableLog:
    """Counts the failed attempts since the last registration and decides which of them get a log line."""

    def __init__(self, clock: Clock, logger: logging.Logger, remind_every_s: float = REMIND_EVERY_S) -> None:
        self._clock, self._log, self._every = clock, logger, remind_every_s
        self.tries = 0  # failed attempts since the last registration (or start)
        self._since = 0.0  # wall time of the first of them
        self._next_line = 0.0  # monotonic time before which a failure is not logged again

    def failed(self, address: str, why: str, retry_s: float) -> None:
        now = self._clock.monotonic()
        self.tries += 1
        if self.tries == 1:
            self._since, self._next_line = self._clock.now(), now + self._every
            self._log.warning("cannot reach master %s (%s); not registered, retrying every %.1fs or so (said "
                              "again at most once a minute)", address, why, max(retry_s, 1.0))
        elif now >= self._next_line:
            self._next_line = now + self._every
            self._log.warning("still cannot reach master %s after %d tries (since %s UTC); not registered: %s",
                              address, self.tries, self._clock_text(self._since), why)
        else:
            self._log.debug("cannot reach master %s (%s): try %d, next in %.1fs", address, why, self.tries, retry_s)

    def registered(self) -> str:
        """What the registration line adds after an outage (empty when the first attempt succeeded); resets."""
        tries, self.tries = self.tries, 0
        if not tries:
            return ""
        return f" after {tries} failed tries (since {self._clock_text(self._since)} UTC)"

    @staticmethod
    def _clock_text(wall: float) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(wall))
