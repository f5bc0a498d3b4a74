"""The session runner: one long-lived SparkSession per worker; each attempt runs in a thread of its own.

A warm session turns Spark's ~5–10 s start-up into ~0.1 s per task. Isolation between concurrent
attempts:

* SQL state — each attempt gets ``spark.newSession()``: its own runtime SQL conf, temp views and UDFs on
  the shared SparkContext. Job conf that cannot change at runtime (executor memory, …) is reported in the
  attempt's log and ignored; such jobs belong on the submit runner.
* Spark jobs — every job the attempt starts carries its job tag (``addJobTag``, thread-local in PySpark's
  pinned-thread mode); a kill calls ``cancelJobsWithTag`` and keeps re-issuing it until the thread ends,
  because the code may start a new job after the first one was cancelled.
* Python code — a kill also raises :class:`TaskKilled` inside the thread (``PyThreadState_SetAsyncExc``),
  which interrupts pure-Python loops. Code blocked in C outside Spark cannot be interrupted: its slot stays
  occupied (``stuck``, reported to the master so it is not counted as idle) until it returns.
* Output — ``print`` and ``ctx.logger`` of an attempt go to its own log file (stdout/stderr are routed by
  thread). Spark's JVM log is the worker's, shared by all attempts.
* FAIR scheduling between concurrent attempts' Spark jobs (``spark.scheduler.mode=FAIR``).
"""

from __future__ import annotations

import asyncio
import ctypes
import io
import logging
import sys
import threading
from dataclasses import dataclass
from typing import Any, TextIO

from sparkyard.worker.context import set_current
from sparkyard.worker.entry import encode_result, invoke
from sparkyard.worker.runner.base import AttemptRun, Outcome

log = logging.getLogger(__name__)

# How often a kill re-issues cancelJobsWithTag while the attempt's thread is still running.
CANCEL_REISSUE_S = 0.2
# How long a killed attempt's thread may take to end before its slot is reported stuck.
KILL_WAIT_S = 10.0
# Spark settings of the worker's session unless the worker's config overrides them.
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.shuffle.partitions": "8",
}


class TaskKilled(BaseException):
    """Raised inside an attempt's thread to stop it (a BaseException so user ``except Exception`` passes it)."""


class _ThreadRoutedStream(io.TextIOBase):
    """sys.stdout/sys.stderr replacement that writes to the current attempt's log, else the original."""

    def __init__(self, original: TextIO, local: threading.local) -> None:
        self._original = original
        self._local = local

    def write(self, text: str) -> int:
        target = getattr(self._local, "stream", None)
        return (target or self._original).write(text)

    def flush(self) -> None:
        target = getattr(self._local, "stream", None)
        (target or self._original).flush()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._original, "encoding", "utf-8")

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self._original.fileno()


@dataclass
class _Done:
    outcome: Outcome | None = None


class SessionRunner:
    name = "session"

    def __init__(self, spark_master: str, app_name: str, conf: dict[str, str] | None = None) -> None:
        self._master = spark_master
        self._app_name = app_name
        self._conf = {**SESSION_CONF, **(conf or {})}
        self._spark: asyncio.Future[Any] | None = None
        self._local = threading.local()
        self._stuck: set[threading.Thread] = set()
        self._routed = False

    async def start(self) -> None:
        """Start building the session in the background; the first attempt waits for it."""
        loop = asyncio.get_running_loop()
        self._spark = loop.run_in_executor(None, self._build)
        self._spark.add_done_callback(lambda f: f.exception())  # failure is reported per attempt

    def _build(self) -> Any:
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master(self._master).appName(self._app_name)
        for key, value in self._conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        log.info("SparkSession ready master=%s version=%s", self._master, spark.version)
        return spark

    async def session(self) -> Any:
        if self._spark is None:
            await self.start()
        assert self._spark is not None
        return await asyncio.shield(self._spark)

    def stuck(self) -> int:
        self._stuck = {t for t in self._stuck if t.is_alive()}
        return len(self._stuck)

    def _route_output(self) -> None:
        if not self._routed:
            sys.stdout = _ThreadRoutedStream(sys.stdout, self._local)
            sys.stderr = _ThreadRoutedStream(sys.stderr, self._local)
            self._routed = True

    async def run(self, attempt: AttemptRun) -> Outcome:
        try:
            spark = await self.session()
        except Exception as exc:
            return Outcome.failure(exc, "could not start the worker's SparkSession: ")
        self._route_output()
        loop = asyncio.get_running_loop()
        finished = loop.create_future()
        done = _Done()

        def settle() -> None:
            if not finished.done():
                finished.set_result(None)

        def body() -> None:
            try:
                done.outcome = self._execute(spark, attempt)
            finally:
                loop.call_soon_threadsafe(settle)

        thread = threading.Thread(target=body, name=f"task-{attempt.assignment.task_id}", daemon=True)
        thread.start()
        killer = asyncio.create_task(attempt.killed.wait())
        try:
            await asyncio.wait({finished, killer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            killer.cancel()
        if finished.done():
            return done.outcome or Outcome("FAILED", error="the task thread ended without an outcome")
        await self._kill(spark, attempt, thread, finished)
        return Outcome("FAILED", error=f"killed: {attempt.kill_reason}")

    async def _kill(self, spark: Any, attempt: AttemptRun, thread: threading.Thread, finished: asyncio.Future[None]) -> None:
        sc = spark.sparkContext
        if thread.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(TaskKilled))
        waited = 0.0
        while not finished.done() and waited < KILL_WAIT_S:
            await asyncio.to_thread(sc.cancelJobsWithTag, attempt.tag)
            await asyncio.wait({finished}, timeout=CANCEL_REISSUE_S)
            waited += CANCEL_REISSUE_S
        if not finished.done():
            log.warning("task=%s thread did not stop within %.0fs of its kill; its slot stays occupied until it returns",
                        attempt.assignment.task_id, KILL_WAIT_S)
            self._stuck.add(thread)

    def _execute(self, spark: Any, attempt: AttemptRun) -> Outcome:
        a = attempt.assignment
        logger = logging.Logger(f"sparkyard.task.{a.task_id}.a{a.attempt}")
        with attempt.log_path.open("a", buffering=1) as stream:
            handler = logging.StreamHandler(stream)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
            logger.addHandler(handler)
            self._local.stream = stream
            ctx = attempt.context(logger)
            set_current(ctx)
            sc = spark.sparkContext
            sc.addJobTag(attempt.tag)
            try:
                session = spark.newSession()
                for key, value in a.spec.conf.items():
                    try:
                        session.conf.set(key, value)
                    except Exception as exc:
                        logger.warning("conf %s=%s ignored by the session runner (%s); use --runner submit",
                                       key, value, str(exc).splitlines()[0])
                stream.write(f"sparkyard: attempt {a.attempt} of task {a.task_id} (token {a.fencing_token}) "
                             f"in the session of worker {attempt.worker_id}, job tag {attempt.tag}\n")
                value = invoke(a.spec.entrypoint, session, ctx)
                return Outcome("SUCCEEDED", result_json=encode_result(value, attempt.result_max_bytes))
            except BaseException as exc:  # user code's failure is the attempt's outcome
                import traceback as tb

                stream.write(tb.format_exc())
                return Outcome.failure(exc)
            finally:
                try:
                    sc.removeJobTag(attempt.tag)
                except Exception:
                    pass
                set_current(None)
                self._local.stream = None
                logger.removeHandler(handler)

    async def close(self) -> None:
        if self._spark is not None and self._spark.done() and not self._spark.exception():
            spark = self._spark.result()
            await asyncio.to_thread(spark.stop)
