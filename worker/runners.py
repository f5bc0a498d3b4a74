"""The worker's runners, by name, and its readiness: how many slots can take a task now.

The slots offered are those of the default runner (``--runner``): it starts with the worker, retried with
backoff until it can run a task, and until then no slot is offered; another runner starts when a job first
asks for it. No slot is offered either while the worker's Spark cluster manager does not answer
(worker/engine.py): every runner runs its Spark there; nor while its work directory is full (worker/disk.py). A runner tells of a change in its readiness through the ``on_readiness`` it was built with,
which sets the event this object is given; :meth:`Runners.changed` hands the change to the master link.
"""

from __future__ import annotations

import asyncio
import logging

from sparkyard.config import WorkerConfig
from sparkyard.runners import runner_name
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.disk import Disk
from sparkyard.worker.engine import Engine
from sparkyard.worker.runner.base import Runner

log = logging.getLogger(__name__)

# A runner that fails to start is tried again after this pause, doubling up to the maximum.
RUNNER_RETRY_S = 1.0
RUNNER_RETRY_MAX_S = 60.0


class Runners:
    def __init__(self, cfg: WorkerConfig, runners: dict[str, Runner], changed: asyncio.Event, engine: Engine,
                 disk: Disk) -> None:
        self._cfg = cfg
        self.engine = engine
        self.disk = disk
        self._runners = runners
        self._changed = changed  # set by a runner (its on_readiness) or here
        self._error = ""  # the default runner failed to start (retried with backoff)

    def __getitem__(self, name: str) -> Runner:
        return self._runners[name]

    def for_spec(self, spec: pb.JobSpec) -> Runner:
        return self._runners[runner_name(spec.runner) or self._cfg.runner]

    async def close(self) -> None:
        for runner in self._runners.values():
            await runner.close()

    def readiness(self) -> tuple[int, str, int]:
        """(pb.Readiness, reason, slots that can take a task now), from the default runner."""
        if self._error:
            return pb.READINESS_DEGRADED, self._error, 0
        if self.engine.problem:
            return pb.READINESS_DEGRADED, self.engine.problem, 0
        if self.disk.problem:
            return pb.READINESS_DEGRADED, self.disk.problem, 0
        state, reason, ready = self._runners[self._cfg.runner].readiness()
        return state, reason, min(ready, self._cfg.slots)

    def engine_changed(self, problem: str) -> None:
        """The cluster manager went away or came back: every runner hears of it, the master at once."""
        for runner in self._runners.values():
            runner.engine_changed(problem)
        self._changed.set()

    def disk_changed(self) -> None:
        """The work directory filled up or has room again: the master hears of it at once."""
        self._changed.set()

    async def changed(self) -> tuple[int, str, int]:
        """The readiness, once a runner says it may have changed."""
        await self._changed.wait()
        self._changed.clear()
        return self.readiness()

    async def start_default(self) -> None:
        """Start the default runner, retrying with backoff (it may take minutes, or never succeed)."""
        runner = self._runners[self._cfg.runner]
        pause = RUNNER_RETRY_S
        while True:
            try:
                await runner.start()
                self._error = ""
                break
            except Exception as exc:
                self._error = f"{runner.name} runner failed to start: {exc} (retrying in {pause:.0f}s)"
                log.error("%s", self._error)
                self._changed.set()
                await asyncio.sleep(pause)
                pause = min(RUNNER_RETRY_MAX_S, pause * 2)
        self._changed.set()
