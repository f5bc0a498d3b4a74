"""The session runner: one long-lived SparkSession per worker; each attempt runs on a task thread.

A warm session turns Spark's ~5–10 s start-up into ~0.1 s per task. Isolation between concurrent
attempts:

* SQL state — an attempt's ``spark`` is its own ``spark.newSession()``: its own runtime SQL conf, temp
  views and UDFs on the shared SparkContext. Job conf that cannot change at runtime (executor memory, …)
  is reported in the attempt's log and ignored; such jobs belong on the submit runner.
* Spark jobs — every Spark job the attempt starts carries its job tag (``addJobTag``, thread-local in
  PySpark's pinned-thread mode); a kill calls ``cancelJobsWithTag`` and keeps re-issuing it until the
  attempt ends, because the code may start a new job after the first one was cancelled.
* Python code — a kill also raises :class:`TaskKilled` inside the task thread
  (``PyThreadState_SetAsyncExc``), which interrupts pure-Python loops. Code blocked in C outside Spark
  cannot be interrupted: its thread stays busy (``stuck``, reported to the master so the slot is not
  counted as idle) until it returns.
* Output — ``print`` and ``ctx.logger`` of an attempt go to its own log file (stdout/stderr are routed by
  thread). Spark's JVM log is the worker's, shared by all attempts.
* FAIR scheduling between concurrent attempts' Spark jobs (``spark.scheduler.mode=FAIR``).

Costs are paid only when used: the attempt's session is a :class:`LazySession` that creates the new
session and adds the job tag on first use, and task threads are pooled — in pinned-thread mode every
new Python thread opens its own py4j connection and JVM thread, so reusing threads reuses those. A task
that never touches ``spark`` makes no JVM call at all (measured in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import ctypes
import io
import logging
import queue
import sys
import threading
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine, TextIO

from sparkyard.worker.context import set_current
from sparkyard.worker.entry import encode_result, invoke
from sparkyard.worker.runner.base import AttemptRun, Outcome

log = logging.getLogger(__name__)

# How often a kill re-issues cancelJobsWithTag while the attempt is still running.
CANCEL_REISSUE_S = 0.2
# How long a killed attempt may take to end before its thread is reported stuck.
KILL_WAIT_S = 10.0
# Spark settings of the worker's session unless the worker's config overrides them.
SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.shuffle.partitions": "8",
}


class TaskKilled(BaseException):
    """Raised inside a task thread to stop its attempt (a BaseException so ``except Exception`` passes it)."""


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Schedule ``exc`` in another thread (None clears one that was scheduled and not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


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


class _LazyLog(io.TextIOBase):
    """An attempt's log file, opened on the first write (an attempt that prints nothing creates none)."""

    def __init__(self, path: str, header: str) -> None:
        self._path = path
        self._header = header
        self._file: TextIO | None = None

    def write(self, text: str) -> int:
        if self._file is None:
            self._file = open(self._path, "a", buffering=1)
            self._file.write(self._header)
        return self._file.write(text)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


_LOG_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")


class LazySession:
    """The attempt's SparkSession, created (``newSession`` + the job tag + the job's conf) on first use."""

    __slots__ = ("_root", "_attempt", "_logger", "_session", "tagged")

    def __init__(self, root: Any, attempt: AttemptRun, logger: logging.Logger) -> None:
        self._root = root
        self._attempt = attempt
        self._logger = logger
        self._session: Any = None
        self.tagged = False

    def _real(self) -> Any:
        if self._session is None:
            self._root.sparkContext.addJobTag(self._attempt.tag)
            self.tagged = True
            session = self._root.newSession()
            for key, value in self._attempt.assignment.spec.conf.items():
                try:
                    session.conf.set(key, value)
                except Exception as exc:
                    self._logger.warning("conf %s=%s ignored by the session runner (%s); use --runner submit",
                                         key, value, str(exc).splitlines()[0])
            self._session = session
        return self._session

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __repr__(self) -> str:
        return f"<LazySession of {self._attempt.tag} ({'created' if self._session is not None else 'unused'})>"


