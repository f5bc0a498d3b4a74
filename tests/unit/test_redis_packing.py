"""The master's Redis commands are packed by hiredis (C), byte for byte as redis-py's Python packing packs
them; every store test in the fast tier talks to its redis-server through the same connections."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.sentinel import SentinelManagedConnection
from redis.exceptions import DataError

from sparkyard.master.redis_url import connect, packing_in_c

COMMANDS = [
    ("EVALSHA", "0123abcd", 3, "sy:run:r1", "sy:task:r1.00000", "sy:ready", "ü€", b"\x00\xff\r\n", 1.5, -7, 10**20, ""),
    ("CLIENT SETNAME", "master"),  # a command of two words, split as redis-py splits it
    (b"HSET K", "f", bytearray(b"x"), memoryview(b"yz")),
    ("SET", "k", "v" * 100_000),  # larger than redis-py's buffer cutoff, which chunks its own output
]


@pytest.mark.parametrize("command", COMMANDS, ids=[str(c[0]) for c in COMMANDS])
def test_a_command_packs_to_the_same_bytes_as_redis_pys_own_packing(command: tuple[object, ...]) -> None:
    ours = packing_in_c(Connection)()
    assert b"".join(ours.pack_command(*command)) == b"".join(Connection().pack_command(*command))
    assert b"".join(ours.pack_commands([command, command])) == b"".join(Connection().pack_commands([command] * 2))


@pytest.mark.parametrize("value", [True, None, object()])
def test_a_value_redis_cannot_take_is_the_same_data_error(value: object) -> None:
    with pytest.raises(DataError):
        Connection().pack_command("SET", "k", value)
    with pytest.raises(DataError):
        packing_in_c(Connection)().pack_command("SET", "k", value)


@pytest.mark.parametrize("url, base", [("redis://127.0.0.1:1", Connection), ("rediss://127.0.0.1:1", SSLConnection),
                                       ("unix:///tmp/redis.sock", UnixDomainSocketConnection),
                                       ("redis+sentinel://127.0.0.1:1/svc", SentinelManagedConnection)])
def test_every_kind_of_connection_the_master_makes_packs_in_c(url: str, base: type) -> None:
    cls = connect(url, decode=True, max_connections=4).connection_pool.connection_class
    assert issubclass(cls, base) and cls.pack_command is packing_in_c(base).pack_command
    assert cls.pack_command is not base.pack_command
