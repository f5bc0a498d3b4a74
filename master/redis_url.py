"""How the master reaches Redis: a plain URL (``redis://``, ``rediss://``, ``unix://``) or Redis Sentinel.

``redis+sentinel://[:password@]host1:port1,host2:port2/SERVICE[?db=N]`` asks the sentinels which server is
the primary of SERVICE, on every new connection: after a failover the master's next connections go to the
new primary (redis-py's Sentinel support). The password, if any, is the data servers'; the sentinels are
asked without one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import hiredis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelManagedConnection
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError, DataError, ResponseError

SENTINEL_SCHEME = "redis+sentinel"
# How long a call waits for a free connection before failing (calls beyond the pool queue up).
POOL_WAIT_S = 20.0
# Sentinels answer in milliseconds; a dead one is skipped after this.
SENTINEL_TIMEOUT_S = 1.0
# How long a call waits for Redis's reply, and a new connection for Redis to accept it. Set here, not left to
# redis-py: its releases before 8.0 (which the dependency's floor allows) wait forever by default, and then a
# Redis that vanished without closing its connections (its host lost power, a link blackholed) held every call
# in flight until TCP gave up, ~15 minutes, even after Sentinel had promoted a replica; 8.x waits 5 s, as here.
# A timed-out call is retried on a new connection (REDIS_RETRIES), which Sentinel points at the new primary. No
# call of the master waits on purpose: its longest are bulk scripts of a few tens of ms and a WAIT for
# replicas of at most 1 s (master/scripts.py).
REDIS_REPLY_TIMEOUT_S = 5.0
REDIS_CONNECT_TIMEOUT_S = 5.0


# A command that fails with a ConnectionError (or TimeoutError) is sent again on a new connection, up to
# this many times. After a Redis restart every pooled connection is stale, and without this each one failed
# the first call made on it (UNAVAILABLE to the client: tests/faults/test_redis_restart.py); a pool made
# from a URL has no retry unless given one. A command is repeated only when its connection failed; one
# that ran but whose reply was lost is repeated too, which the scripts bear as they bear the client's own
# repeat of an UNAVAILABLE call: they are decided by what they find (tokens, states, run ids, job ids), so
# the second run changes nothing (a submit finds its id taken and says so).
REDIS_RETRIES = 3


def _retry() -> Retry:
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), REDIS_RETRIES)


class RedisUrlError(ValueError):
    """A --redis-url that cannot be used; the message says what is wrong with it."""


@dataclass(frozen=True)
class SentinelUrl:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    password: str | None
    db: int


def parse_sentinel_url(url: str) -> SentinelUrl:
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = []
    for item in hosts.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise RedisUrlError(f"redis url: sentinel {item!r} is not HOST:PORT (use {SENTINEL_SCHEME}://h1:26379,"
                                "h2:26379/SERVICE)")
        sentinels.append((host, int(port)))
    service = parts.path.strip("/")
    if not service:
        raise RedisUrlError(f"redis url: name the sentinel service, e.g. {SENTINEL_SCHEME}://h1:26379/mymaster")
    db = parse_qs(parts.query).get("db", ["0"])[0]
    if not db.isdigit():
        raise RedisUrlError(f"redis url: db {db!r} is not a number")
    return SentinelUrl(tuple(sentinels), service, parts.password, int(db))


def connect(url: str, *, decode: bool, max_connections: int, name: str = "",
            reply_timeout_s: float = REDIS_REPLY_TIMEOUT_S) -> Redis:
    """A client of the Redis at ``url`` (its connections are made on first use), each connection named
    ``name`` (``CLIENT SETNAME``) if one is given."""
    client_name = name or None
    connect_timeout_s = min(reply_timeout_s, REDIS_CONNECT_TIMEOUT_S)
    if urlsplit(url).scheme == SENTINEL_SCHEME:
        s = parse_sentinel_url(url)
        sentinel = Sentinel(list(s.sentinels), sentinel_kwargs={"socket_timeout": SENTINEL_TIMEOUT_S})
        client = sentinel.master_for(s.service, decode_responses=decode, password=s.password, db=s.db,
                                     max_connections=max_connections, health_check_interval=30, retry=_retry(),
                                     client_name=client_name, socket_timeout=reply_timeout_s,
                                     socket_connect_timeout=connect_timeout_s)
    else:
        client = Redis(connection_pool=BlockingConnectionPool.from_url(
            url, decode_responses=decode, health_check_interval=30, max_connections=max_connections,
            timeout=POOL_WAIT_S, retry=_retry(), client_name=client_name, socket_timeout=reply_timeout_s,
            socket_connect_timeout=connect_timeout_s))
    pool = client.connection_pool
    pool.connection_class = packing_in_c(pool.connection_class)
    return client


class _PackInC:
    """Commands packed into Redis's protocol by hiredis (C), as redis-py's synchronous client does when
    hiredis is installed; its asyncio client packs them in Python. Measured in a burst of 10,000 firings,
    the Python packing was a fifth of the master's firing CPU: every firing, claim and report is a script
    call of a dozen arguments."""

    def pack_command(self, *args: Any) -> list[bytes]:
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:  # hiredis takes str, int, float and bytes; redis-py sends bytes-like values too
            parts: Any = tuple(bytes(a) if isinstance(a, (bytearray, memoryview)) else a for a in args)
        try:
            return [hiredis.pack_command(parts)]
        except TypeError as exc:  # what redis-py's own packing raises for a value it cannot send
            raise DataError(str(exc)) from exc


# Error replies that say a connection to the primary reaches a replica: the primary was demoted while the
# connection stayed open. redis-py leaves such a connection (for the primary Sentinel names now) only when a
# command's own reply is READONLY; a write inside a script (Redis 6.2 wraps it in the script's error) or a WAIT
# (--redis-min-replicas) was refused on it every time, and a master that had one failed every election and
# write until it was restarted (the nemesis soak, on a loaded machine).
ON_A_REPLICA = ("-READONLY ", "WAIT cannot be used with replica instances")


class _LeavesAReplica:
    """A Sentinel-managed connection to the primary that, told by a reply that its server is a replica now,
    disconnects and raises ConnectionError: the client's retry then connects again, to the primary Sentinel
    names. Safe to retry: a replica took none of the refused call's writes."""

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        # A retry within one call reconnects here; redis-py's own reconnect at this point reuses the address
        # the connection had (the demoted primary again), where ``connect`` asks Sentinel for the primary.
        if not getattr(self, "is_connected"):
            await getattr(self, "connect")()
        await super().send_packed_command(*args, **kwargs)  # type: ignore[misc]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError as exc:
            if getattr(self, "connection_pool").is_master and any(sign in str(exc) for sign in ON_A_REPLICA):
                await getattr(self, "disconnect")()
                raise ConnectionError(f"the primary this connection reached is a replica now ({exc})") from exc
            raise


@functools.cache
def packing_in_c(cls: type[AbstractConnection]) -> type[AbstractConnection]:
    """``cls`` (a plain, TLS, Unix-socket or Sentinel-managed connection) packing its commands in C; a
    Sentinel-managed one also leaves a primary demoted under it (:class:`_LeavesAReplica`)."""
    if issubclass(cls, SentinelManagedConnection):
        return type(cls.__name__, (_PackInC, _LeavesAReplica, cls), {})
    return type(cls.__name__, (_PackInC, cls), {})
