"""Webhooks: when a run ends FAILED or SUCCEEDED, POST a JSON body to the job's ``--on-failure`` /
``--on-success`` URL (else the master's), retried with backoff.

The leader sends them, told of every run that ends (:class:`sparkyard.master.events.RunEnded`), from its own
event loop with one aiohttp client session. Delivery is at least once while the leader lives (a receiver
may see a retry of a body it took but whose answer was lost: ``run.id`` identifies the event) and at most
once across a change of leader: pending retries live in the leader's memory, so a leader that dies takes
them with it. At most :data:`MAX_PENDING` deliveries wait at once; beyond that new ones are dropped and
counted, so an unreachable endpoint cannot grow the master's memory.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp

from sparkyard import __version__
from sparkyard.clock import Clock
from sparkyard.master.background import Spawner
from sparkyard.protojson import to_dict
from sparkyard.master.convert import run_to_proto
from sparkyard.master.events import RunEnded
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.store import Store
from sparkyard.states import RunState

log = logging.getLogger(__name__)

# Tries of one delivery, and the waits between them: 1 s, 2 s, 4 s … at most 5 min (about 20 min in all).
WEBHOOK_ATTEMPTS = 8
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_BACKOFF_MAX_S = 300.0
# One POST may take this long (connect and answer) before it counts as failed.
WEBHOOK_TIMEOUT_S = 10.0
# Deliveries in progress or waiting to retry; more are dropped (and counted) rather than queued.
MAX_PENDING = 10_000
EVENTS = {RunState.FAILED: "run.failed", RunState.SUCCEEDED: "run.succeeded"}


class Webhooks:
    def __init__(self, store: Store, background: Spawner, clock: Clock, metrics: MasterMetrics, on_failure: str,
                 on_success: str) -> None:
        self._store = store
        self._background = background
        self._clock = clock
        self._metrics = metrics
        self._defaults = {RunState.FAILED: on_failure, RunState.SUCCEEDED: on_success}
        self._session: aiohttp.ClientSession | None = None
        self._pending = 0
        self._running = False

    async def start(self) -> None:
        self._running = True

    async def stop(self) -> None:
        self._running = False
        if self._session is not None:
            await self._session.close()
            self._session = None

    def run_ended(self, event: RunEnded) -> None:
        run_id, state = event.run_id, event.state
        if state not in EVENTS or not self._running:
            return
        if self._pending >= MAX_PENDING:
            self._metrics.webhooks.labels("dropped").inc()
            log.warning("webhook for run=%s dropped: %d deliveries are pending already", run_id, self._pending)
            return
        self._pending += 1
        self._background.spawn(self._deliver(run_id, state), f"webhook-{run_id}")

    async def _deliver(self, run_id: str, state: RunState) -> None:
        try:
            found = await self._body(run_id, state)
            if found is not None:
                await self._post(*found, run_id)
        finally:
            self._pending -= 1

    async def _body(self, run_id: str, state: RunState) -> tuple[str, dict[str, Any]] | None:
        """The URL and body of the run's event; None when nobody asked for one (or the job is gone)."""
        store = self._store
        run = await store.get_run(run_id, with_tasks=False)
        if run is None:
            return None
        spec = (await store.get_specs([(run.job_id, run.spec_version)])).get((run.job_id, run.spec_version))
        if spec is None:
            return None
        url = (spec.on_failure if state is RunState.FAILED else spec.on_success) or self._defaults[state]
        if not url:
            return None
        return url, {"event": EVENTS[state], "job": {"id": run.job_id, "name": spec.name},
                     "run": to_dict(run_to_proto(run))}

    async def _post(self, url: str, body: dict[str, Any], run_id: str) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S),
                headers={"User-Agent": f"sparkyard/{__version__}"})
        problem = ""
        for attempt in range(1, WEBHOOK_ATTEMPTS + 1):
            try:
                async with self._session.post(url, json=body, headers={"X-Sparkyard-Event": body["event"]}) as reply:
                    if reply.status < 300:
                        self._metrics.webhooks.labels("delivered").inc()
                        log.info("webhook %s for run=%s delivered to %s", body["event"], run_id, url)
                        return
                    problem = f"HTTP {reply.status}"
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if attempt < WEBHOOK_ATTEMPTS:
                wait = min(WEBHOOK_BACKOFF_S * 2 ** (attempt - 1), WEBHOOK_BACKOFF_MAX_S)
                log.info("webhook for run=%s to %s failed (%s); try %d in %.0fs", run_id, url, problem,
                         attempt + 1, wait)
                await self._clock.sleep(wait)
        self._metrics.webhooks.labels("failed").inc()
        log.warning("webhook for run=%s to %s failed %d times (last: %s); given up", run_id, url, WEBHOOK_ATTEMPTS,
                    problem)
