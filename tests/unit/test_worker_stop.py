"""A SIGTERM'd worker exits even when a part of its drain or of its stop goes wrong (CI once waited 60 s for a
worker on a Spark standalone cluster that had logged "draining: 0 running" and then nothing)."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from sparkyard.config import WorkerConfig
from sparkyard.worker import assembly
from sparkyard.worker.assembly import build_worker


async def test_a_drain_that_fails_still_stops_the_worker_and_says_why(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    worker = build_worker(WorkerConfig(work_dir=str(tmp_path), id="w1").validate())

    def broken() -> None:
        raise RuntimeError("no heartbeat today")

    worker.link.send_heartbeat = broken  # type: ignore[method-assign]
    worker.request_drain()  # SIGTERM's path: the worker's own drain task takes it
    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(worker.drain(), timeout=30)
    assert worker._stopping.is_set()
    assert "the drain failed; stopping now" in caplog.text and "no heartbeat today" in caplog.text


class Hangs:
    name = "a part that hangs"

    async def stop(self) -> None:
        await asyncio.Event().wait()


async def test_a_part_that_does_not_stop_is_named_and_left(monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(assembly, "SERVICE_STOP_S", 0.2)
    began = time.monotonic()
    with caplog.at_level(logging.WARNING):
        await assembly._stop(Hangs())  # type: ignore[arg-type]
    assert time.monotonic() - began < 20
    assert "a part that hangs did not stop within 0s; stopping without it" in caplog.text
