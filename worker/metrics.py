"""A worker's Prometheus metrics: its attempts as they end (counters, a histogram) and its slots, queue
and connection as they are when ``/metrics`` is scraped (gauges).

Its own registry, not prometheus-client's global one, so several workers in one process (tests) keep
their figures apart.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from sparkyard.metric_buckets import DURATION_BUCKETS, LabelChildren
from sparkyard.v1 import sparkyard_pb2 as pb

# An attempt's end state as its metrics' label (the enum's name costs a lookup through protobuf's wrapper).
_OUTCOMES = {state: pb.AttemptState.Name(state).removeprefix("ATTEMPT_") for state in pb.AttemptState.values()}


class WorkerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.attempts = Counter("sparkyard_worker_attempts", "Attempts that ended here, by outcome", ["outcome"],
                                registry=r)
        self.duration = Histogram("sparkyard_worker_attempt_duration_seconds", "Attempt run time, by outcome",
                                  ["outcome"], buckets=DURATION_BUCKETS, registry=r)
        self.slots = Gauge("sparkyard_worker_slots", "Slots of this worker", registry=r)
        self.ready_slots = Gauge("sparkyard_worker_ready_slots", "Slots whose runner can start a task now",
                                 registry=r)
        self.busy = Gauge("sparkyard_worker_slots_busy", "Slots running an attempt", registry=r)
        self.queued = Gauge("sparkyard_worker_queued", "Attempts leased here waiting for a slot (prefetched)",
                            registry=r)
        self.unacknowledged = Gauge("sparkyard_worker_results_unacknowledged", "Results the master has not "
                                    "acknowledged yet (kept in the outbox)", registry=r)
        self.connected = Gauge("sparkyard_worker_connected", "1 while registered with a master", registry=r)
        self.connections = Gauge("sparkyard_worker_connections", "Connections made to masters since start",
                                 registry=r)
        self.draining = Gauge("sparkyard_worker_draining", "1 while draining", registry=r)
        self._attempts_by = LabelChildren(self.attempts)
        self._duration_by = LabelChildren(self.duration)

    def attempt_ended(self, state: int, started_ms: int, finished_ms: int) -> None:
        outcome = _OUTCOMES[state]
        self._attempts_by[outcome].inc()
        if started_ms and finished_ms >= started_ms:
            self._duration_by[outcome].observe((finished_ms - started_ms) / 1000)

    def render(self, *, slots: int, ready_slots: int, busy: int, queued: int, unacknowledged: int, connected: bool,
               connections: int, draining: bool) -> bytes:
        self.slots.set(slots)
        self.ready_slots.set(ready_slots)
        self.busy.set(busy)
        self.queued.set(queued)
        self.unacknowledged.set(unacknowledged)
        self.connected.set(1 if connected else 0)
        self.connections.set(connections)
        self.draining.set(1 if draining else 0)
        return generate_latest(self.registry)
