"""A worker holds a task sent with ``start_after`` (a scheduled run fired ahead of its time) until then, on a
fake clock: the real AttemptSlots, with a runner that records what it was given (the slots' timing is what
is tested; the runners have their own tests)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Callable

import pytest

from sparkyard.clock import FakeClock
from sparkyard.config import WorkerConfig
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.bundles import BundleCache
from sparkyard.worker.connection import LeaseTerms
from sparkyard.worker.disk import Disk
from sparkyard.worker.engine import Engine
from sparkyard.worker.ledger import ResultLedger
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.metrics import WorkerMetrics
from sparkyard.worker.prefetch import Prefetch
from sparkyard.worker.runner.base import AttemptRun, Outcome
from sparkyard.worker.runners import Runners
from sparkyard.worker.slots import HANDBACK_AFTER_S, AttemptSlots


class Recording:
    """Takes every attempt it is given and ends it when told (``finish``)."""

    name = "session"

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self.begun: dict[str, tuple[float, Callable[[Outcome], None]]] = {}

    async def start(self) -> None:
        pass

    def readiness(self) -> tuple[int, str, int]:
        return pb.READINESS_READY, "", 4

    def begin(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        self.begun[attempt.assignment.task_id] = (self._clock.monotonic(), done)

    def kill(self, attempt: AttemptRun) -> None:
        self.begun.pop(attempt.assignment.task_id)[1](Outcome("FAILED", error="killed"))

    def engine_changed(self, problem: str) -> None:
        pass

    async def close(self) -> None:
        pass


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def runner(clock: FakeClock) -> Recording:
    return Recording(clock)


@pytest.fixture
def slots(tmp_path: Path, clock: FakeClock, runner: Recording) -> AttemptSlots:
    cfg = WorkerConfig(work_dir=str(tmp_path), id="w1", slots=4).validate()
    disk = Disk(tmp_path, min_free_bytes=0)
    runners = Runners(cfg, {"session": runner}, asyncio.Event(), Engine(cfg.spark_master), disk)
    return AttemptSlots(cfg, clock, LogFiles(tmp_path), BundleCache(tmp_path / "bundles", 1 << 20, None),  # type: ignore[arg-type]
                        runners, ResultLedger(tmp_path, clock, lambda message: True), Prefetch(0), WorkerMetrics(),
                        LeaseTerms(), "", disk)


def assignment(task_id: str, start_after_ms: int = 0) -> pb.TaskAssignment:
    a = pb.TaskAssignment(task_id=task_id, run_id="r", job_id="j", attempt=1, fencing_token=1,
                          spec=pb.JobSpec(entrypoint="/jobs/x.py:main"))
    if start_after_ms:
        a.start_after.FromMilliseconds(start_after_ms)
    return a


def test_a_task_sent_to_start_later_begins_then_and_does_not_hold_up_one_sent_to_start_now(
        slots: AttemptSlots, runner: Recording, clock: FakeClock) -> None:
    t0 = clock.monotonic()
    assert slots.accept(assignment("later", 250), have_room=True, leased_at=clock.monotonic())
    assert slots.accept(assignment("now"), have_room=True, leased_at=clock.monotonic())
    slots.pump()
    assert list(runner.begun) == ["now"]
    clock.advance(0.249)
    assert list(runner.begun) == ["now"]
    clock.advance(0.002)  # its own timer takes it to a slot: nothing else has to happen on the worker
    assert list(runner.begun) == ["now", "later"] and runner.begun["later"][0] == pytest.approx(t0 + 0.25)


def test_a_task_waiting_for_its_time_is_not_handed_back_as_stuck_and_a_cancel_ends_it_unstarted(
        slots: AttemptSlots, runner: Recording, clock: FakeClock) -> None:
    slots.accept(assignment("later", int((HANDBACK_AFTER_S + 1) * 1000)), have_room=True, leased_at=clock.monotonic())
    clock.advance(HANDBACK_AFTER_S + 0.5)
    slots._hand_back_stuck()
    assert "later" in slots.executions and runner.begun == {}
    slots.cancel(pb.CancelTask(task_id="later", fencing_token=1, reason="cancelled by the user"))
    assert "later" not in slots.executions
    clock.advance(1.0)
    assert runner.begun == {}
