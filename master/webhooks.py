"""Webhooks: when a run ends FAILED or SUCCEEDED, POST a JSON body to the job's ``--on-failure`` /
``--on-success`` URL (else the leader's), retried with backoff — delivered at least once, whoever leads.

Deliveries are durable in Redis, not in a master's memory: the script that ends a run records its delivery
(lib.lua ``record_webhook``: ``P:webhooks``, due at once) when the run's spec has a URL for its end or the
leader has a default one (``P:webhook_defaults``, written by :meth:`Webhooks.start`). The leader's deliverer
reads the due deliveries, POSTs each, and takes it out (``webhook.lua`` ``done``) or puts it back with its
next due time (``retry``), both fenced with the leader epoch. A leader that dies or is deposed mid-way
leaves its deliveries in Redis, and the next leader delivers them; so a receiver may see a body twice (a
POST taken whose ``done`` was lost or refused): the ``Idempotency-Key`` header, the run id and the event,
is the same on every try of one delivery, for the receiver to drop repeats.

:class:`RunEnded` only wakes the deliverer, so a run's event goes out at once rather than at the next poll;
the poll (every :data:`WEBHOOK_POLL_S`) finds retries that came due and what a previous leader left. At
most :data:`MAX_IN_FLIGHT` POSTs are in progress at once; the rest wait their turn in Redis, so an
unreachable endpoint cannot grow the master's memory.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from sparkyard import __version__
from sparkyard.clock import Clock
from sparkyard.protojson import to_dict
from sparkyard.master.convert import run_to_proto
from sparkyard.master.events import RunEnded
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.scripts import log_failure
from sparkyard.master.store import Store
from sparkyard.states import RunState

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

# Tries of one delivery, and the waits between them: 1 s, 2 s, 4 s … at most 5 min (about 20 min in all).
WEBHOOK_ATTEMPTS = 8
WEBHOOK_BACKOFF_S = 1.0
WEBHOOK_BACKOFF_MAX_S = 300.0
# One POST may take this long (connect and answer) before it counts as failed.
WEBHOOK_TIMEOUT_S = 10.0
# How often the leader looks for deliveries that came due (retries, a previous leader's) without a wake-up.
WEBHOOK_POLL_S = 1.0
# POSTs in progress at once; more wait in Redis.
MAX_IN_FLIGHT = 64
EVENTS = {RunState.FAILED: "run.failed", RunState.SUCCEEDED: "run.succeeded"}


def backoff_s(failed_tries: int) -> float:
    """The wait after the ``failed_tries``-th failed try (1, 2, …)."""
    return min(WEBHOOK_BACKOFF_S * 2 ** (failed_tries - 1), WEBHOOK_BACKOFF_MAX_S)


class Webhooks:
    """The leader's deliverer of the pending webhook deliveries in Redis."""

    def __init__(self, store: Store, clock: Clock, metrics: MasterMetrics, on_failure: str, on_success: str) -> None:
        self._store = store
        self._clock = clock
        self._metrics = metrics
        self._defaults = {RunState.FAILED: on_failure, RunState.SUCCEEDED: on_success}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.Task[None] | None = None
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._stopping = False

    async def start(self) -> None:
        """Record this leader's defaults (runs that end from now on get deliveries by them), then deliver."""
        self._stopping = False
        await self._store.webhook_defaults(bool(self._defaults[RunState.FAILED]),
                                           bool(self._defaults[RunState.SUCCEEDED]))
        self._loop = asyncio.create_task(self._deliver_due(), name="webhooks")

    async def stop(self) -> None:
        # The flag, not only the cancel, ends the loop: a cancel that lands inside a Redis call can come out
        # of redis-py as a ConnectionError, which the loop takes for a failed read and carries on.
        self._stopping = True
        self._wake.set()
        tasks = [t for t in (self._loop, *self._in_flight.values()) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop = None
        self._in_flight.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def run_ended(self, event: RunEnded) -> None:
        """A run's end may have recorded a delivery: look now rather than at the next poll."""
        if event.state in EVENTS:
            self._wake.set()

    async def _deliver_due(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                room = MAX_IN_FLIGHT - len(self._in_flight)
                if room > 0:
                    # Deliveries in flight when the read is sent are skipped even if they end before its
                    # answer: it may predate their retry's new due time. In-flight ones are still due, so
                    # ask for as many more as there is room for.
                    busy = set(self._in_flight)
                    now = await self._store.time_ms()
                    for run_id, tries in await self._store.due_webhooks(now, room + len(busy)):
                        if run_id not in busy and run_id not in self._in_flight and len(self._in_flight) < MAX_IN_FLIGHT:
                            self._in_flight[run_id] = asyncio.create_task(self._deliver(run_id, tries),
                                                                          name=f"webhook-{run_id}")
            except Exception:
                log_failure(log, "reading the due webhooks failed; trying again in %.0fs", WEBHOOK_POLL_S)
            if self._stopping:
                return
            timer = self._clock.call_later(WEBHOOK_POLL_S, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                timer.cancel()

    async def _deliver(self, run_id: str, failed_tries: int) -> None:
        try:
            found = await self._body(run_id)
            problem = "" if found is None else await self._post(*found, run_id)
            if not problem:
                await self._store.webhook_done(run_id)
                if found is not None:
                    self._metrics.webhooks.labels("delivered").inc()
                    log.info("webhook %s for run=%s delivered to %s", found[1]["event"], run_id, found[0])
                return
            assert found is not None
            failed_tries += 1
            if failed_tries >= WEBHOOK_ATTEMPTS:
                await self._store.webhook_done(run_id)
                self._metrics.webhooks.labels("failed").inc()
                log.warning("webhook for run=%s to %s failed %d times (last: %s); given up", run_id, found[0],
                            failed_tries, problem)
                return
            wait = backoff_s(failed_tries)
            await self._store.webhook_retry(run_id, await self._store.time_ms() + round(wait * 1000))
            self._metrics.webhooks.labels("retried").inc()
            log.info("webhook for run=%s to %s failed (%s); try %d in %.0fs", run_id, found[0], problem,
                     failed_tries + 1, wait)
        except Exception:
            log_failure(log, "webhook for run=%s: recording its delivery failed (it stays pending)", run_id)
        finally:
            self._in_flight.pop(run_id, None)
            self._wake.set()  # room for one more

    async def _body(self, run_id: str) -> tuple[str, dict[str, Any]] | None:
        """The URL and body of the run's event; None when nobody asks for one (no URL now, or the run or job
        is gone)."""
        store = self._store
        run = await store.get_run(run_id, with_tasks=False)
        if run is None or run.state not in EVENTS:
            return None
        spec = (await store.get_specs([(run.job_id, run.spec_version)])).get((run.job_id, run.spec_version))
        if spec is None:
            return None
        url = (spec.on_failure if run.state is RunState.FAILED else spec.on_success) or self._defaults[run.state]
        if not url:
            return None
        return url, {"event": EVENTS[run.state], "job": {"id": run.job_id, "name": spec.name},
                     "run": to_dict(run_to_proto(run))}

    async def _post(self, url: str, body: dict[str, Any], run_id: str) -> str:
        """One try; '' when the receiver took it, else what went wrong."""
        import aiohttp  # at the first webhook, not at every master's start (a third of its start-up CPU)

        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT_S),
                headers={"User-Agent": f"sparkyard/{__version__}"})
        headers = {"X-Sparkyard-Event": body["event"], "Idempotency-Key": f"{run_id}:{body['event']}"}
        try:
            async with self._session.post(url, json=body, headers=headers) as reply:
                return "" if reply.status < 300 else f"HTTP {reply.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
