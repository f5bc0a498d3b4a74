"""The worker's composition root: :func:`build_worker` makes a whole worker from its configuration, and
:class:`Worker` runs it — ``sparkyard-worker`` (worker/main.py) and the tests build it the same way.

Its parts, each owning its own state and given at construction what it uses: the connection to a master
(worker/connection.py), the result ledger (worker/ledger.py: pending results, the outbox, report
sending), the runners (worker/runners.py) and the reachability of their Spark cluster manager (worker/engine.py:
while it is gone every attempt is handed back and no slot offered), the room in the work directory
(worker/disk.py: while it is full queued attempts are handed back and no slot offered), the attempt slots (worker/slots.py), the master link
(worker/master_link.py: connect, register, heartbeats, messages), the fence desk, log retention and the
``/metrics`` endpoint. They start in the order of one lifecycle list and stop in the reverse order, so
each stops while what it uses still runs: the link first (no new work), then the slots (every attempt
handed back), the runners, and last the ledger (the outbox closed).

**Drain**: on SIGTERM, or when the master asks, the worker stops taking tasks, lets running ones finish
for ``drain_timeout``, hands the rest back (RELEASED, no attempt used up), waits for the acknowledgements
and stops.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Awaitable, Callable

from sparkyard.clock import Clock, SystemClock
from sparkyard.config import WorkerConfig
from sparkyard.lifecycle import Loop, Service
from sparkyard.worker.bundles import BundleCache, fetch_over
from sparkyard.worker.children import Children
from sparkyard.worker.class_archive import ClassArchive
from sparkyard.worker.connection import Connection
from sparkyard.worker.disk import Disk
from sparkyard.worker.engine import Engine, watched_master
from sparkyard.worker.fence_desk import FenceDesk, desk_address
from sparkyard.worker.ledger import ResultLedger
from sparkyard.worker.logs import LogFiles, Retention
from sparkyard.worker.master_link import MasterLink
from sparkyard.worker.metrics import WorkerMetrics
from sparkyard.worker.prefetch import Prefetch
from sparkyard.worker.runner.base import Runner
from sparkyard.worker.runner.connect import ConnectRunner
from sparkyard.worker.runner.session import SessionRunner
from sparkyard.worker.runner.submit import SubmitRunner
from sparkyard.worker.runners import Runners
from sparkyard.worker.slots import STOP_TIMEOUT_S, AttemptSlots

if TYPE_CHECKING:
    from aiohttp import web

    from sparkyard.httpserve import HttpEndpoint

log = logging.getLogger(__name__)

# After a drain, how long to wait for the master to acknowledge the last results.
FLUSH_TIMEOUT_S = 10.0
# How often the end of a drain looks whether the last results were acknowledged.
FLUSH_CHECK_S = 0.05
# How long one service may take to stop (the runners' is the longest: a driver's exit, then its kill,
# SessionRunner.CLOSE_TIMEOUT_S + 2 × KILL_GRACE_S).
SERVICE_STOP_S = 30.0


class Step:
    """A part of the worker's start or of its stop that is not a service of its own."""

    def __init__(self, name: str, *, start: Callable[[], Awaitable[None]] | None = None,
                 stop: Callable[[], Awaitable[None]] | None = None) -> None:
        self.name, self._start, self._stop = name, start, stop

    async def start(self) -> None:
        if self._start is not None:
            await self._start()

    async def stop(self) -> None:
        if self._stop is not None:
            await self._stop()


async def _stop(service: Service) -> None:
    """Stop one service within SERVICE_STOP_S: one that hangs is named in the log and left, so the worker
    still exits (a SIGTERM'd worker that never exits is worse than one that leaves a part unstopped)."""
    try:
        await asyncio.wait_for(service.stop(), SERVICE_STOP_S)
    except asyncio.TimeoutError:
        log.warning("%s did not stop within %.0fs; stopping without it", getattr(service, "name",
                    type(service).__name__), SERVICE_STOP_S)
    except Exception:
        log.exception("%s failed to stop", getattr(service, "name", type(service).__name__))


