"""The master's composition root: every component built once, from the config, a Store, a clock and a timer,
its events wired here and nowhere else.

``sparkyard-master`` (through :class:`sparkyard.master.server.MasterServer`, which adds Redis, gRPC, HTTP
and the election around it), ``sparkyard local`` (which runs ``sparkyard-master``) and the tests all build a
master with :func:`build_master`. Components get what they use at construction and never reach back; what
one does that others react to is an event (:mod:`sparkyard.master.events`), subscribed below. Services
that run while this master leads start and stop through one list, :attr:`Master.leading`, in order and in
reverse; the report sink runs for as long as the process serves (a worker's results are written whoever it
reaches first; report.lua is fenced).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sparkyard.clock import Clock
from sparkyard.config import MasterConfig
from sparkyard.lifecycle import Loop, Service
from sparkyard.master.arming import Arming
from sparkyard.master.backfill import Backfiller
from sparkyard.master.background import Background
from sparkyard.master.bundles import BundleStore
from sparkyard.master.connection import WorkerConnection
from sparkyard.master.events import Events, JobEnded, RunEnded, WorkReady
from sparkyard.master.fixed_delay import FixedDelay
from sparkyard.master.jobs import JobManager
from sparkyard.master.logs import LogRelay
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.preloader import Preloader
from sparkyard.master.purgatory import Purgatory
from sparkyard.master.reaper import Reaper
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.reports import ReportSink
from sparkyard.master.retention import Retention
from sparkyard.master.retries import Retries
from sparkyard.master.run_waits import RunWaits
from sparkyard.master.scheduler import SlotScheduler
from sparkyard.master.store import Store
from sparkyard.master.submissions import Submissions
from sparkyard.master.timer import SystemTimer
from sparkyard.master.webhooks import Webhooks

log = logging.getLogger(__name__)
@dataclass
class Master:
    """One master's components. Built by :func:`build_master`; nothing here is set after that."""

    cfg: MasterConfig
    store: Store
    clock: Clock
    timer: SystemTimer
    metrics: MasterMetrics
    events: Events
    background: Background
    registry: WorkerRegistry
    purgatory: Purgatory
    arming: Arming
    retries: Retries
    outcomes: Outcomes
    reports: ReportSink
    scheduler: SlotScheduler
    fixed_delay: FixedDelay
    preloader: Preloader
    backfiller: Backfiller
    webhooks: Webhooks
    reaper: Reaper
    jobs: JobManager
    run_waits: RunWaits
    logs: LogRelay
    connection: WorkerConnection
    bundles: BundleStore
    leading: list[Service] = field(default_factory=list)
    _started: list[Service] = field(default_factory=list)

    async def start(self) -> None:
        await self.reports.start()

    async def lead(self, epoch: int) -> None:
        """Start leading: rebuild the wheel and retry timers from Redis, then fire, dispatch, reap, collect
        bundles and delete history beyond the retention bounds."""
        for service in self.leading:
            # Counted as started before its start runs: a start cancelled halfway (the lease lost meanwhile,
            # leader.py) may have begun work of its own, which stop_leading must end too.
            self._started.append(service)
            await service.start()
        log.info("leading as epoch %d", epoch)

    async def stop_leading(self) -> None:
        while self._started:
            await self._started.pop().stop()
        for session in self.registry.sessions():
            session.close("master shutting down")

    async def close(self, grace_s: float) -> None:
        """After the gRPC server stopped: the last reports written (up to ``grace_s``), then everything
        still running ended."""
        await self.stop_leading()
        await self.reports.close(grace_s)
        await self.background.stop()
        self.timer.close()


def build_master(cfg: MasterConfig, store: Store, clock: Clock, timer: SystemTimer, bundles: BundleStore,
                 metrics: MasterMetrics | None = None) -> Master:
    """The one place a master is put together. ``timer`` runs on ``clock``; the caller starts it."""
    metrics = metrics or MasterMetrics()
    events = Events()
    background = Background()
    registry = WorkerRegistry(clock, events)
    purgatory = Purgatory(timer, "wait-run")
    arming = Arming(timer, clock, int(cfg.preload_horizon_s * 1000), int(cfg.fire_ahead_s * 1000))
    retries = Retries(store, timer, clock, events)
    outcomes = Outcomes(store, registry, retries, events, metrics)
    reports = ReportSink(store, registry, outcomes, metrics, clock, cfg.result_max_bytes)
    scheduler = SlotScheduler(store, registry, clock, lease_ms=int(cfg.lease_s * 1000),
                              timeout_grace_ms=int(cfg.timeout_grace_s * 1000), dispatch_batch=cfg.dispatch_batch,
                              undelivered=reports.undelivered, start_after_max_ms=arming.ahead_max_ms)
    fixed_delay = FixedDelay(store, clock, background, arming.consider)
    preloader = Preloader(store, arming, timer, clock, background, outcomes, fixed_delay, metrics,
                          cfg.misfire_threshold_s)
    backfiller = Backfiller(store, preloader, timer, background)
    webhooks = Webhooks(store, clock, metrics, cfg.on_failure, cfg.on_success)
    reaper = Reaper(store, registry, outcomes, timer, background, cfg)
    submissions = Submissions(cfg, store, clock, outcomes, arming, bundles, metrics)
    jobs = JobManager(store, clock, outcomes, arming, preloader, submissions)
    run_waits = RunWaits(store, purgatory, jobs, cfg.wait_max_s)
    logs = LogRelay(registry, jobs.get_task, clock)
    connection = WorkerConnection(store, registry, outcomes, logs, reports, clock, cfg)

    events.subscribe(WorkReady, lambda _: scheduler.wake())
    events.subscribe(RunEnded, lambda e: purgatory.complete_watchers(e.run_id))
    events.subscribe(JobEnded, lambda e: purgatory.complete_watchers(e.job_id))
    events.subscribe(RunEnded, fixed_delay.run_ended)
    events.subscribe(RunEnded, backfiller.run_ended)
    events.subscribe(RunEnded, webhooks.run_ended)
    events.seal()

    leading: list[Service] = [
        preloader, retries, fixed_delay, scheduler, reaper, backfiller, webhooks,
        Loop("bundle-collector", bundles.run_collector),
        Loop("retention", Retention(cfg, store, clock).run),
    ]
    return Master(cfg=cfg, store=store, clock=clock, timer=timer, metrics=metrics, events=events,
                  background=background, registry=registry, purgatory=purgatory, arming=arming, retries=retries,
                  outcomes=outcomes, reports=reports, scheduler=scheduler, fixed_delay=fixed_delay,
                  preloader=preloader, backfiller=backfiller, webhooks=webhooks, reaper=reaper,
                  jobs=jobs, run_waits=run_waits, logs=logs, connection=connection, bundles=bundles, leading=leading)
