"""Fresh drivers: a driver process started for one attempt, with its job's conf, when no warm one can run it.

A warm driver's JVM started with the worker's conf; a job's ``--conf`` that Spark fixes when its context
starts (core conf, static SQL conf: worker/warm_conf.py) cannot reach an attempt there. Under spark-submit
the program's JVM would start with it, so rather than let the difference pass silently the attempt runs on
a driver started for it alone with the worker's conf and the job's.

The warm driver decides: it refuses the attempt before running anything of it, naming what its JVM cannot
take (worker/driver.py). This module takes it from there — the warm driver goes back to the pool, a fresh
one starts, takes the attempt once warm and leaves with it; an attempt killed while its driver warms, or a
driver that never starts (a conf Spark refuses), fails the attempt with the reason.

Why apart from the pool (worker/runner/session.py): a fresh driver is never offered as a slot, never takes
another attempt and is not replaced when it ends, so none of the pool's bookkeeping (readiness, recycling,
restart backoff) applies to it; the pool only starts it and routes its events here.
"""

from __future__ import annotations

import logging
from typing import Callable, Mapping

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.runner.base import ERROR_TAIL_LINES, Outcome, log_tail
from sparkyard.worker.runner.driver_process import DriverProcess, Job, describe_exit
from sparkyard.worker.warm_conf import fresh_driver_conf

log = logging.getLogger(__name__)


class FreshDrivers:
    """The fresh drivers of one pool. ``jobs``: the pool's attempts begun and not yet done, by tag;
    ``job_conf``: the Spark conf a job asks for (the runner's); ``start``: starts a driver for one job;
    ``hand``: gives a warm driver its attempt."""

    def __init__(self, jobs: Mapping[str, Job], job_conf: Callable[[pb.JobSpec], dict[str, str]],
                 start: Callable[[Job], None], hand: Callable[[DriverProcess, Job], None]) -> None:
        self._jobs = jobs
        self._job_conf = job_conf
        self._start = start
        self._hand = hand

    def conf(self, driver: DriverProcess, worker_conf: dict[str, str]) -> dict[str, str]:
        """The Spark conf ``driver`` starts with: the worker's, and the job's for the fresh driver of one job."""
        job = driver.dedicated
        return fresh_driver_conf(worker_conf, self._job_conf(job.attempt.assignment.spec)) if job else worker_conf

    def refused(self, driver: DriverProcess, job: Job, items: list[str]) -> None:
        """Warm ``driver`` refused ``job`` before running anything of it (``items``: the ``key=value`` conf
        its JVM cannot take): the driver is free again (or leaves, if it was told to), and a fresh driver
        with the job's conf starts for the attempt."""
        if driver.state == "busy":
            driver.state = "ready"
        elif driver.state == "leaving":
            driver.send({"op": "exit"})
        job.fresh = list(items)
        log.info("task=%s needs a fresh driver: a warm driver's JVM cannot take %s",
                 job.attempt.assignment.task_id, ", ".join(job.fresh))
        self._start(job)

    def warmed(self, driver: DriverProcess) -> bool:
        """Whether ``driver``, now ready, is a fresh driver: it runs its attempt, or leaves at once if the
        attempt was killed while it warmed."""
        job = driver.dedicated
        if job is None:
            return False
        if job.failure:
            driver.state = "leaving"
            driver.send({"op": "exit"})
        else:
            self._hand(driver, job)
        return True

    def kill_warming(self, job: Job, drivers: list[DriverProcess]) -> None:
        """``job``, not yet running, is killed: the fresh driver warming for it (if any) goes, and its end
        fails the attempt with the kill's reason (:meth:`ended`)."""
        for warming in [d for d in drivers if d.dedicated is job]:
            job.failure = f"killed: {job.attempt.kill_reason}"
            warming.kill()

    def ended(self, driver: DriverProcess, code: int | None) -> None:
        """The fresh ``driver`` ended before it ran its attempt (a conf Spark refuses, a kill while it
        warmed): the attempt fails with why."""
        job = driver.dedicated
        if job is None or job.attempt.tag not in self._jobs:  # already ended (killed while its driver warmed)
            return
        why = driver.start_error or f"{describe_exit(code)}: {log_tail(str(driver.log_path), 3)}".replace("\n", " | ")
        job.done(Outcome("FAILED", error=job.failure or (
            f"the fresh driver started with the job's conf ({', '.join(job.fresh)}) did not start: {why}"),
            traceback=log_tail(str(driver.log_path), ERROR_TAIL_LINES)))