def build_runners(cfg: WorkerConfig, children: Children, engine: Engine, disk: Disk, logs: LogFiles,
                  archive: ClassArchive | None = None) -> Runners:
    """Every runner a job may ask for; each tells of its readiness changing through one event. Their JVMs
    share one ``archive`` of Spark's classes (worker/class_archive.py)."""
    changed = asyncio.Event()
    runners: dict[str, Runner] = {
        "submit": SubmitRunner(cfg.spark_master, cfg.slots, children, task_memory_mb=cfg.task_memory_mb,
                               conf=cfg.conf, archive=archive),
        "session": SessionRunner(cfg.spark_master, cfg.slots, cfg.work_path, children, conf=cfg.conf,
                                 task_memory_mb=cfg.task_memory_mb, max_tasks=cfg.driver_max_tasks,
                                 wait_max_s=cfg.runner_wait_max_s, on_readiness=changed.set, archive=archive,
                                 logs=logs, frozen_limit_s=cfg.driver_frozen_limit_s),
        "connect": ConnectRunner(cfg.connect_url, cfg.spark_master, cfg.slots, cfg.work_path, children,
                                 conf=cfg.conf, task_memory_mb=cfg.task_memory_mb, max_tasks=cfg.driver_max_tasks,
                                 wait_max_s=cfg.runner_wait_max_s, on_readiness=changed.set, archive=archive,
                                 logs=logs, frozen_limit_s=cfg.driver_frozen_limit_s),
    }
    return Runners(cfg, runners, changed, engine, disk)


def build_worker(cfg: WorkerConfig, *, clock: Clock | None = None) -> Worker:
    clock = clock or SystemClock()
    work_dir = cfg.work_path
    connection = Connection(cfg.token)
    ledger = ResultLedger(work_dir, clock, connection.send)
    children = Children(work_dir)
    engine = Engine(watched_master(cfg.runner, cfg.spark_master, cfg.connect_url))
    disk = Disk(work_dir)
    archive = ClassArchive.configured(cfg.class_archive_dir, cfg.conf, children)
    logs = LogFiles(work_dir)
    runners = build_runners(cfg, children, engine, disk, logs, archive)
    bundles = BundleCache(work_dir / "bundles", cfg.bundle_cache_bytes,
                          fetch_over(lambda: connection.channel, connection.metadata))
    fence_address = desk_address(work_dir)
    metrics = WorkerMetrics()
    slots = AttemptSlots(cfg, clock, logs, bundles, runners, ledger, Prefetch(cfg.prefetch_max), metrics,
                         connection.terms, fence_address, disk)
    drain_requested = asyncio.Event()

    def engine_changed(problem: str) -> None:
        # Attempts first, handed back (RELEASED, no attempt used up), so the runners' dropping the
        # processes bound to the lost application does not fail them.
        if problem:
            slots.kill_all(f"handed back: {problem}")
        runners.engine_changed(problem)

    engine.listen(engine_changed)

    def disk_changed(problem: str) -> None:
        # Queued attempts go back (RELEASED, no attempt used up); running ones may finish.
        if problem:
            slots.release_queued(f"handed back: {problem}")
        runners.disk_changed()

    disk.listen(disk_changed)
    link = MasterLink(cfg, clock, connection, slots, ledger, runners, logs, drain_requested)
    retention = Retention(logs, work_dir / "attempts", cfg.log_retention_s, clock, slots.task_ids)
    return Worker(cfg, logs=logs, ledger=ledger, runners=runners, slots=slots, link=link, retention=retention,
                  children=children, archive=archive, bundles=bundles, fence_desk=FenceDesk(fence_address, link.answer_fence),
                  metrics=metrics, drain_requested=drain_requested)