class _Completions:
    """Outcomes handed from task threads to the event loop.

    ``call_soon_threadsafe`` writes to the loop's wake-up pipe on every call; under load many attempts
    end within one loop iteration, so the outcomes queue here and the pipe is written only when the queue
    goes from empty to non-empty (one wake-up drains them all).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[tuple[_Job, Outcome]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, job: _Job, outcome: Outcome) -> None:
        with self._lock:
            self._queue.append((job, outcome))
            if self._scheduled:
                return
            self._scheduled = True
        self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            items, self._queue = self._queue, deque()
            self._scheduled = False
        for job, outcome in items:
            try:
                job.settle(outcome)
            except Exception:  # one attempt's bookkeeping must not strand the others in this batch
                log.exception("task=%s: handling its outcome failed", job.attempt.assignment.task_id)


@dataclass(eq=False)
class _Job:
    """One attempt handed to a task thread. Its outcome reaches ``done`` once: from the thread's
    completion, or — once a kill was requested — when the kill is over (SessionRunner._kill_then_finish)."""

    attempt: AttemptRun
    completions: _Completions
    done: Callable[[Outcome], None]
    outcome: Outcome | None = None
    ended: bool = False  # thread side: finish() was called
    killing: bool = False  # loop side: a kill is in progress, and it calls done
    wake: asyncio.Future[None] | None = None  # what a kill in progress waits on
    thread: _TaskThread | None = None  # set (under the kill lock) by the thread that runs it

    def finish(self, outcome: Outcome) -> None:
        """From the task thread: the attempt's outcome (once)."""
        if not self.ended:
            self.ended = True
            self.completions.put(self, outcome)

    def settle(self, outcome: Outcome) -> None:
        """On the loop: the thread's outcome arrived."""
        self.outcome = outcome
        if not self.killing:
            self.done(outcome)
        elif self.wake is not None and not self.wake.done():
            self.wake.set_result(None)


@dataclass(eq=False)
class _TaskThread:
    """A pooled task thread: takes attempts from the runner's shared queue, one at a time.

    One queue for all threads means a thread that finishes an attempt takes the next one without
    sleeping; a sleeping thread is woken only when no running thread comes back for work first.
    """

    runner: SessionRunner
    spark: Any
    current: _Job | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="sparkyard-task", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        lock = self.runner.kill_lock
        while True:
            job: _Job | None = None
            outcome = Outcome("FAILED", error="killed")
            # A kill is raised at most once per attempt and only while it runs here (under the lock); it
            # may surface anywhere in this block, and whatever it interrupts, the attempt gets an outcome.
            try:
                job = self.runner.next_job(self)
                if job is None:
                    return
                with lock:
                    self.current = job
                    job.thread = self
                outcome = self.runner.execute(self.spark, job.attempt)
                with lock:
                    self.current = None
                    _raise_in(threading.get_ident(), None)
            except TaskKilled:
                with lock:
                    self.current = None
            except BaseException as exc:  # a failure of the runner itself must still end the attempt
                log.exception("task thread failed outside the attempt")
                outcome = Outcome.failure(exc, "session runner error: ")
                with lock:
                    self.current = None
            if job is not None:
                job.finish(outcome)


