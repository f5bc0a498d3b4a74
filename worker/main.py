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

from sparkyard.channel import TLS_FLAGS, credentials  # noqa: E402
from sparkyard.config import RUNNER_NAMES, ConfigError, WorkerConfig, load  # noqa: E402
from sparkyard.httpserve import HttpStartError  # noqa: E402
from sparkyard.logsetup import configure_logging  # noqa: E402
from sparkyard.master.auth import is_loopback  # noqa: E402
from sparkyard.profiling import profiled  # noqa: E402
from sparkyard.spec import parse_conf  # noqa: E402
from sparkyard.timeutil import parse_size  # noqa: E402
from sparkyard.worker.assembly import Worker, build_worker  # noqa: E402
from sparkyard.worker.fence_desk import DeskStartError  # noqa: E402

log = logging.getLogger("sparkyard.worker")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="sparkyard-worker", description="Run a Sparkyard worker.")
    p.add_argument("--master", help="HOST:PORT of the master, or a comma-separated list (or SPARKYARD_MASTER)")
    p.add_argument("--slots", type=int, help="tasks run at once (default 2)")
    p.add_argument("--group", help="node group this worker serves (default 'default')")
    p.add_argument("--runner", choices=RUNNER_NAMES, help="default runner for jobs that do not choose one")
    p.add_argument("--connect-url", help="connect runner: sc://HOST:PORT of a Spark Connect server to use (default: "
                   "the worker starts and supervises its own)")
    p.add_argument("--spark-master", help="Spark master of every task's driver (default local[1])")
    p.add_argument("--task-memory", help="memory limit of one attempt's processes, e.g. 2g (default none; "
                   "a job's --task-memory wins)")
    p.add_argument("--conf", action="append", default=None, metavar="K=V",
                   help="Spark conf of every driver and spark-submit this worker starts (repeatable; a job's wins)")
    p.add_argument("--bundle-cache", help="disk kept for fetched bundles of shipped code, e.g. 2g (default 2g)")
    p.add_argument("--driver-max-tasks", dest="driver_max_tasks", type=int,
                   help="session runner: replace a warm driver after this many attempts (default 10000)")
    p.add_argument("--runner-wait-max", dest="runner_wait_max_s",
                   help="how long an attempt waits for a runner that cannot run it (no driver starts, no Spark "
                        "Connect server) before it fails with the reason, to be retried (default 5m)")
    p.add_argument("--prefetch-max", dest="prefetch_max", type=int,
                   help="most tasks queued on this worker beyond its slots, so a slot never waits a round trip "
                        "for its next task (it asks for fewer: slots x refill time / task time); 0 = off "
                        "(default 256)")
    p.add_argument("--work-dir", help="directory for attempt logs and scratch (default .sparkyard/worker-ID)")
    p.add_argument("--id", help="worker id, stable across restarts (default HOST-PID)")
    p.add_argument("--token", help="the master's worker token, or its admin token (or SPARKYARD_TOKEN); "
                   "--token-file keeps it out of `ps`")
    for flag, text in TLS_FLAGS:
        p.add_argument(flag, help=text)
    p.add_argument("--label", action="append", default=None, metavar="K=V", help="a label (repeatable)")
    p.add_argument("--drain-timeout", dest="drain_timeout_s",
                   help="how long running tasks may take to finish on SIGTERM before they are handed back (default 1m)")
    p.add_argument("--log-retention", dest="log_retention_s",
                   help="how long attempt logs and scratch directories are kept, e.g. 7d (default 7d)")
    p.add_argument("--config", help="TOML file with a [worker] table")
    p.add_argument("--metrics", help="HOST:PORT to serve /metrics (Prometheus) on (default: none)")
    p.add_argument("--metrics-tls-cert", help="certificate (PEM) to serve /metrics over HTTPS with")
    p.add_argument("--metrics-tls-key", help="the key of --metrics-tls-cert")
    p.add_argument("--metrics-token", help="a token that may read /metrics and nothing else (or "
                   "SPARKYARD_METRICS_TOKEN); --metrics-token-file keeps it out of `ps`")
    p.add_argument("--metrics-token-file", help="file holding --metrics-token")
    p.add_argument("--log-level", help="DEBUG, INFO (default), WARNING, ERROR")
    return p.parse_args(argv)


async def _run(worker: Worker) -> int:
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.info("signal received: draining (send again to stop at once)")
            asyncio.ensure_future(worker.drain())
        else:
            worker.stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await worker.run()
    except (HttpStartError, DeskStartError) as exc:
        print(f"sparkyard-worker: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    overrides = {k: v for k, v in vars(args).items() if k not in ("config", "label", "task_memory", "bundle_cache", "conf")}
    if args.label:
        overrides["labels"] = ",".join(args.label)
    try:
        if args.task_memory is not None:
            overrides["task_memory_mb"] = parse_size(args.task_memory, field="--task-memory", default_unit="m") >> 20
        if args.conf:
            overrides["conf"] = dict(parse_conf(args.conf))
        if args.bundle_cache is not None:
            overrides["bundle_cache_bytes"] = parse_size(args.bundle_cache, field="--bundle-cache")
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
