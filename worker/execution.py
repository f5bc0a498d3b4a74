"""One attempt leased to a worker, as the slots (:mod:`sparkyard.worker.slots`) keep it from its arrival to its
reported end."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sparkyard.clock import Cancellable
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.runner.base import AttemptRun, Runner


@dataclass(eq=False)
class Execution:
    """One attempt leased to this worker: queued for a slot, then running."""

    assignment: pb.TaskAssignment
    run: AttemptRun  # its kill, if any, is recorded there (run.killed)
    runner: Runner  # the one that runs it (chosen on arrival, from its job's spec)
    renewed_at: float  # monotonic time of the last lease renewal (or of receipt)
    not_before: float  # monotonic time it may start (its arrival, or later for a run fired ahead of its time)
    begun_at: float = 0.0  # monotonic time a slot took it (0: still queued)
    started_ms: int = 0  # wall-clock ms when the runner was given the attempt
    placed: bool = False  # its bundle (if any) is in the cache: a slot can take it
    bundle_root: Path | None = None
    ended: bool = False
    announced: bool = False  # its start was reported on its own (see AttemptSlots.watch)
    timer: Cancellable | None = None  # the attempt's timeout, if it has one
    bundle: pb.BundleRef | None = None  # the bundle it holds in the cache while it runs
