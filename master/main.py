"""``sparkyard-master``: run a master until SIGTERM/SIGINT.

    sparkyard-master [--listen 127.0.0.1:7070] [--redis-url URL] [--data-dir DIR] [--config FILE]
                     [--token-file F] [--worker-token-file F] [--viewer-token-file F]
                     [--tls-cert CERT --tls-key KEY [--tls-client-ca CA]] [--insecure]

A non-loopback ``--listen`` needs TLS and a token, or ``--insecure`` (docs/security.md).

Without ``--redis-url`` the master starts its own Redis in ``<data-dir>/redis`` (AOF on) and stops it on
exit. Prints one line ``sparkyard-master listening on HOST:PORT`` on stdout once it accepts calls (with
``--listen HOST:0`` the kernel picks the port, which is how tests start it).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from sparkyard.config import ConfigError, MasterConfig, load
from sparkyard.logsetup import configure_logging
from sparkyard.profiling import profiled
from sparkyard.master.embedded_redis import EmbeddedRedisError
from sparkyard.master.server import MasterServer, StartupError, check_exposure, redact

log = logging.getLogger("sparkyard.master")

# The master holds up to millions of long-lived timer objects that form no reference cycles; CPython's
# default thresholds make full collections walk all of them over and over (timer add at 1M pending:
# 0.60 M/s default vs 1.28 M/s with these thresholds, docs/timer.md).
GC_THRESHOLDS = (100_000, 50, 100)
# How long tasks still running after a stop get to end before the process exits anyway.
LEFTOVER_WAIT_S = 2.0


# The token of each role (docs/security.md): flag prefix and what it allows.
TOKEN_ROLES = (
    ("", "admin token: every call"),
    ("worker-", "workers' token: their stream and bundle fetches only (default: workers use the admin token)"),
    ("viewer-", "read-only token"),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sparkyard-master", description="Run a Sparkyard master.")
    p.add_argument("--listen", help="HOST:PORT to serve gRPC on (default 127.0.0.1:7070; port 0 = any free)")
    p.add_argument("--redis-url", help="redis://…, unix://… or redis+sentinel://h1:26379,h2:26379/SERVICE "
                   "(default: an embedded Redis in the data dir)")
    p.add_argument("--redis-connect-wait", dest="redis_connect_wait_s",
                   help="how long a start waits for Redis to answer, e.g. 30s (default 30s; a master restarted after "
                   "losing the leadership waits as long as it takes)")
    p.add_argument("--redis-min-replicas", dest="redis_min_replicas", type=int,
                   help="acknowledge a submit only once this many Redis replicas have it (WAIT; default 0)")
    p.add_argument("--data-dir", help="directory of the embedded Redis and master files (default .sparkyard)")
    p.add_argument("--config", help="TOML file with a [master] table")
    for role, text in TOKEN_ROLES:
        var = f"SPARKYARD_{role.upper().replace('-', '_')}TOKEN"
        p.add_argument(f"--{role}token", help=f"{text} (or {var}); --{role}token-file keeps it out of `ps`")
        p.add_argument(f"--{role}token-file", help=f"file holding the {role.replace('-', ' ')}token (or {var}_FILE)")
    p.add_argument("--tls-cert", help="this master's certificate (PEM): TLS on its port (or SPARKYARD_TLS_CERT)")
    p.add_argument("--tls-key", help="the key of --tls-cert (or SPARKYARD_TLS_KEY)")
    p.add_argument("--tls-client-ca", help="CA certificate callers' certificates must be signed by: mutual TLS "
                   "(or SPARKYARD_TLS_CLIENT_CA)")
    p.add_argument("--tls-ca", help="CA certificate of the other masters' certificates, for a standby's web console "
                   "to reach the leader (default: --tls-client-ca)")
    p.add_argument("--insecure", action="store_true", default=None,
                   help="allow listening on a non-loopback address without TLS or a token")
    p.add_argument("--namespace", help="Redis key prefix (default sy), to share one Redis between clusters")
    p.add_argument("--lease", dest="lease_s", help="task lease, e.g. 15s or 1m (default 15s)")
    p.add_argument("--heartbeat", dest="heartbeat_s", help="worker heartbeat, e.g. 3s (default 3s)")
    p.add_argument("--reaper-interval", dest="reaper_interval_s", help="time between lease sweeps (default 1s)")
    p.add_argument("--misfire-threshold", dest="misfire_threshold_s",
                   help="how late a firing may be before it counts as missed (default 5s)")
    p.add_argument("--preload-horizon", dest="preload_horizon_s",
                   help="how far ahead the schedule is loaded into the timing wheel (default 1m; re-read every half)")
    p.add_argument("--leader-lease", dest="leader_lease_s",
                   help="the leader's lease; a standby takes over about this long after it dies (default 3s)")
    p.add_argument("--http", help="HOST:PORT to serve /metrics (Prometheus) on (default: none; port 0 = any free)")
    p.add_argument("--advertise", help="HOST:PORT clients and workers reach this master at (default: --listen)")
    p.add_argument("--max-bundle", dest="max_bundle_bytes",
                   help="largest bundle of shipped code a job may upload, e.g. 64m (default 64m)")
    p.add_argument("--max-message", dest="max_message_bytes",
                   help="largest gRPC request the master accepts, e.g. 64m (default 64m; docs/limits.md)")
    p.add_argument("--max-args", dest="max_args_bytes", help="largest total of a job's arguments (default 1m)")
    p.add_argument("--max-env", dest="max_env_bytes", help="largest total of a job's environment (default 64k)")
    p.add_argument("--max-conf", dest="max_conf_bytes", help="largest total of a job's Spark conf (default 256k)")
    p.add_argument("--max-inputs", dest="max_inputs", type=int, help="most inputs of one run (default 100000)")
    p.add_argument("--on-failure", dest="on_failure", metavar="URL",
                   help="POST a JSON body here when a run of a job that names no --on-failure fails")
    p.add_argument("--on-success", dest="on_success", metavar="URL",
                   help="POST a JSON body here when a run of a job that names no --on-success succeeds")
    p.add_argument("--keep-runs", dest="keep_runs", type=int,
                   help="ended runs each job keeps, newest first; older ones are deleted (default 100)")
    p.add_argument("--history-max-age", dest="history_max_age_s",
                   help="ended runs and ended jobs older than this are deleted, e.g. 7d or 12h (default 7d)")
    p.add_argument("--log-level", help="DEBUG, INFO (default), WARNING, ERROR")
    # Set on the fresh process of a master that lost the leadership: it waits for Redis however long it takes.
    p.add_argument("--restarted", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def restart_argv(argv: list[str], listen: str, port: int) -> list[str]:
    """The arguments of the fresh process: the same, except that a master told to listen on port 0 (any
    free port) keeps the port it got. Workers and clients know it by that address, and its master id (that
    address) is what lets it take its own lease back at once; on a new port it would be out of their
    reach for good. A later ``--listen`` wins over an earlier one, and over the config file and env."""
    host, _, wanted = listen.rpartition(":")
    kept = argv if wanted != "0" else [*argv, "--listen", f"{host}:{port}"]
    return kept if "--restarted" in kept else [*kept, "--restarted"]


def _restart_as_standby(argv: list[str]) -> None:
    """Replace this process with a fresh master: nothing of the old leader's memory can act again (the
    exec also closes every socket, so workers and clients reconnect at once). It keeps the pid, so
    supervisors and tests follow the same process, and comes back as a standby (on the same address:
    :func:`restart_argv`)."""
    log.warning("restarting as a standby")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "sparkyard.master.main", *argv])


async def _end_leftover_tasks() -> None:
    """After a stop, cancel what is still running; a task that ignores its cancel (one lost inside a
    library call) must not keep the process alive after everything was closed."""
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in leftover:
        task.cancel()
    if leftover:
        _, stuck = await asyncio.wait(leftover, timeout=LEFTOVER_WAIT_S)
        if stuck:
            log.warning("%d tasks did not end after the stop (%s); exiting anyway", len(stuck),
                        ", ".join(sorted(t.get_name() for t in stuck)))
            logging.shutdown()
            os._exit(0)


async def _run(cfg: MasterConfig, argv: list[str], restarted: bool) -> int:
    server = MasterServer(cfg, wait_for_redis=restarted)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A stop asked while it starts (waiting for Redis, for one) ends the start-up there.
    starting = asyncio.ensure_future(server.start())
    asked = asyncio.ensure_future(stop.wait())
    await asyncio.wait({starting, asked}, return_when=asyncio.FIRST_COMPLETED)
    asked.cancel()
    if not starting.done():
        log.info("signal received while starting; stopping")
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await server.stop()
        await _end_leftover_tasks()
        return 0
    try:
        starting.result()
    except (StartupError, EmbeddedRedisError, ConfigError) as exc:
        print(f"sparkyard-master: {exc}", file=sys.stderr)
        await server.stop()
        return 2
    gc.freeze()  # start-up objects (modules, config, gRPC) never need collecting
    print(f"sparkyard-master listening on {server.address} (redis {redact(server.redis_url)})", flush=True)
    signalled = asyncio.ensure_future(stop.wait())
    deposed = asyncio.ensure_future(server.deposed.wait())
    await asyncio.wait({signalled, deposed}, return_when=asyncio.FIRST_COMPLETED)
    signalled.cancel()
    deposed.cancel()
    if stop.is_set():
        log.info("signal received; shutting down")
        await server.stop()
        await _end_leftover_tasks()
        return 0
    await server.abandon()
    # From inside the loop: no task of the old leader gets to finish.
    _restart_as_standby(restart_argv(argv, cfg.listen, server.port))
    return 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "restarted")}
    try:
        cfg = load(MasterConfig, "master", config_file=args.config, overrides=overrides)
        check_exposure(cfg)  # before anything starts (or logs)
        configure_logging(cfg.log_level, "master")
    except (ConfigError, ValueError, StartupError) as exc:
        print(f"sparkyard-master: {exc}", file=sys.stderr)
        return 2
    gc.set_threshold(*GC_THRESHOLDS)
    with profiled():
        return asyncio.run(_run(cfg, sys.argv[1:] if argv is None else argv, args.restarted))


if __name__ == "__main__":
    sys.exit(main())
