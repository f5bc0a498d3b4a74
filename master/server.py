"""One master process: Redis (embedded or given), the components, and the gRPC server around them.

Every master on one Redis namespace takes part in the leader election (:mod:`sparkyard.master.leader`);
the leader does the work, the others stand by and refuse calls naming the leader. A master that can lead
at start leads before its port opens; one that wins an election later starts leading then. Either way the
components rebuild their memory from Redis when leading starts (schedule entries into the wheel, retry
backoffs, fixed-delay jobs that await a run); workers then connect and re-declare their leases. A master
that loses the leadership stops (its writes are fenced from that moment) and ``sparkyard-master``
starts it again as a standby.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from redis.asyncio import Redis

from sparkyard.clock import Clock, SystemClock
from sparkyard.config import MasterConfig, read_file
from sparkyard.keys import Keys
from sparkyard.addresses import in_use, is_loopback
from sparkyard.master.assembly import Master, build_master
from sparkyard.master.auth import Role, RoleAuthInterceptor
from sparkyard.master.embedded_redis import EmbeddedRedis
from sparkyard.master.leader import LeaderGate, Leadership, connection_name
from sparkyard.master.leader_link import LeaderLink, PeerTls
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.request_guard import RequestGuard
from sparkyard.master.bundles import BundleStore
from sparkyard.master.redis_bundles import RedisBundles
from sparkyard.master.services import BundleService, ClusterService, JobService, WorkerService, master_id
from sparkyard.master.redis_store import RedisStore
from sparkyard.master.redis_url import RedisUrlError, connect
from sparkyard.master.timer import SystemTimer
from sparkyard.retry import REDIS_REFUSED, REDIS_TRANSIENT, with_redis_retry
from sparkyard.startup import StartupError
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

if TYPE_CHECKING:
    from aiohttp import web

    from sparkyard.httpserve import HttpEndpoint

log = logging.getLogger(__name__)

# Connections to Redis: calls beyond this wait for a free one (up to the wait) instead of failing, so
# a burst of requests queues in the master rather than overwhelming Redis with connections.
REDIS_CONNECTIONS = 64
# How long a stop waits for the election loop to end (it ends by itself once resigned).
ELECTION_STOP_WAIT_S = 2.0
# How long a stop waits for Redis connections to close.
REDIS_CLOSE_WAIT_S = 3.0
# gRPC itself refuses requests this much larger than --max-message (RESOURCE_EXHAUSTED, "Received message
# larger than max"); between the two the master refuses them naming --max-message (master/request_guard.py).
MESSAGE_SLACK_BYTES = 1024 * 1024
# Replies up to this size (a long listing, a log chunk): what the master sends is bounded by its own limits.
MAX_SEND_BYTES = 64 * 1024 * 1024
# Keepalive pings let both sides notice a dead peer on an idle stream (a worker with no tasks).
KEEPALIVE_MS = 10_000


def advertised(address: str) -> str:
    """The address others reach this master at: a wildcard listen address becomes the host name."""
    host, _, port = address.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = socket.gethostname()
    return f"{host}:{port}"


def concrete_port(listen: str) -> str:
    """``listen`` with port 0 replaced by a free port, so the master knows the address it advertises (its
    leader record, its id) before the gRPC server is built around its election."""
    host, _, port = listen.rpartition(":")
    if port not in ("", "0"):
        return listen
    with socket.socket(socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET) as probe:
        probe.bind((host.strip("[]") or "0.0.0.0", 0))
        return f"{host}:{probe.getsockname()[1]}"


def redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def check_exposure(cfg: MasterConfig) -> None:
    """Refuse a non-loopback address (gRPC ``--listen`` or ``--http``) without TLS and a token (unless
    ``--insecure``): anyone who can reach the port could run code on the workers, or read the tokens and
    tasks off the wire."""
    if cfg.insecure:
        return
    missing = [what for what, given in (("TLS (--tls-cert, --tls-key)", cfg.tls_cert),
                                        ("a token (--token or --token-file)", cfg.token)) if not given]
    for flag, address in (("listen on", cfg.listen), ("serve http on", cfg.http)):
        if missing and address and not is_loopback(address.rpartition(":")[0]):
            raise StartupError(f"refusing to {flag} {address} without {' and '.join(missing)}: anyone who can "
                               "reach it could run code on your workers; give them, use 127.0.0.1, or pass "
                               "--insecure")


def tls_credentials(cfg: MasterConfig) -> grpc.ServerCredentials | None:
    """The port's TLS credentials (None: plaintext); with ``tls_client_ca`` callers must show a certificate
    signed by that CA. An unreadable file is a :class:`ConfigError` naming the setting."""
    if not cfg.tls_cert:
        return None
    pair = (read_file(cfg.tls_key, "tls_key"), read_file(cfg.tls_cert, "tls_cert"))
    client_ca = read_file(cfg.tls_client_ca, "tls_client_ca") if cfg.tls_client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=client_ca is not None)


class MasterServer:
    """The process around one master (:func:`sparkyard.master.assembly.build_master`): Redis, the gRPC port
    (bound), the HTTP endpoint, the election, the gRPC port's opening; started in that order."""

    def __init__(self, cfg: MasterConfig, clock: Clock | None = None) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.port = 0
        self.redis_url = ""
        self._embedded: EmbeddedRedis | None = None
        self._redis: Redis | None = None
        self._raw_redis: Redis | None = None
        self._server: grpc.aio.Server | None = None
        self._health: health.aio.HealthServicer | None = None
        self.master: Master | None = None
        self.leadership: Leadership | None = None
        self._election: asyncio.Task[None] | None = None
        self.deposed = asyncio.Event()  # set when this master lost the leadership: it must stop
        self._stopped = asyncio.Event()
        self.metrics = MasterMetrics()
        self.http: HttpEndpoint | None = None
        self._link: LeaderLink | None = None
        self._listen = cfg.listen
        self._address = ""  # what others reach this master at, once its port is known

    async def start(self) -> None:
        cfg = self.cfg
        host = cfg.listen.rpartition(":")[0]
        server_credentials = tls_credentials(cfg)
        self._listen = concrete_port(cfg.listen)
        self._address = advertised(cfg.advertise or self._listen)
        port = self._listen.rpartition(":")[2]
        taken = in_use(host, int(port)) if port.isdigit() else ""
        if taken:  # before Redis is opened or started for nothing
            raise StartupError(f"cannot listen on {cfg.listen}: {taken}")
        redis = await self._open_redis()
        store = RedisStore(redis, Keys(cfg.namespace), priority_aging_ms=int(cfg.priority_aging_s * 1000),
                           min_replicas=cfg.redis_min_replicas, observe=self.metrics.timed_call)
        assert self._raw_redis is not None
        bundles = BundleStore(RedisBundles(self._raw_redis, store.keys, store.scripts), cfg.max_bundle_bytes)
        timer = SystemTimer(self.clock)
        timer.start()
        master = self.master = build_master(cfg, store, self.clock, timer, bundles, self.metrics)
        await master.start()

        self._server = server = self._grpc_server(store, master)
        names = [d.full_name for d in pb.DESCRIPTOR.services_by_name.values()]
        try:
            self.port = (server.add_insecure_port(self._listen) if server_credentials is None
                         else server.add_secure_port(self._listen, server_credentials))
        except RuntimeError as exc:
            raise StartupError(f"cannot listen on {cfg.listen}: {exc}") from None
        if self.port == 0:
            raise StartupError(f"cannot listen on {cfg.listen} (address in use?)")
        leadership = self.leadership
        assert leadership is not None
        if cfg.http:
            # Before the lease is taken: its imports (aiohttp, the console) hold the event loop for a third of a
            # start's CPU — seconds on a starved machine — and no renewal runs meanwhile.
            await self._start_http(store, master, leadership)
        if await leadership.first_election():  # lead before the port opens when nobody else leads
            await leadership.lead_first(master.lead(leadership.epoch))
            if self.deposed.is_set():  # lost the lease while starting: no port, no election; main restarts it
                return
        # Renewals from here on, the port's opening included: a leader whose first renewal waited for it (and for
        # the HTTP start) found its lease lapsed right after starting on a starved machine, and restarted into the
        # same start again.
        self._election = asyncio.create_task(leadership.run(), name="leader-election")
        await server.start()
        assert self._health is not None
        for name in ["", *names]:
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("master %s listening on %s:%d as %s (redis %s)", leadership.master_id, host, self.port,
                 leadership.role, redact(self.redis_url))

    async def _open_redis(self) -> Redis:
        cfg = self.cfg
        if cfg.redis_url:
            self.redis_url = cfg.redis_url
        else:
            self._embedded = EmbeddedRedis(Path(cfg.data_dir) / "redis")
            self.redis_url = await asyncio.to_thread(self._embedded.start)
        # Every connection carries this master's id: a standby that sees none of its leader's takes over
        # without waiting out the lease (master/leader.py).
        name = connection_name(cfg.namespace, master_id(self._address))
        try:
            self._redis = connect(self.redis_url, decode=True, max_connections=REDIS_CONNECTIONS, name=name)
            # Bundles are bytes: their client does not decode replies.
            self._raw_redis = connect(self.redis_url, decode=False, max_connections=REDIS_CONNECTIONS // 4, name=name)
        except RedisUrlError as exc:
            raise StartupError(str(exc)) from None
        await self._reach_redis(self._redis)
        return self._redis

    def _grpc_server(self, store: RedisStore, master: Master) -> grpc.aio.Server:
        """The port's services around the master, behind the interceptors (the guard innermost: a call
        refused for its token or by a standby is refused unread)."""
        cfg = self.cfg
        assert self._redis is not None
        address = self._address
        self.leadership = leadership = Leadership(store, master_id(address), address, cfg.leader_lease_s,
                                                  self.clock, self._elected, self._lost)
        server = grpc.aio.server(
            interceptors=[RoleAuthInterceptor({Role.ADMIN: cfg.token, Role.WORKER: cfg.worker_token,
                                               Role.VIEWER: cfg.viewer_token}), LeaderGate(leadership),
                          RequestGuard(cfg.max_message_bytes)],
            options=[
                ("grpc.max_receive_message_length", cfg.max_message_bytes + MESSAGE_SLACK_BYTES),
                ("grpc.max_send_message_length", MAX_SEND_BYTES),
                ("grpc.keepalive_time_ms", KEEPALIVE_MS),
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
                # gRPC sets SO_REUSEPORT by default: a second master on a taken port would then listen too,
                # and the kernel would split connections between two clusters. Refuse it instead.
                ("grpc.so_reuseport", 0),
            ],
        )
        started_at = self.clock.now()
        pbg.add_JobServiceServicer_to_server(JobService(master.jobs, master.run_waits, master.logs, master.backfiller), server)
        pbg.add_WorkerServiceServicer_to_server(WorkerService(master.connection, store), server)
        pbg.add_BundleServiceServicer_to_server(BundleService(master.bundles), server)
        pbg.add_ClusterServiceServicer_to_server(
            ClusterService(store, master.registry, leadership, redact(self.redis_url), started_at,
                           lambda: master.timer.size),
            server,
        )
        self._health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        names = [d.full_name for d in pb.DESCRIPTOR.services_by_name.values()]
        reflection.enable_server_reflection([*names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
        return server

    async def _start_http(self, store: RedisStore, master: Master, leadership: Leadership) -> None:
        # Imported here, not at the top: aiohttp is a third of a master's start-up CPU (~0.3 of ~1 s), and
        # only a master given --http serves pages (a restart after kill -9 is that much sooner without).
        from sparkyard.httpserve import Access, HttpEndpoint, Route
        from sparkyard.master import console

        cfg = self.cfg
        self._link = LeaderLink(leadership, PeerTls.of(cfg))
        api = console.ConsoleApi(master.jobs, store, master.registry, self.clock, master.logs, leadership, self._link,
                                 master.backfiller)
        routes = [Route("GET", "/metrics", self._metrics_page, Access.READ), *api.routes()]
        self.http = HttpEndpoint(cfg.http, routes, admin=cfg.token, viewer=cfg.viewer_token,
                                 static={"/static": console.FILES},
                                 tls=(cfg.tls_cert, cfg.tls_key) if cfg.tls_cert else None)
        await self.http.start()

    async def _reach_redis(self, client: Redis) -> None:
        """Wait for Redis however long it takes, saying so every ``--redis-connect-wait``: Redis may be lost
        at any moment, a first start included (a host booting its masters before its Redis, a failover
        under way), and a master that gave up would need someone to start it again. Only a refused login
        or a reply that is not Redis ends the start: waiting cannot fix those."""
        waited = 0.0
        while True:
            try:
                await with_redis_retry(client.ping, self.cfg.redis_connect_wait_s)
                return
            except REDIS_TRANSIENT as exc:
                if isinstance(exc, REDIS_REFUSED):  # a refused login stays refused
                    raise StartupError(f"cannot reach redis at {redact(self.redis_url)}: {exc}") from None
                waited += self.cfg.redis_connect_wait_s
                log.warning("redis at %s unreachable for %.0fs (%s); still waiting", redact(self.redis_url), waited,
                            exc)
            except Exception as exc:
                raise StartupError(f"cannot reach redis at {redact(self.redis_url)}: {exc}") from None

    async def _metrics_page(self, request: web.Request) -> web.Response:
        from sparkyard.httpserve import metrics_response  # loaded by _start_http already

        assert self.master is not None and self.leadership is not None
        master, leadership = self.master, self.leadership
        body = await self.metrics.render(master.registry.sessions(), leadership.leading, leadership.epoch,
                                         master.store.queue_depths, master.store.ping,
                                         master.store.running_pipeline_runs)
        return metrics_response(body)

    async def _elected(self, epoch: int) -> None:
        assert self.master is not None
        await self.master.lead(epoch)

    async def _lost(self, why: str) -> None:
        log.warning("lost the leadership (%s): stopping; writes are fenced from now on", why)
        self.deposed.set()

    @property
    def address(self) -> str:
        return f"{self.cfg.listen.rpartition(':')[0]}:{self.port}"

    async def stop(self) -> None:
        """Graceful stop: refuse new calls, let in-flight ones finish (grace), then release everything."""
        if self._stopped.is_set():
            return
        started = time.monotonic()
        # Give the lease up first: a standby takes over at its next try, not after the lease. Both waits are
        # bounded: a cancel that lands while redis-py opens a connection can be lost.
        if self.leadership is not None:
            await asyncio.wait({asyncio.ensure_future(self.leadership.resign())}, timeout=ELECTION_STOP_WAIT_S)
        if self._election is not None:
            self._election.cancel()
            await asyncio.wait({self._election}, timeout=ELECTION_STOP_WAIT_S)
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self.http is not None:
            await self.http.stop()
        if self._link is not None:
            await self._link.close()
        if self.master is not None:
            await self.master.stop_leading()
        if self._server is not None:
            await self._server.stop(self.cfg.shutdown_grace_s)
        if self.master is not None:
            await self.master.close(self.cfg.shutdown_grace_s)
        for client in (self._raw_redis, self._redis):
            if client is not None:
                try:  # a connection a cancelled call left in use can hold this up: the process ends anyway
                    await asyncio.wait_for(client.aclose(), REDIS_CLOSE_WAIT_S)
                except asyncio.TimeoutError:
                    log.warning("redis connections did not close within %.0fs", REDIS_CLOSE_WAIT_S)
        await self._stop_embedded()
        log.info("master stopped in %.1fs", time.monotonic() - started)
        self._stopped.set()

    async def _stop_embedded(self) -> None:
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.stop)
            self._embedded = None

    async def abandon(self) -> None:
        """After losing the leadership: end at once, without a graceful stop (its writes are fenced; a
        fresh process replaces this one, and the exec closes every socket). Only an embedded Redis is
        stopped, so the new process can start it again."""
        await self._stop_embedded()
