"""The worker's current connection to a master, as its parts other than the master link use it.

The master link (worker/master_link.py) opens and closes connections; the result ledger sends its reports
on the current one, the bundle cache downloads over its channel, the fence desk confirms tokens over it,
and the attempt slots read the lease terms the master gave on registering. They are given this object at
construction, so none of them holds the link (which holds them).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import grpc

from sparkyard.config import DEFAULT_HEARTBEAT_S, DEFAULT_LEASE_S
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.fence_desk import confirm_with_master


@dataclass
class LeaseTerms:
    """What the master said on registering: how long a lease lasts unrenewed, how often to heartbeat, and
    how often it speaks itself (0: it names no interval; its heartbeat acknowledgements count). The master's
    defaults until it says otherwise."""

    lease_s: float = DEFAULT_LEASE_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    liveness_s: float = 0.0

    def agreed(self, reg: pb.Registered) -> None:
        self.lease_s = reg.lease.ToMilliseconds() / 1000 or DEFAULT_LEASE_S
        self.heartbeat_s = reg.heartbeat_interval.ToMilliseconds() / 1000 or DEFAULT_HEARTBEAT_S
        self.liveness_s = reg.liveness_interval.ToMilliseconds() / 1000


class Connection:
    def __init__(self, token: str) -> None:
        self._metadata = [("authorization", f"Bearer {token}")] if token else []
        self.channel: grpc.aio.Channel | None = None  # of the master last connected to (None before)
        self._outbound: asyncio.Queue[pb.WorkerMessage | None] | None = None  # set while registered
        self.terms = LeaseTerms()

    def metadata(self) -> list[tuple[str, str]]:
        return self._metadata

    def opened(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel

    def registered(self, outbound: asyncio.Queue[pb.WorkerMessage | None]) -> None:
        self._outbound = outbound

    def lost(self) -> None:
        self._outbound = None

    @property
    def up(self) -> bool:
        return self._outbound is not None

    def send(self, message: pb.WorkerMessage) -> bool:
        """Queue ``message`` on the registered stream; False while there is none."""
        outbound = self._outbound
        if outbound is None:
            return False
        outbound.put_nowait(message)
        return True

    async def confirm_fence(self, task_id: str, token: int) -> tuple[bool, str]:
        return await confirm_with_master(self.channel, self.metadata(), task_id, token)
