"""A master's start as the first leader, in this process (:class:`sparkyard.master.server.MasterServer`) on a
real redis-server: its lease is renewed from the moment it leads, the opening of its gRPC port included. A
leader whose first renewal waited for the port (and the HTTP endpoint's start) found its lease lapsed right
after starting on a starved machine — the suite's shared master, 2026-11-30 — and restarted into the same
start again."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis

from harness import RedisServer
from sparkyard.config import MasterConfig
from sparkyard.keys import Keys
from sparkyard.master.server import MasterServer

DEADLINE_S = 60.0
RENEWALS = 3  # seen after the start, each a rise of the lease's time to live


async def test_a_first_leader_keeps_its_lease_while_its_port_opens_slowly(
        redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = MasterConfig(listen="127.0.0.1:0", redis_url=redis_server.url, namespace=f"ms{os.getpid()}",
                       data_dir=str(tmp_path))
    opening = grpc.aio._server.Server.start

    async def slow_start(self: grpc.aio.Server) -> None:
        await asyncio.sleep(2 * cfg.leader_lease_s)  # a port that opens two leases late: a starved machine
        await opening(self)

    monkeypatch.setattr(grpc.aio._server.Server, "start", slow_start)
    server = MasterServer(cfg)
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    try:
        await asyncio.wait_for(server.start(), DEADLINE_S)
        key = Keys(cfg.namespace).leader
        loop = asyncio.get_running_loop()
        deadline, renewals, last = loop.time() + DEADLINE_S, 0, await client.pttl(key)
        while renewals < RENEWALS:
            assert not server.deposed.is_set(), "the new leader lost its lease while its port opened"
            assert loop.time() < deadline, f"{renewals} renewals of the lease in {DEADLINE_S:.0f}s"
            await asyncio.sleep(0.05)  # polled with a deadline
            ttl = await client.pttl(key)
            assert ttl > 0, f"the lease lapsed (time to live {ttl})"
            renewals, last = renewals + (ttl > last), ttl
        assert server.leadership is not None and server.leadership.leading
    finally:
        await server.stop()
        await client.aclose()
