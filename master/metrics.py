"""The master's Prometheus metrics: what happened (counters, histograms, updated where it happens) and
what is (gauges, read from the registry, the leadership and Redis when ``/metrics`` is scraped).

One :class:`MasterMetrics` per master, on its own registry (not prometheus-client's global one), so
several masters in one process — the tests — keep their figures apart. Every figure of a standby is
about itself: it fires and dispatches nothing, so its counters stay where they were when it last led.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Awaitable, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sparkyard.metric_buckets import DURATION_BUCKETS, LabelChildren

if TYPE_CHECKING:
    from sparkyard.master.registry import WorkerSession
    from sparkyard.master.store_values import QueueDepth

# Trigger lateness (scheduled → fired) is milliseconds when all is well and seconds under overload or
# after a failover; buckets from 1 ms to a minute.
LATENESS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# One Lua script call: ~0.1 ms idle, a dispatch round of 1,024 claims ~45 ms; a second means trouble.
# Queued tasks a scrape reads one by one to count them by priority (the queue does not say it: about 10 ms
# of Redis per 10,000); past this a group's depth is reported without the split.
QUEUE_SPLIT_LIMIT = 10_000
REDIS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class MasterMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.tasks = Counter("sparkyard_tasks", "Task state changes made by results and lease sweeps, by the state "
                             "the task went to", ["state"], registry=r)
        self.attempts = Counter("sparkyard_attempts", "Attempt results accepted, by outcome", ["outcome"], registry=r)
        self.fenced = Counter("sparkyard_attempts_fenced", "Attempt results refused: 'stale' (a newer attempt "
                              "holds the task), 'terminal' (the task had ended), 'unknown' (no such task)",
                              ["verdict"], registry=r)
        self.leases_expired = Counter("sparkyard_leases_expired", "Task leases that ran out (worker dead, hung "
                                      "or cut off)", registry=r)
        self.timeouts = Counter("sparkyard_attempts_timed_out", "Attempts failed by the master after their task "
                                "timeout plus grace", registry=r)
        self.runs = Counter("sparkyard_runs", "Runs that ended, by state", ["state"], registry=r)
        self.pipeline_runs = Counter("sparkyard_pipeline_runs", "Pipeline runs that ended, by state", ["state"],
                                     registry=r)
        self.pipeline_duration = Histogram("sparkyard_pipeline_run_duration_seconds", "Pipeline runs from their "
                                           "firing to their end, by state", ["state"], buckets=DURATION_BUCKETS,
                                           registry=r)
        self.pipelines_running = Gauge("sparkyard_pipeline_runs_running", "Pipeline runs started and not ended, "
                                       "read from Redis at the scrape", registry=r)
        self.firings = Counter("sparkyard_firings", "Firings, by what they did (created, skipped, ...)", ["status"],
                               registry=r)
        self.webhooks = Counter("sparkyard_webhooks", "Webhook tries by result: delivered, retried (a try "
                                "failed, another is due), failed (the last try failed: given up)", ["result"], registry=r)
        self.lateness = Histogram("sparkyard_trigger_lateness_seconds", "Firing time minus scheduled time",
                                  buckets=LATENESS_BUCKETS, registry=r)
        self.duration = Histogram("sparkyard_task_duration_seconds", "Attempt run time as the worker measured it, "
                                  "by outcome", ["outcome"], buckets=DURATION_BUCKETS, registry=r)
        self.redis_calls = Histogram("sparkyard_redis_call_seconds", "Round trip of one Lua script call to "
                                     "Redis, by script", ["script"], buckets=REDIS_BUCKETS, registry=r)
        # The children the hot paths reach per task or per call (never cleared, unlike the gauges below).
        self.tasks_by = LabelChildren(self.tasks)
        self.attempts_by = LabelChildren(self.attempts)
        self.fenced_by = LabelChildren(self.fenced)
        self.duration_by = LabelChildren(self.duration)
        self.runs_by = LabelChildren(self.runs)
        self.firings_by = LabelChildren(self.firings)
        self.redis_calls_by = LabelChildren(self.redis_calls)
        self.queue_depth = Gauge("sparkyard_queue_depth", "Tasks in a node group's ready queue", ["group"],
                                 registry=r)
        self.queue_by_priority = Gauge("sparkyard_queue_depth_by_priority", "Tasks in a node group's ready "
                                       "queue with this priority (while at most 10,000 wait in all)",
                                       ["group", "priority"], registry=r)
        self.slots = Gauge("sparkyard_cluster_worker_slots", "Slots of a connected worker", ["worker", "group"],
                           registry=r)
        self.slots_used = Gauge("sparkyard_cluster_worker_slots_used", "Slots of a connected worker running or "
                                "holding a task", ["worker", "group"], registry=r)
        self.workers = Gauge("sparkyard_cluster_workers_connected", "Workers connected to this master", registry=r)
        self.leader = Gauge("sparkyard_leader", "1 while this master leads, else 0", registry=r)
        self.epoch = Gauge("sparkyard_leader_epoch", "This master's leader epoch (0 before it first led)",
                           registry=r)
        self.redis_ping = Gauge("sparkyard_redis_ping_seconds", "Round trip of a PING to Redis at the last scrape "
                                "(-1: no answer)", registry=r)

    def fired(self, status: str, late_ms: int | None) -> None:
        """A firing; ``late_ms`` None for a manual one (a trigger, a backfill), which is never late."""
        self.firings_by[status].inc()
        if status == "created" and late_ms is not None:
            self.lateness.observe(max(0, late_ms) / 1000)

    def fired_by_submit(self) -> None:
        """A job due at once whose run the submit itself created: fired right when it was due."""
        self.fired("created", 0)

    def timed_call(self, script: str, started: float) -> None:
        self.redis_calls_by[script].observe(time.perf_counter() - started)

    async def render(self, sessions: Iterable[WorkerSession], leading: bool, epoch: int,
                     queue_depths: Callable[[int], Awaitable[dict[str, QueueDepth]]],
                     ping: Callable[[], Awaitable[object]],
                     running_pipelines: Callable[[], Awaitable[int]]) -> bytes:
        """The text a scrape gets: the gauges brought up to date first (a Redis failure leaves the queue
        depths and running pipeline runs as they were and shows as a ping of -1, rather than failing the
        whole scrape). What is read from Redis is the cluster's, whichever master is asked."""
        self.slots.clear()
        self.slots_used.clear()
        count = 0
        for s in sessions:
            count += 1
            self.slots.labels(s.worker_id, s.group).set(s.slots)
            self.slots_used.labels(s.worker_id, s.group).set(min(s.slots, len(s.leased)))
        self.workers.set(count)
        self.leader.set(1 if leading else 0)
        self.epoch.set(epoch)
        started = time.perf_counter()
        try:
            await ping()
            self.redis_ping.set(time.perf_counter() - started)
            depths = await queue_depths(QUEUE_SPLIT_LIMIT)
            self.pipelines_running.set(await running_pipelines())
        except Exception:  # noqa: BLE001 - Redis down: say so in the figures, keep serving the rest
            self.redis_ping.set(-1)
        else:
            self.queue_depth.clear()
            self.queue_by_priority.clear()
            for group, depth in depths.items():
                self.queue_depth.labels(group).set(depth.length)
                for priority, count in (depth.by_priority or {}).items():
                    self.queue_by_priority.labels(group, str(priority)).set(count)
        return generate_latest(self.registry)
