"""Worker reports → Redis, in batches: the master's hot path for results.

Every worker's ``Reports`` messages (attempts started and finished) go into one :class:`Batcher`; a batch
is one ``report.lua`` call however many workers it came from. The batcher runs with no added delay: while
one call is in flight the next batch fills up by itself, so an idle master answers at once and a busy
one sends ~hundreds of reports per round trip.

After a batch, each result's verdict is applied (slot freed, retry armed, waiters woken) and its
acknowledgement queued: every worker gets one ``ResultAcks`` message for its results of the last
ACK_DELAY_S. A result that is not acknowledged (Redis down, buffer full, the master gone before it sent
the acknowledgement) stays pending on its worker, which sends it again — so nothing here needs to be
durable.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

import redis.exceptions

from sparkyard.batcher import Batcher
from sparkyard.batching import Item, Outcome
from sparkyard.clock import Cancellable, Clock
from sparkyard.master.metrics import MasterMetrics
from sparkyard.master.outcomes import Outcomes
from sparkyard.master.registry import WorkerRegistry
from sparkyard.master.store import Store
from sparkyard.master.store_values import Claim, Report
from sparkyard.states import VerdictKind
from sparkyard.timeutil import timestamp_ms
from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

# Reports per report.lua call: ~a few ms of Redis time, so one call never holds Redis long.
REPORT_BATCH = 500
# Reports queued before new ones are refused (their workers resend them after a while).
REPORT_BUFFER = 100_000
# An error message stored with an attempt is cut to this many characters (the traceback keeps the rest).
MAX_ERROR_CHARS = 2000
MAX_TRACEBACK_CHARS = 64 * 1024
# Acknowledgements wait this long for company: a worker sends results every 100 ms or sooner, and each
# message to it costs both ends ~150–200 µs of CPU (tests/bench/bench_grpc_stream.py); an acknowledgement is
# never urgent (the worker's slot was freed when its result arrived; an unacknowledged result is only resent
# after 10 s).
ACK_DELAY_S = 0.1

_OUTCOMES = {
    pb.ATTEMPT_SUCCEEDED: "SUCCEEDED",
    pb.ATTEMPT_FAILED: "FAILED",
    pb.ATTEMPT_TIMED_OUT: "TIMED_OUT",
    pb.ATTEMPT_CANCELLED: "CANCELLED",
    pb.ATTEMPT_RELEASED: "RELEASED",
}


@dataclass(frozen=True, slots=True)
class Incoming:
    worker_id: str
    report: Report
    is_result: bool  # the worker waits for an acknowledgement
    applies: bool  # its verdict has consequences (a result, or a task handed back undelivered)


class ReportSink:
    def __init__(self, store: Store, registry: WorkerRegistry, outcomes: Outcomes, metrics: MasterMetrics,
                 clock: Clock, result_max_bytes: int) -> None:
        self._store = store
        self._registry = registry
        self._outcomes = outcomes
        self._metrics = metrics
        self._result_max_bytes = result_max_bytes
        self._clock = clock
        self._acks: dict[str, list[pb.ResultAck]] = {}  # by worker: acknowledgements not sent yet
        self._ack_timer: Cancellable | None = None
        self._batcher: Batcher[Incoming] = Batcher(
            "reports", self._process, clock=clock, max_batch_size=REPORT_BATCH, max_batch_delay_s=0.0,
            max_buffer=REPORT_BUFFER,
        )

    async def start(self) -> None:
        self._batcher.start()

    async def close(self, timeout_s: float) -> None:
        await self._batcher.close(drain=True, timeout_s=timeout_s)
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._send_acks()

    def undelivered(self, claims: list[Claim]) -> None:
        """Tasks claimed for a worker that vanished before they were sent: handed straight back (same token,
        so the release is accepted) instead of waiting for their leases to expire."""
        for c in claims:
            report = Report(c.task_id, c.token, "RELEASED", error="undeliverable")
            self._submit(("undelivered", c.task_id, c.token), Incoming(c.worker, report, False, True))

    def accept(self, worker_id: str, reports: pb.Reports) -> None:
        for started in reports.started:
            report = Report(started.task_id, started.fencing_token, "STARTED",
                            started_ms=timestamp_ms(started.started_at), log_path=started.log_path)
            self._submit(("started", started.task_id, started.fencing_token), Incoming(worker_id, report, False, False))
        for result in reports.results:
            # The attempt is over on the worker: its slot can take the next task while this result is
            # written to Redis (the task itself stays LEASED until then, so it cannot be handed out twice).
            self._registry.release(worker_id, result.task_id, result.fencing_token)
            report = self._result_report(result)
            if report is None:
                ack = pb.ResultAck(task_id=result.task_id, fencing_token=result.fencing_token, accepted=False,
                                   reason=f"outcome {pb.AttemptState.Name(result.outcome)} is not a result",
                                   code="INVALID_ARGUMENT")
                self._registry.send(worker_id, pb.MasterMessage(acks=pb.ResultAcks(acks=[ack])))
                continue
            self._submit(("result", result.task_id, result.fencing_token), Incoming(worker_id, report, True, True))

    def _submit(self, key: tuple[str, str, int], incoming: Incoming) -> None:
        if not self._batcher.submit(key, incoming):
            log.warning("report buffer full (%d); worker=%s will resend task=%s", REPORT_BUFFER,
                        incoming.worker_id, key[1])

    def _result_report(self, result: pb.TaskResult) -> Report | None:
        outcome = _OUTCOMES.get(result.outcome)
        if outcome is None:
            return None
        result_json = result.result_json
        error = result.error[:MAX_ERROR_CHARS]
        limit = self._result_max_bytes
        if outcome == "SUCCEEDED" and len(result_json.encode()) > limit:
            outcome, result_json = "FAILED", ""
            error = f"result is {len(result.result_json.encode())} bytes, over the {limit}-byte limit"
        return Report(result.task_id, result.fencing_token, outcome, result_json=result_json, error=error,
                      traceback=result.traceback[-MAX_TRACEBACK_CHARS:],
                      started_ms=timestamp_ms(result.started_at), finished_ms=timestamp_ms(result.finished_at),
                      log_path=result.log_path)

    async def _process(self, batch: list[Item[Incoming]]) -> Outcome:
        try:
            verdicts = await self._store.report([item.payload.report for item in batch])
        except redis.exceptions.ResponseError:
            log.exception("report.lua refused a batch of %d reports; dropping it (workers resend results)", len(batch))
            return Outcome.PERMANENT_ERROR
        acks: dict[str, list[pb.ResultAck]] = defaultdict(list)
        for item, verdict in zip(batch, verdicts):
            incoming = item.payload
            if incoming.applies:
                self._outcomes.apply_verdicts([verdict])
            if not incoming.is_result:
                continue
            accepted = verdict.verdict is VerdictKind.ACCEPTED
            report = incoming.report
            task_state = verdict.task_state.value if verdict.task_state else "unknown"
            metrics = self._metrics
            if accepted:
                metrics.attempts_by[report.outcome].inc()
                if report.started_ms and report.finished_ms >= report.started_ms:
                    metrics.duration_by[report.outcome].observe((report.finished_ms - report.started_ms) / 1000)
                log.log(logging.DEBUG if report.outcome == "SUCCEEDED" else logging.INFO,
                        "task=%s token=%d %s on worker=%s → %s", verdict.task_id, report.token, report.outcome,
                        incoming.worker_id, task_state)
            else:
                metrics.fenced_by[verdict.verdict.value].inc()
                log.info("worker=%s result for task=%s token=%d refused: %s (task is %s)", incoming.worker_id,
                         verdict.task_id, report.token, verdict.verdict.value, task_state)
            acks[incoming.worker_id].append(pb.ResultAck(
                task_id=verdict.task_id, fencing_token=report.token, accepted=accepted,
                reason="" if accepted else f"{verdict.verdict.value}: task is {task_state}",
                code="" if accepted else ("NOT_FOUND" if verdict.verdict is VerdictKind.UNKNOWN else "FAILED_PRECONDITION")))
        for worker_id, worker_acks in acks.items():
            self._acknowledge(worker_id, worker_acks)
        return Outcome.SUCCESS

    def _acknowledge(self, worker_id: str, acks: list[pb.ResultAck]) -> None:
        """Queue acknowledgements for a worker: they leave together within ACK_DELAY_S."""
        self._acks.setdefault(worker_id, []).extend(acks)
        if self._ack_timer is None:
            self._ack_timer = self._clock.call_later(ACK_DELAY_S, self._send_acks)

    def _send_acks(self) -> None:
        self._ack_timer = None
        acks, self._acks = self._acks, {}
        for worker_id, worker_acks in acks.items():
            self._registry.send(worker_id, pb.MasterMessage(acks=pb.ResultAcks(acks=worker_acks)))