class SessionRunner:
    name = "session"

    def __init__(self, spark_master: str, app_name: str, conf: dict[str, str] | None = None) -> None:
        self._master = spark_master
        self._app_name = app_name
        self._conf = {**SESSION_CONF, **(conf or {})}
        self._spark: asyncio.Future[Any] | None = None
        self._local = threading.local()
        self.work: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._threads: list[_TaskThread] = []
        self._waiting = 0  # threads blocked on `work`
        self._abandoned: set[_TaskThread] = set()
        self._pool_lock = threading.Lock()
        self.kill_lock = threading.Lock()
        self._routed = False
        self._completions: _Completions | None = None
        self._background: set[asyncio.Task[None]] = set()  # kills in progress, attempts waiting for the session
        # Attempt loggers write through this to the current thread's attempt log (else the worker's stderr).
        self._log_handler = logging.StreamHandler(_ThreadRoutedStream(sys.stderr, self._local))
        self._log_handler.setFormatter(_LOG_FORMAT)

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
        with self._pool_lock:
            self._abandoned = {t for t in self._abandoned if t.current is not None}
            return len(self._abandoned)

    def next_job(self, thread: _TaskThread) -> _Job | None:
        """Called by a task thread: the next attempt to run (None: the thread should exit)."""
        with self._pool_lock:
            self._waiting += 1
            self._abandoned.discard(thread)
        job = self.work.get()
        with self._pool_lock:
            self._waiting -= 1
        return job

    def _submit(self, spark: Any, job: _Job) -> None:
        """Queue an attempt, starting a thread when no idle one is left to take it."""
        with self._pool_lock:
            spawn = self._waiting <= self.work.qsize()
        if spawn:
            thread = _TaskThread(self, spark)
            self._threads.append(thread)
            thread.start()
        self.work.put(job)

    def _route_output(self) -> None:
        if not self._routed:
            sys.stdout = _ThreadRoutedStream(sys.stdout, self._local)
            sys.stderr = _ThreadRoutedStream(sys.stderr, self._local)
            self._routed = True

    def begin(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        """Hand the attempt to a task thread; ``done`` gets its outcome on the event loop.

        No coroutine, task or future is made per attempt on the common path (the session is up): at
        thousands of short attempts a second they were a good part of the worker's CPU.
        """
        ready = self._spark
        if ready is not None and ready.done() and not ready.cancelled() and ready.exception() is None:
            self._start_now(ready.result(), attempt, done)
        else:
            self._spawn(self._start_when_ready(attempt, done))

    async def _start_when_ready(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        try:
            spark = await self.session()
        except Exception as exc:
            done(Outcome.failure(exc, "could not start the worker's SparkSession: "))
            return
        self._start_now(spark, attempt, done)

    def _start_now(self, spark: Any, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        self._route_output()
        if self._completions is None:
            self._completions = _Completions(asyncio.get_running_loop())
        job = _Job(attempt, self._completions, done)
        attempt.on_kill = lambda: self._interrupt(spark, job)
        self._submit(spark, job)
        if attempt.killed:
            self._interrupt(spark, job)

    def _interrupt(self, spark: Any, job: _Job) -> None:
        """On the loop: a kill was requested (once it ended on its own, there is nothing to kill)."""
        if job.outcome is None and not job.killing:
            job.killing = True
            self._spawn(self._kill_then_finish(spark, job))

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _kill_then_finish(self, spark: Any, job: _Job) -> None:
        try:
            await self._kill(spark, job.attempt, job)
        finally:
            job.done(Outcome("FAILED", error=f"killed: {job.attempt.kill_reason}"))

    async def _kill(self, spark: Any, attempt: AttemptRun, job: _Job) -> None:
        with self.kill_lock:
            thread = job.thread
            if thread is not None and thread.current is job and thread.thread and thread.thread.ident:
                _raise_in(thread.thread.ident, TaskKilled)
        sc = spark.sparkContext
        waited = 0.0
        while job.outcome is None and waited < KILL_WAIT_S:
            await asyncio.to_thread(sc.cancelJobsWithTag, attempt.tag)
            job.wake = asyncio.get_running_loop().create_future()
            if job.outcome is None:
                await asyncio.wait({job.wake}, timeout=CANCEL_REISSUE_S)
            waited += CANCEL_REISSUE_S
        if job.outcome is None:
            log.warning("task=%s did not stop within %.0fs of its kill; its thread stays busy until it returns",
                        attempt.assignment.task_id, KILL_WAIT_S)
            with self._pool_lock:
                if job.thread is not None and job.thread.current is job:
                    self._abandoned.add(job.thread)

    def execute(self, spark: Any, attempt: AttemptRun) -> Outcome:
        """Run one attempt on the calling task thread (its output routed to the attempt's log)."""
        a = attempt.assignment
        # Every attempt's logger shares one handler that writes to the calling thread's attempt log:
        # creating a handler per attempt takes logging's global lock, which all task threads contend for.
        logger = logging.Logger(f"sparkyard.task.{a.task_id}.a{a.attempt}")
        logger.handlers = [self._log_handler]
        header = (f"sparkyard: attempt {a.attempt} of task {a.task_id} (token {a.fencing_token}) "
                  f"in the session of worker {attempt.worker_id}, job tag {attempt.tag}\n")
        with _LazyLog(attempt.log_path, header) as stream:
            self._local.stream = stream
            ctx = attempt.context(logger)
            set_current(ctx)
            session = LazySession(spark, attempt, logger)
            try:
                value = invoke(a.spec.entrypoint, session, ctx)
                return Outcome("SUCCEEDED", result_json=encode_result(value, attempt.result_max_bytes))
            except BaseException as exc:  # user code's failure (or a kill) is the attempt's outcome
                stream.write(traceback.format_exc())
                return Outcome.failure(exc)
            finally:
                if session.tagged:
                    try:
                        spark.sparkContext.removeJobTag(attempt.tag)
                    except Exception:
                        log.debug("removeJobTag failed", exc_info=True)
                set_current(None)
                self._local.stream = None

    async def close(self) -> None:
        for _ in self._threads:
            self.work.put(None)
        if self._spark is not None and self._spark.done() and not self._spark.exception():
            spark = self._spark.result()
            await asyncio.to_thread(spark.stop)
