"""The session runner's pool warms its first drivers WARM_AT_ONCE at a time (half the machine's cores), each that
gets ready starting the next: on a machine of many cores a worker of many slots is ready in about one driver's
start, not one start per slot. On 2 cores the default is one at a time (two JVMs of the default configuration
starting at once on 2 cores made the first slot ready ~6 s later and both only ~2 s sooner:
docs/benchmarks.md); here the pool is told two, and both drivers start before either is ready."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import psutil
import pytest

from harness import TEST_CLASS_ARCHIVE_DIR, TEST_DRIVER_CONF, shared_class_archive
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.children import Children
from sparkyard.worker.class_archive import ClassArchive
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.runner.session import SessionRunner

READY_TIMEOUT_S = 240.0  # under the suite's 300 s per test; ~30x what two JVMs take on a loaded machine


async def test_a_pool_told_to_warm_two_at_once_starts_both_before_either_is_ready(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    shared_class_archive(TEST_DRIVER_CONF)  # made once for the suite: the drivers start from it
    conf = dict([TEST_DRIVER_CONF.split("=", 1)])
    all_ready = asyncio.Event()
    runner: SessionRunner | None = None

    def on_readiness() -> None:
        if runner is not None and runner.readiness()[0] == pb.READINESS_READY:
            all_ready.set()

    runner = SessionRunner("local[1]", 2, tmp_path, Children(tmp_path), conf=conf, on_readiness=on_readiness,
                           archive=ClassArchive(TEST_CLASS_ARCHIVE_DIR, conf, Children(tmp_path)), warm_at_once=2,
                           logs=LogFiles(tmp_path))
    caplog.set_level(logging.INFO, logger="sparkyard.worker.runner.driver_process")
    try:
        await runner.start()
        # Two JVMs, ~5 s each here; the bound only keeps a broken pool from hanging the suite.
        await asyncio.wait_for(all_ready.wait(), timeout=READY_TIMEOUT_S)
    finally:
        await runner.close()
    events = [m for m in caplog.messages if m.startswith("session driver")]
    starting = [i for i, m in enumerate(events) if " starting (pid" in m]
    ready = [i for i, m in enumerate(events) if " ready (pid" in m]
    assert len(starting) == 2 and len(ready) == 2 and max(starting) < min(ready), events


async def test_a_driver_the_pool_cannot_open_a_channel_to_is_killed_and_counted_as_a_failed_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spawned, but the socket to it cannot be wrapped: the process must not be left running beside the pool."""
    loop = asyncio.get_running_loop()
    children = Children(tmp_path)
    spawn = children.spawn
    spawned: list[int] = []

    async def recorded(*cmd: str, what: str, **kwargs: Any) -> asyncio.subprocess.Process:
        proc = await spawn(*cmd, what=what, **kwargs)
        spawned.append(proc.pid)
        return proc

    async def no_channel(*args: object, **kwargs: object) -> None:
        raise OSError("no channel (the test's)")

    monkeypatch.setattr(children, "spawn", recorded)
    monkeypatch.setattr(loop, "create_unix_connection", no_channel)
    runner = SessionRunner("local[1]", 1, tmp_path, children, logs=LogFiles(tmp_path))
    try:
        await runner.start()
        deadline = loop.time() + 60  # one spawn and its kill: well under a second here
        while "no channel" not in runner.readiness()[1]:
            assert loop.time() < deadline, runner.readiness()
            await asyncio.sleep(0.05)
        assert runner.readiness()[0] == pb.READINESS_DEGRADED and len(spawned) == 1
        assert not psutil.pid_exists(spawned[0]), "the spawned driver was left running"
    finally:
        await runner.close()
