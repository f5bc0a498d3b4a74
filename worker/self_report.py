"""What a worker tells a master about itself: the leases it holds, its readiness and slots, and the prefetch it
asks for — the content of its Register and Heartbeat messages and the prefetch every Reports message carries.

Apart from the link (worker/master_link.py), which decides when and to which master they go, because it is one
view of the worker's own state, and because a batch's room is measured against what was asked: a master that
sends more worked from an older figure (the one asked before the last is kept for that).
"""

from __future__ import annotations

import os
import socket

from sparkyard import __version__
from sparkyard.clock import Clock
from sparkyard.config import WorkerConfig
from sparkyard.runners import RUNNERS
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.ledger import ResultLedger
from sparkyard.worker.runners import Runners
from sparkyard.worker.slots import AttemptSlots


class SelfReport:
    def __init__(self, cfg: WorkerConfig, clock: Clock, slots: AttemptSlots, ledger: ResultLedger,
                 runners: Runners) -> None:
        self._cfg, self._clock, self._slots, self._ledger, self._runners = cfg, clock, slots, ledger, runners
        self._prefetch = slots.prefetch
        self.asked = 0  # the prefetch last told to the master
        self._asked_before = 0  # the one before it (the master may still be working from it)

    def ask(self) -> int:
        """The prefetch to ask the master for now (and remember it was asked)."""
        ready = self._runners.readiness()[2]
        asked = 0 if self._slots.draining else self._prefetch.want(ready, self._slots.running_for(self._clock.monotonic()))
        if asked != self.asked:
            self._asked_before, self.asked = self.asked, asked
        return asked

    def room(self) -> int:
        """Attempts a batch arriving now may add: the ready slots and the last prefetch asked for, less what is
        held (none while draining or with no slot ready)."""
        ready = 0 if self._slots.draining else self._runners.readiness()[2]
        return ready + max(self.asked, self._asked_before) - len(self._slots.executions) if ready else 0

    def held(self) -> list[pb.Lease]:
        """The leases to renew and to declare on (re)registering: running attempts, and ended ones whose
        result the master has not acknowledged."""
        return self._slots.held() + self._ledger.held()

    def register(self, sent_at: float) -> pb.Register:
        readiness, reason, ready = self._runners.readiness()
        cfg = self._cfg
        return pb.Register(
            worker_id=cfg.worker_id, group=cfg.group, slots=cfg.slots, host=socket.gethostname(),
            pid=os.getpid(), labels=cfg.labels, version=__version__, default_runner=RUNNERS[cfg.runner],
            held=self.held(), readiness=readiness, readiness_reason=reason, ready_slots=ready,
            prefetch=self.ask(), sent_us=int(sent_at * 1e6),
        )

    def heartbeat(self) -> pb.Heartbeat:
        readiness, reason, ready = self._runners.readiness()
        return pb.Heartbeat(
            free_slots=self._slots.free_slots(), held=self.held(), draining=self._slots.draining,
            readiness=readiness, readiness_reason=reason, ready_slots=ready, prefetch=self.ask(),
            sent_us=int(self._clock.monotonic() * 1e6))
