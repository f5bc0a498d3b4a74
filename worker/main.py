"""``sparkyard-worker``: run a worker until SIGTERM/SIGINT (the first drains, a second stops at once).

    sparkyard-worker --master HOST:PORT --slots N [--group G] [--runner submit|session|connect]
                     [--connect-url sc://HOST:PORT]
                     [--spark-master local[1]] [--task-memory 2g] [--work-dir DIR] [--id NAME] [--token-file F]
                     [--tls-ca CA [--tls-cert CERT --tls-key KEY]]
"""

from __future__ import annotations

import os

# The worker forks (spark-submit, the session's JVM) while gRPC threads run; gRPC's fork handlers are
# not safe then (they log "skipping fork() handlers" and can break the poller). Must precede `import grpc`.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

from sparkyard.channel import credentials  # noqa: E402
from sparkyard.config import ConfigError, WorkerConfig, load  # noqa: E402
from sparkyard.flags import add_flags  # noqa: E402
from sparkyard.logsetup import configure_logging  # noqa: E402
from sparkyard.addresses import is_loopback  # noqa: E402
from sparkyard.profiling import profiled  # noqa: E402
from sparkyard.startup import StartupError  # noqa: E402
from sparkyard.worker.assembly import Worker, build_worker  # noqa: E402

log = logging.getLogger("sparkyard.worker")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sparkyard-worker", description="Run a Sparkyard worker.")
    add_flags(p, WorkerConfig)
    p.add_argument("--config", help="TOML file with a [worker] table (or SPARKYARD_CONFIG)")
    return p.parse_args(argv)


async def _run(worker: Worker) -> int:
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("signal received: draining (send again to stop at once)")
            worker.request_drain()
        else:
            worker.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await worker.run()
    except StartupError as exc:
        print(f"sparkyard-worker: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k != "config"}
    try:
        cfg = load(WorkerConfig, "worker", config_file=args.config, overrides=overrides)
        credentials(cfg)  # unreadable TLS files end the start here, not in every reconnect
        if cfg.metrics and not (cfg.token or cfg.metrics_token) and not is_loopback(cfg.metrics.rpartition(":")[0]):
            raise ConfigError(f"refusing to serve /metrics on {cfg.metrics} without a token: set --metrics-token "
                              "or --token, or use 127.0.0.1")
        configure_logging(cfg.log_level, f"worker[{cfg.worker_id}]")
    except (ConfigError, ValueError) as exc:
        print(f"sparkyard-worker: {exc}", file=sys.stderr)
        return 2
    with profiled():
        return asyncio.run(_run(build_worker(cfg)))


if __name__ == "__main__":
    sys.exit(main())
