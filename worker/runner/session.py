"""The session runner: a pool of warm driver processes, one attempt at a time in each.

Each driver (worker/driver.py; its process: worker/runner/driver_process.py) holds a ready SparkSession; an
attempt runs there with its own ``newSession()``, working directory, argv, environment and log
(worker/compat.py makes a spark-submit program's ``getOrCreate()``, ``SparkContext(…)`` and ``stop()`` work
against the shared context). Task code never runs in the worker process, so an attempt that exits, segfaults
or is killed fails alone (with its exit code and the end of its log) and a replacement is warmed; a memory
limit (``--task-memory``) is watched on the driver's process tree; a cancel, timeout or lost lease asks the
driver to stop the attempt and kills its process group after ``KILL_GRACE_S``.

A driver is recycled after ``max_tasks`` attempts (a replacement is warmed first), after any crash, at once
after an attempt that left what a warm driver cannot put back (added files, Hadoop configuration, JVM system
properties, a thread still running: worker/spark_reset.py; on a cluster, Hadoop settings given at runtime:
worker/runtime_hadoop.py), and when an attempt's ``--files`` use a name its
SparkContext already serves from another path. An attempt whose job's conf a warm driver's JVM cannot take
runs on a fresh driver started for it alone (worker/runner/fresh.py). The pool's readiness — drivers that can
take an attempt now — is what the worker offers the master as slots (worker/runner/pool_health.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Callable

from sparkyard import resources
from sparkyard.config import DEFAULT_DRIVER_FROZEN_LIMIT_S, DEFAULT_DRIVER_MAX_TASKS, DEFAULT_RUNNER_WAIT_MAX_S
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker import jvm_temp
from sparkyard.worker.children import Children
from sparkyard.worker.class_archive import ClassArchive
from sparkyard.worker.logs import LogFiles
from sparkyard.worker.runner.base import ERROR_TAIL_LINES, AttemptRun, Outcome, log_tail
from sparkyard.worker.runner.driver_process import (KILL_GRACE_S, DriverProcess, Job, describe_exit, outcome_of,
                                                    run_message)
from sparkyard.worker.runner.fresh import FreshDrivers
from sparkyard.worker.runner.pool_health import PoolHealth
from sparkyard.worker.warm_conf import master_notice

log = logging.getLogger(__name__)

# Drivers a pool warms at once: a JVM's start keeps ~one core busy (docs/benchmarks.md); half the cores.
WARM_AT_ONCE = max(1, (os.cpu_count() or 1) // 2)
# How often the memory of busy drivers is measured.
MEMORY_CHECK_S = 0.5
# How long close() lets drivers exit on their own before killing them.
CLOSE_TIMEOUT_S = 10.0


class SessionRunner:
    name = "session"
    drivers = "Spark drivers"  # what readiness calls the pool's processes
    process_kind = "warm driver"  # what an attempt's log calls the process it runs in
    # A driver's SparkContext serves --files by name for its whole life (the connect runner's sessions don't).
    files_by_name = True

    def __init__(self, spark_master: str, slots: int, work_dir: Path, children: Children, *,
                 conf: dict[str, str] | None = None, task_memory_mb: int = 0,
                 max_tasks: int = DEFAULT_DRIVER_MAX_TASKS, wait_max_s: float = DEFAULT_RUNNER_WAIT_MAX_S,
                 on_readiness: Callable[[], None] | None = None, archive: ClassArchive | None = None,
                 warm_at_once: int = WARM_AT_ONCE, logs: LogFiles,
                 frozen_limit_s: float = DEFAULT_DRIVER_FROZEN_LIMIT_S) -> None:
        self.spark_master = spark_master or "local[1]"
        self.frozen_limit_s = frozen_limit_s  # the drivers' (worker/driver.py)
        self._warm_at_once = max(1, warm_at_once)
        self._wait_max_s = wait_max_s
        self.slots = slots
        self.conf = dict(conf or {})
        self.children = children
        self.drivers_dir = work_dir / "drivers"
        self.logs = logs  # where the drivers write their attempts' logs
        self._task_memory_mb = task_memory_mb
        self._max_tasks = max_tasks
        self._on_readiness = on_readiness or (lambda: None)
        self._archive = archive  # of Spark's classes, for the drivers' JVMs (worker/class_archive.py)
        self._drivers: list[DriverProcess] = []
        self._queue: deque[Job] = deque()
        self._jobs: dict[str, Job] = {}  # by attempt tag: every attempt begun here and not yet done
        self._numbers = 0
        self._health = PoolHealth(slots, self.name, self.drivers)
        self._started = False
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._monitor: asyncio.Task[None] | None = None
        # Drivers started for one attempt whose job's conf a warm driver's JVM cannot take (never slots).
        self._fresh = FreshDrivers(self._jobs, self.job_conf, lambda job: self._spawn_driver(dedicated=job),
                                   self._hand)

    # ---- life cycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._started:
            return
        self._started = True
        self.drivers_dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.drivers_dir.glob("driver-*.tmp"):  # of drivers a killed worker could not clean up
            await asyncio.to_thread(jvm_temp.remove, leftover)
        self._warm_first()
        self._monitor = asyncio.create_task(self._watch(), name="session-runner-watch")

    def _warm_first(self) -> None:
        """The pool's first drivers, WARM_AT_ONCE at a time: each that gets ready starts the next (driver_ready)."""
        for _ in range(min(self.slots, self._warm_at_once)):
            self._spawn_driver()

    def driver_conf(self, driver: DriverProcess) -> dict[str, str]:
        """The Spark conf a driver process starts with: the worker's (and the job's, for a fresh driver of
        one job), its JVM's temporary files its own, its classes from the class archive once there is one."""
        conf = jvm_temp.temp_conf(self._fresh.conf(driver, self.conf), driver.temp_dir)
        if self._archive is None:
            return conf
        conf, driver.class_archive = self._archive.conf(conf)
        return conf

    def _pool(self) -> list[DriverProcess]:
        """The drivers that serve any attempt (not those started for one job's conf)."""
        return [d for d in self._drivers if d.dedicated is None]

    def _spawn_driver(self, delay: float = 0.0, dedicated: Job | None = None) -> None:
        if self._health.engine_problem:  # it could not register its application; started when it is back
            return
        self._numbers += 1
        driver = DriverProcess(self, self._numbers, dedicated)
        self._drivers.append(driver)
        self._background(self._start_driver(driver, delay))

    async def _start_driver(self, driver: DriverProcess, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self._closing or self._health.engine_problem:
            self._drivers.remove(driver)
            return
        try:
            await driver.start()
        except Exception as exc:  # cannot even spawn: counted as a failed start
            log.exception("session driver %d could not be started", driver.number)
            driver.start_error = f"{type(exc).__name__}: {exc}"
            self.driver_ended(driver, None)

    def _background(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        self._closing = True
        if self._monitor is not None:
            self._monitor.cancel()
        for driver in self._drivers:
            driver.send({"op": "exit"})
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=CLOSE_TIMEOUT_S)
            for driver in self._drivers:
                driver.kill()
            if pending:
                await asyncio.wait(pending, timeout=KILL_GRACE_S * 2)

    def engine_changed(self, problem: str) -> None:
        """Without its cluster manager a driver's application is lost for good (Spark does not register it
        again with a restarted master): every driver goes now, and a fresh pool warms once it answers."""
        if problem:
            self._health.engine_problem = problem
        else:
            self._health.engine_back()
        if not self._started or self._closing:
            return
        if problem:
            for driver in list(self._drivers):
                driver.kill()
            return
        if not any(d.state != "leaving" for d in self._pool()):
            self._warm_first()

    # ---- readiness -----------------------------------------------------------------------------------------

    def readiness(self) -> tuple[int, str, int]:
        """(pb.Readiness, reason, slots that can take an attempt now)."""
        return self._health.readiness(self._started, sum(1 for d in self._pool() if d.state in ("ready", "busy")))

    # ---- attempts ------------------------------------------------------------------------------------------

    def begin(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        a = attempt.assignment

        def finished(outcome: Outcome) -> None:
            self._jobs.pop(attempt.tag, None)
            done(outcome)

        job = self._jobs[attempt.tag] = Job(attempt, finished, f"{a.task_id}.a{a.attempt}.t{a.fencing_token}")
        self._queue.append(job)
        self._dispatch()
        if not self._started:
            self._background(self.start())

    def _dispatch(self) -> None:
        while self._queue:
            job = self._queue[0]
            if job.attempt.killed is not None:
                self._queue.popleft()
                job.done(Outcome("FAILED", error=f"killed: {job.attempt.kill_reason}"))
                continue
            ready = [d for d in self._pool() if d.state == "ready"]
            files = job.attempt.workspace.files
            driver = next((d for d in ready if not d.clashes(files)), None)
            if driver is None:
                if ready and not any(d.retiring for d in self._pool()):
                    # Every idle driver serves another file under a name this attempt's --files use: one
                    # makes way for a fresh driver, which the attempt (first in line) then takes.
                    log.info("session driver %d retires: task=%s ships --files whose names it already serves "
                             "from other paths", ready[0].number, job.attempt.assignment.task_id)
                    ready[0].retiring = True
                    self._spawn_driver()
                return
            self._queue.popleft()
            self._hand(driver, job)
            if driver.tasks_run + 1 >= self._max_tasks and not driver.retiring and not self._closing:
                # Its last attempt: the replacement warms meanwhile, and it runs no other (driver_done).
                driver.retiring = True
                self._spawn_driver()

    def _hand(self, driver: DriverProcess, job: Job) -> None:
        driver.state, driver.job, job.driver = "busy", job, driver
        job.attempt.log_path = driver.attempt_log()
        if self.files_by_name:
            driver.files.update((os.path.basename(p), p) for p in job.attempt.workspace.files)
        driver.send(self._run_message(job))

    def job_conf(self, spec: pb.JobSpec) -> dict[str, str]:
        """The Spark conf a job asks its application for: its --conf and its sizes (--driver-memory and the
        executors', where spark-submit gives them to the worker's cluster manager), which a driver started
        with other values refuses, so a fresh one started with them runs the attempt (worker/warm_conf.py)."""
        return resources.spark_conf(spec, self.spark_master)

    def notices(self, attempt: AttemptRun) -> list[str]:
        """What a warm driver cannot do for this attempt, said in its log rather than silently skipped."""
        notice = master_notice(attempt.assignment.spec.conf, self.spark_master)
        return [notice] if notice else []

    def _run_message(self, job: Job) -> dict[str, Any]:
        return run_message(job, "fresh driver" if job.fresh else self.process_kind, self.notices(job.attempt),
                           self.job_conf(job.attempt.assignment.spec))

    def kill(self, attempt: AttemptRun) -> None:
        """A cancel, timeout or lost lease: ask the driver, then kill it if it does not stop in time."""
        job = self._jobs.get(attempt.tag)
        if job is None:  # already done
            return
        driver = job.driver
        if driver is None:  # still queued: _dispatch ends it
            if job in self._queue:
                self._queue.remove(job)
                job.done(Outcome("FAILED", error=f"killed: {job.attempt.kill_reason}"))
            self._fresh.kill_warming(job, self._drivers)
            return
        driver.send({"op": "cancel", "id": job.key})
        asyncio.get_running_loop().call_later(KILL_GRACE_S, self._kill_if_running, job,
                                              f"killed: {job.attempt.kill_reason} (it did not stop within "
                                              f"{KILL_GRACE_S:g}s of its cancel)")

    def _kill_if_running(self, job: Job, reason: str) -> None:
        driver = job.driver
        if driver is not None and driver.job is job:
            job.failure = reason
            log.warning("task=%s: killing its driver %d (pid %s): %s", job.attempt.assignment.task_id,
                        driver.number, driver.proc.pid if driver.proc else "?", reason)
            driver.kill()

    def _expire_queue(self) -> None:
        """Fail the attempts that waited ``wait_max_s`` for a runner that has failed to start and still cannot
        run any (no driver, no Spark Connect server): with the reason, so that their retries can go to a
        worker that can. A runner still starting for the first time is waited for."""
        if not self._queue:
            return
        state, reason, ready = self.readiness()
        if ready or state != pb.READINESS_DEGRADED:
            return
        now = time.monotonic()
        for job in [j for j in self._queue if now - j.queued_at >= self._wait_max_s]:
            self._queue.remove(job)
            job.done(Outcome("FAILED", error=f"waited {self._wait_max_s:g}s for the {self.name} runner, which cannot "
                                             f"run it: {reason or 'no ' + self.drivers + ' ready'}"))

    async def _watch(self) -> None:
        """Every MEMORY_CHECK_S: attempts waiting too long for the runner, and the memory of busy drivers."""
        while True:
            await asyncio.sleep(MEMORY_CHECK_S)
            self._expire_queue()
            for driver in list(self._drivers):
                await driver.enforce_memory(self._task_memory_mb)

    # ---- driver events ---------------------------------------------------------------------------------------

    def driver_ready(self, driver: DriverProcess) -> None:
        if self._fresh.warmed(driver):  # started for one job's conf: it runs that attempt alone, then leaves
            return
        self._health.started()
        if not self._health.warm:
            if len(self._pool()) < self.slots:
                self._spawn_driver()
            else:
                self._health.warm = all(d.state in ("ready", "busy") for d in self._pool())
                if self._health.warm and self._archive is not None:  # now, not to slow the pool's first warm-up
                    self._archive.make_soon()
        if self._archive is not None and driver.class_archive is not None and driver.proc is not None:
            self._archive.check(driver.proc.pid, driver.class_archive)
        retiring = sorted((d for d in self._pool() if d.retiring and d.state in ("ready", "busy")),
                          key=lambda d: d.state == "busy")
        if retiring:  # a warmed replacement takes over: the old one goes now, or after its attempt
            self._leave(retiring[0])
        self._on_readiness()
        self._dispatch()

    def _leave(self, driver: DriverProcess) -> None:
        """Retire a driver: at once when idle, else when its attempt ends."""
        idle = driver.state == "ready"
        driver.state = "leaving"
        if idle:
            driver.send({"op": "exit"})

    def driver_done(self, driver: DriverProcess, message: dict[str, Any]) -> None:
        job = driver.job
        if job is None or message.get("id") != job.key:
            return
        driver.job = None
        job.driver = None
        driver.attempt_logged(job, message)
        if message.get("fresh"):  # refused before running anything: a fresh driver with the job's conf runs it
            self._fresh.refused(driver, job, message["fresh"])
            self._dispatch()
            return
        driver.tasks_run += 1
        if driver.dedicated is not None or driver.state == "leaving":
            driver.state = "leaving"
            driver.send({"op": "exit"})
        else:
            driver.state = "ready"
            recycle = message.get("recycle", "")
            if recycle:
                log.info("session driver %d retires after task=%s: %s", driver.number,
                         job.attempt.assignment.task_id, recycle)
            if recycle or driver.tasks_run >= self._max_tasks:
                if not driver.retiring and not self._closing:
                    driver.retiring = True
                    self._spawn_driver()
                self._leave(driver)
        job.done(outcome_of(message))
        self._dispatch()

    def driver_ended(self, driver: DriverProcess, code: int | None) -> None:
        was_ready = driver.state in ("ready", "busy", "leaving")
        driver.state = "dead"
        if driver in self._drivers:
            self._drivers.remove(driver)
        job = driver.job
        driver.job = None
        if job is not None:
            job.driver = None
            tail = log_tail(job.attempt.log_path, ERROR_TAIL_LINES)
            error = job.failure or f"the task's driver process {describe_exit(code)}"
            job.done(Outcome("FAILED", error=error, traceback=tail))
        elif driver.dedicated is not None:
            self._fresh.ended(driver, code)
        if driver.log_path.exists() and (was_ready or self._closing or driver.dedicated is not None):
            driver.log_path.unlink(missing_ok=True)
        if self._closing or driver.dedicated is not None:
            return
        if self._health.engine_problem:  # killed with its lost application: replaced when the manager is back
            self._on_readiness()
            return
        if not was_ready and driver.tasks_run == 0:
            tail = log_tail(str(driver.log_path), 3).replace("\n", " | ")
            delay = self._health.failed(driver.start_error or f"driver {describe_exit(code)}: {tail}")
            log.error("session driver %d failed to start (%s); retrying in %.0fs", driver.number,
                      self._health.last_error, delay)
            self._spawn_driver(delay)
        elif len([d for d in self._pool() if d.state != "leaving"]) < self.slots:
            if job is not None:
                log.warning("session driver %d %s while running task=%s; warming a replacement", driver.number,
                            describe_exit(code), job.attempt.assignment.task_id)
            self._spawn_driver()
        self._on_readiness()
