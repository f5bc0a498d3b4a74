"""Redis for the soak: a primary and two replicas, each on a host of its own, watched by one sentinel on a fourth.

Both data servers persist every write (``appendonly yes``, ``appendfsync always``): a node killed with -9
and started again comes back with its data, so a restart never turns an empty server into a primary that
the other would then copy. The sentinel (quorum 1, down after 1 s) promotes the replica when the primary
stops answering, and turns a returning old primary into a replica of the new one. Masters are given the
sentinel's URL and ``--redis-min-replicas 2``: no write is used before both replicas have it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from netcluster import REDIS_PORT, HostProcess, NetCluster, wait_until
from sparkyard.master.embedded_redis import find_redis_server

# A primary with no replica that acknowledged within 2 s refuses writes: one paused past a failover and
# woken (still a primary in its own eyes until the sentinel reconfigures it, up to 10 s later) refuses the
# writes of a master still connected to it, instead of taking them and losing them when it is made a
# replica. Without it the soak lost a job that had run (seed 7, 3 minutes: docs/reliability.md). Two
# replicas, so that one node down still leaves the primary a replica to write with.
FENCE_STALE_PRIMARY = ("--min-replicas-to-write", "1", "--min-replicas-max-lag", "2")
SENTINEL_PORT = 26379
SERVICE = "sy-soak"
DATA_NODES = ("redis", "redis2", "redis3")


@dataclass
class RedisHA:
    net: NetCluster
    nodes: dict[str, HostProcess] = field(default_factory=dict)  # the data servers and ``sentinel``

    def start(self) -> str:
        """Primary ``redis``, replicas ``redis2`` and ``redis3``, the sentinel; returns the masters' Redis URL."""
        self.start_node("redis")
        for replica in DATA_NODES[1:]:
            self.start_node(replica, replica_of=self.net.add_host("redis").address)
        host = self.net.add_host("sentinel")
        conf = self.net.root / "sentinel" / "sentinel.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(f"port {SENTINEL_PORT}\nbind {host.address}\ndir {conf.parent}\nprotected-mode no\n"
                        f"sentinel monitor {SERVICE} {self.net.add_host('redis').address} {REDIS_PORT} 1\n"
                        f"sentinel down-after-milliseconds {SERVICE} 2000\n"
                        f"sentinel failover-timeout {SERVICE} 5000\n")
        self.nodes["sentinel"] = proc = self.net.spawn("sentinel", host, [find_redis_server(), str(conf), "--sentinel"])
        wait_until(lambda: self._sentinel().execute_command("SENTINEL", "replicas", SERVICE), 60,
                   "the sentinel to see the replica", watch=(proc,))
        self.net.redis = self.nodes["redis"]  # netcluster's notion of "the" Redis: the first primary
        return f"redis+sentinel://{host.address}:{SENTINEL_PORT}/{SERVICE}"

    def start_node(self, name: str, replica_of: str | None = None) -> HostProcess:
        """Data server ``name`` (first start or restart: same data directory)."""
        host = self.net.add_host(name)
        data = self.net.root / name
        data.mkdir(parents=True, exist_ok=True)
        argv = [find_redis_server(), "--bind", host.address, "--port", str(REDIS_PORT), "--protected-mode", "no",
                "--dir", str(data), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
                "--maxmemory-policy", "noeviction", *FENCE_STALE_PRIMARY]
        if replica_of:
            argv += ["--replicaof", replica_of, str(REDIS_PORT)]
        self.nodes[name] = proc = self.net.spawn(name, host, argv)

        def pong() -> bool:
            with redis.Redis(host=host.address, port=REDIS_PORT, socket_timeout=1, socket_connect_timeout=1) as r:
                return bool(r.ping())

        wait_until(pong, 30, f"redis-server {name} to answer PING", watch=(proc,))
        return proc

    def restart(self, name: str) -> None:
        """Start data server ``name`` again; a restarted one is told nothing: the sentinel makes it a replica of
        whichever node it promoted meanwhile."""
        assert not self.nodes[name].alive(), f"{name} still runs"
        self.start_node(name)

    def _sentinel(self) -> redis.Redis:
        return redis.Redis(host=self.net.host("sentinel").address, port=SENTINEL_PORT, socket_timeout=2,
                           socket_connect_timeout=2, decode_responses=True)

    def primary(self) -> str:
        """The data node the sentinel names as primary (``redis`` if it cannot be asked)."""
        try:
            with self._sentinel() as s:
                address = s.execute_command("SENTINEL", "get-master-addr-by-name", SERVICE)[0]
        except redis.RedisError:
            return "redis"
        return next((n for n in DATA_NODES if self.net.host(n).address == address), "redis")
