"""A Redis that stops answering without closing its connections (its host lost power, a blackholed link)
fails the master's calls after a bounded wait instead of holding them until TCP gives up (~15 minutes):
a server here accepts connections and never says a word."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Iterator

import pytest
import redis.exceptions

from sparkyard.master.redis_url import connect


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port whose server accepts connections, reads what comes and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not done.is_set():
            try:
                accepted.append(listener.accept()[0])
            except (socket.timeout, OSError):
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        listener.close()


async def test_a_call_to_a_redis_that_never_answers_fails_within_its_timeouts(silent_server: int) -> None:
    client = connect(f"redis://127.0.0.1:{silent_server}/0", decode=True, max_connections=2, name="m1",
                     reply_timeout_s=0.05)
    try:
        with pytest.raises(redis.exceptions.TimeoutError):
            # The guard only ends the test if the call would hang: the call itself must fail first.
            await asyncio.wait_for(client.ping(), 60)
    finally:
        await client.aclose()
