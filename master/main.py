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
from sparkyard.flags import add_flags
from sparkyard.logsetup import configure_logging
from sparkyard.profiling import profiled
from sparkyard.startup import StartupError
from sparkyard.master.embedded_redis import EmbeddedRedisError
from sparkyard.master.server import MasterServer, check_exposure, redact

log = logging.getLogger("sparkyard.master")

# The master holds up to millions of long-lived timer objects that form no reference cycles; CPython's
# default thresholds make full collections walk all of them over and over (timer add at 1M pending:
# 0.60 M/s default vs 1.28 M/s with these thresholds, docs/timer.md).
GC_THRESHOLDS = (100_000, 50, 100)
# How long tasks still running after a stop get to end before the process exits anyway.
LEFTOVER_WAIT_S = 2.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sparkyard-master", description="Run a Sparkyard master.")
    add_flags(p, MasterConfig)
    p.add_argument("--config", help="TOML file with a [master] table (or SPARKYARD_CONFIG)")
    return p.parse_args(argv)


def restart_argv(argv: list[str], listen: str, port: int) -> list[str]:
    """The arguments of the fresh process: the same, except that a master told to listen on port 0 (any
    free port) keeps the port it got. Workers and clients know it by that address, and its master id (that
    address) is what lets it take its own lease back at once; on a new port it would be out of their
    reach for good. A later ``--listen`` wins over an earlier one, and over the config file and env."""
    host, _, wanted = listen.rpartition(":")
    return argv if wanted != "0" else [*argv, "--listen", f"{host}:{port}"]


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


async def _end_leftover_tasks(code: int = 0) -> None:
    """After a stop, cancel what is still running; a task that ignores its cancel (one lost inside a
    library call) must not keep the process alive after everything was closed: it exits with ``code``."""
    leftover = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in leftover:
        task.cancel()
    if leftover:
        _, stuck = await asyncio.wait(leftover, timeout=LEFTOVER_WAIT_S)
        if stuck:
            log.warning("%d tasks did not end after the stop (%s); exiting anyway", len(stuck),
                        ", ".join(sorted(t.get_name() for t in stuck)))
            logging.shutdown()
            os._exit(code)


async def _run(cfg: MasterConfig, argv: list[str]) -> int:
    server = MasterServer(cfg)
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
        await _end_leftover_tasks(2)
        return 2
    gc.freeze()  # start-up objects (modules, config, gRPC) never need collecting
    if not server.deposed.is_set():  # else it lost the lease while it started: it restarts below
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
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        cfg = load(MasterConfig, "master", config_file=args.config, overrides=overrides)
        check_exposure(cfg)  # before anything starts (or logs)
        configure_logging(cfg.log_level, "master")
    except (ConfigError, ValueError, StartupError) as exc:
        print(f"sparkyard-master: {exc}", file=sys.stderr)
        return 2
    gc.set_threshold(*GC_THRESHOLDS)
    with profiled():
        return asyncio.run(_run(cfg, sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
