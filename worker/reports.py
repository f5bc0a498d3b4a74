"""Worker → master reports, batched: attempts started and results leave in ``Reports`` messages.

A :class:`Batcher` folds what a busy worker finishes within 100 ms into one message. Two things send sooner
(worker/slots.py): a worker whose last running attempt just ended sends at once, as nothing more is coming to
share the message; a worker whose queue of prefetched tasks is empty sends at once, as a freed slot waits for
the master to hear of it; and one whose queue has fallen to what its slots run during one refill round trip
sends once per refill, so that the master (which frees capacity only on results) sends the next tasks before
the queue runs dry (worker/prefetch.py).

Why wait at all: a gRPC message costs each end ~150–200 µs of CPU on the test machine, whatever it carries (a
result inside one, a few µs: tests/bench/bench_grpc_stream.py), and
the master's cost is per message too (a stream read, a report script call, an acknowledgement). 2 ms gave one
or two results a message; 20 ms halved the master's CPU per task (docs/benchmarks.md, "Worker reports: 20 ms
instead of 2 ms"); 100 ms with the refill trigger, and the master's acknowledgements held as long, halved the
messages per task again ("2026-11-29 (night)"). A busy worker's results reach the master up to 100 ms later;
the slots do not wait for them (the prefetch queue refills them), nor do leases (seconds), nor the end of a
run (its last results leave at once).

While the worker is disconnected the batcher backs off and retries; results also stay pending in the result
ledger (worker/ledger.py) until the master acknowledges them, and are re-submitted after a reconnect — the
batcher's dedupe by (task, token) keeps one copy.
"""

from __future__ import annotations

from collections.abc import Callable

from sparkyard.batcher import Batcher
from sparkyard.batching import Item, Outcome
from sparkyard.clock import Clock
from sparkyard.v1 import sparkyard_pb2 as pb

# Reports per message, and the longest a report waits for company (well below a heartbeat).
REPORT_BATCH = 500
REPORT_DELAY_S = 0.1
# Reports held while the master is unreachable; beyond it a report is refused and the task's lease
# expires on the master (it is re-run) — a worker cut off that long has bigger problems.
REPORT_BUFFER = 100_000


class ReportSender:
    def __init__(self, clock: Clock, send: Callable[[pb.WorkerMessage], bool],
                 before_send: Callable[[], None]) -> None:
        self._send = send
        self._before_send = before_send  # the result ledger writes its new results to the outbox
        self._batcher: Batcher[pb.TaskStarted | pb.TaskResult] = Batcher(
            "worker-reports", self._process, clock=clock, max_batch_size=REPORT_BATCH,
            max_batch_delay_s=REPORT_DELAY_S, max_buffer=REPORT_BUFFER,
        )

    def start(self) -> None:
        self._batcher.start()

    async def close(self, timeout_s: float) -> None:
        await self._batcher.close(drain=True, timeout_s=timeout_s)

    def started(self, message: pb.TaskStarted) -> None:
        self._batcher.submit(("started", message.task_id, message.fencing_token), message)

    def result(self, message: pb.TaskResult) -> None:
        self._batcher.submit(("result", message.task_id, message.fencing_token), message)

    @property
    def held_back(self) -> bool:
        """The last message could not be sent (no master): what is queued waits out a backoff."""
        return self._batcher.backoff_s > 0

    def flush(self) -> None:
        """Send what is queued now: the worker has nothing running, so no more results are coming to
        share the message, and the master is waiting for these to refill the slots."""
        self._batcher.flush()

    async def _process(self, batch: list[Item[pb.TaskStarted | pb.TaskResult]]) -> Outcome:
        reports = pb.Reports()
        for item in batch:
            if isinstance(item.payload, pb.TaskStarted):
                reports.started.append(item.payload)
            else:
                reports.results.append(item.payload)
        self._before_send()
        if not self._send(pb.WorkerMessage(reports=reports)):
            return Outcome.TRANSIENT_ERROR  # not connected: retried after a backoff, or resent on register
        return Outcome.SUCCESS