class Worker:
    def __init__(self, cfg: WorkerConfig, *, logs: LogFiles, ledger: ResultLedger, runners: Runners,
                 slots: AttemptSlots, link: MasterLink, retention: Retention, children: Children, archive: ClassArchive,
                 bundles: BundleCache, fence_desk: FenceDesk, metrics: WorkerMetrics,
                 drain_requested: asyncio.Event) -> None:
        self.cfg = cfg
        self.logs, self.ledger, self.runners, self.slots, self.link = logs, ledger, runners, slots, link
        self.retention, self.fence_desk, self._metrics = retention, fence_desk, metrics
        self._drain_requested = drain_requested
        self._stopping = asyncio.Event()
        self.http: HttpEndpoint | None = None
        if cfg.metrics:
            # Imported here: aiohttp is a third of a worker's start-up CPU, and the endpoint is optional.
            from sparkyard.httpserve import Access, HttpEndpoint, Route

            # The worker token opens it as the admin's does on the master; the metrics token only reads.
            self.http = HttpEndpoint(cfg.metrics, [Route("GET", "/metrics", self._metrics_page, Access.READ)],
                                     admin=cfg.token or cfg.metrics_token, viewer=cfg.metrics_token,
                                     tls=(cfg.metrics_tls_cert, cfg.metrics_tls_key) if cfg.metrics_tls_cert else None)
        # Started in this order, stopped in the reverse one.
        self.services: list[Service] = [
            ledger,
            Step("leftover processes", start=lambda: asyncio.to_thread(children.end_leftovers)),
            Step("bundle cache", start=lambda: asyncio.to_thread(bundles.load)),
            Step("log sweep", start=retention.sweep),
            Loop("log-retention", retention.run),
            fence_desk,
            *([self.http] if self.http is not None else []),
            Step("class archive", stop=archive.close),  # a training JVM in progress ends with the worker
            Step("runners", stop=runners.close),
            # Only the default runner starts now; another starts when a job first asks for it.
            Loop("start-runner", runners.start_default),
            Loop("engine-probe", runners.engine.run),
            Loop("disk-probe", runners.disk.run),
            Step("attempt slots", stop=slots.stop),
            Loop("self-fence", slots.watch),
            link,
            Loop("drain-on-request", self._drain_on_request),
        ]

    async def run(self) -> None:
        """Run until :meth:`stop` (after a drain or at once)."""
        self.cfg.work_path.mkdir(parents=True, exist_ok=True)
        started: list[Service] = []
        try:
            for service in self.services:
                await service.start()
                started.append(service)
            await self._stopping.wait()
        finally:
            for service in reversed(started):
                await _stop(service)

    def stop(self) -> None:
        self._stopping.set()

    def request_drain(self) -> None:
        """Drain, as when the master asks (SIGTERM): one path, run by the worker's own task."""
        self._drain_requested.set()

    async def drain(self) -> None:
        """Stop taking tasks, finish or hand back running ones, flush results, then stop."""
        slots = self.slots
        if slots.draining:
            return
        try:
            slots.start_draining()
            self.link.send_heartbeat()
            await slots.until_idle(self.cfg.drain_timeout_s)
            slots.kill_all("worker draining: handed back")
            await slots.until_idle(STOP_TIMEOUT_S)
            deadline = time.monotonic() + FLUSH_TIMEOUT_S
            while self.ledger.pending and time.monotonic() < deadline and self.link.registered.is_set():
                await asyncio.sleep(FLUSH_CHECK_S)
            if self.ledger.pending:
                log.warning("%d results not acknowledged at exit: kept in %s, sent when this worker (same --id "
                            "and --work-dir) starts again", len(self.ledger.pending), self.ledger.outbox.path)
        except Exception:
            log.exception("the drain failed; stopping now")
        finally:
            self.stop()  # a drain ends in a stop, whatever went wrong in it

    async def _drain_on_request(self) -> None:
        await self._drain_requested.wait()
        await self.drain()

    async def _metrics_page(self, request: web.Request) -> web.Response:
        from sparkyard.httpserve import metrics_response  # loaded with the endpoint already

        slots = self.slots
        connected = self.link.connection.up and self.link.registered.is_set()
        # Unregistered, no slot is offered to anyone whatever the runners are: not ready (issue 25 item 5).
        return metrics_response(self._metrics.render(
            slots=self.cfg.slots, ready_slots=self.runners.readiness()[2] if connected else 0, busy=slots.busy,
            queued=len(slots.queue), unacknowledged=len(self.ledger.pending), connected=connected,
            connections=self.link.connections, draining=slots.draining))
