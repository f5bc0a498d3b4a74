"""The worker's result ledger: every attempt's result from its end until a master acknowledges it.

A result is written to the outbox (worker/outbox.py) before it is sent, batched with others into a
``Reports`` message (worker/reports.py), and kept pending until the master acknowledges it (accepted or
refused as stale): it is resent after RESEND_AFTER_S without an acknowledgement, and after every
reconnect; a restarted worker reads the outbox back and sends what it holds again. The master frees a
slot only on a result, so no result may be lost on the way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sparkyard.clock import Clock
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.outbox import Outbox
from sparkyard.worker.reports import ReportSender

log = logging.getLogger(__name__)

# A result not acknowledged for this long is sent again on the next heartbeat.
RESEND_AFTER_S = 10.0
# How long a stop lets the reports still queued leave.
CLOSE_TIMEOUT_S = 1.0


@dataclass
class Pending:
    """A result sent and not yet acknowledged."""

    result: pb.TaskResult
    sent_at: float


class ResultLedger:
    def __init__(self, work_dir: Path, clock: Clock, send: Callable[[pb.WorkerMessage], bool]) -> None:
        self._clock = clock
        self.pending: dict[tuple[str, int], Pending] = {}
        self.outbox = Outbox(work_dir)
        self._unwritten: list[pb.TaskResult] = []  # recorded, not in the outbox yet: written before they leave
        self._reports = ReportSender(clock, send, before_send=self._write_unwritten)

    async def start(self) -> None:
        for result in self.outbox.load():  # results a previous run of this worker never had acknowledged
            self.pending[(result.task_id, result.fencing_token)] = Pending(result, 0.0)
        self._reports.start()

    async def stop(self) -> None:
        try:
            await self._reports.close(timeout_s=CLOSE_TIMEOUT_S)
        finally:
            self._write_unwritten()
            self.outbox.close()

    def record(self, result: pb.TaskResult) -> None:
        """An attempt's end: on disk before it is sent (with the other results of its message, in one write),
        so a restarted worker sends it again."""
        self._unwritten.append(result)
        self.pending[(result.task_id, result.fencing_token)] = Pending(result, self._clock.monotonic())
        self._reports.result(result)
        if self._reports.held_back:  # no master to send to (a backoff of up to seconds): on disk now
            self._write_unwritten()

    def _write_unwritten(self) -> None:
        if self._unwritten:
            self.outbox.add(self._unwritten)
            self._unwritten = []

    def started(self, message: pb.TaskStarted) -> None:
        self._reports.started(message)

    def flush(self) -> None:
        """Send what is queued now (see :meth:`ReportSender.flush`)."""
        self._reports.flush()

    def held(self) -> list[pb.Lease]:
        """The leases of results not acknowledged yet: declared on (re)registering and in heartbeats, so a
        task that finished while no master was reachable is not requeued, and its result (resent) counts."""
        return [pb.Lease(task_id=task_id, fencing_token=token) for task_id, token in self.pending]

    def acknowledged(self, acks: pb.Acks) -> None:
        acked = []
        for ack in acks.acks:
            key = (ack.task_id, ack.fencing_token)
            if self.pending.pop(key, None) is not None:
                acked.append(key)
            if not ack.accepted:
                log.info("task=%s token=%d result refused by the master: %s", ack.task_id, ack.fencing_token,
                         ack.reason)
        if acked:
            self.outbox.ack(acked, len(self.pending))

    def resend_all(self) -> None:
        """A new master stream: every pending result goes again."""
        now = self._clock.monotonic()
        for pending in self.pending.values():
            self._reports.result(pending.result)
            pending.sent_at = now

    def resend_overdue(self) -> None:
        """On a heartbeat: results unacknowledged for RESEND_AFTER_S go again; the outbox is compacted."""
        now = self._clock.monotonic()
        for pending in self.pending.values():
            if now - pending.sent_at > RESEND_AFTER_S:
                self._reports.result(pending.result)
                pending.sent_at = now
        self._write_unwritten()  # a compaction rewrites every pending result, these too
        self.outbox.compact(p.result for p in self.pending.values())
