"""The submit runner: one ``spark-submit`` process per attempt — a separate Spark application.

Isolation is total (own JVM, own conf, own memory) at the price of Spark's start-up, ~10 s for a trivial
job on local[1] (docs/benchmarks.md). ``--master`` is the worker's ``--spark-master`` (``local[1]`` by
default; ``spark://…``, ``yarn`` or ``k8s://…`` work the same way).

The process is started in its own process group, recorded (worker/children.py), and killed as a group
(SIGTERM, then SIGKILL after a grace) on cancel, timeout, lost lease or a breach of the attempt's memory
limit (measured on the whole process tree); the driver bootstrap kills the group itself if the worker
dies. It runs in the attempt's working directory (worker/workspace.py) with the job's resources
(``--driver-memory``, ``--executor-memory``, ``--executor-cores``, ``--num-executors``), ``--py-files``
(the bundle's archive first, so executors import the bundle's modules as the driver does) and the job's
``--files``.
Everything the application prints — the task's output and Spark's log — goes to the attempt's log file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Callable

import sparkyard.worker
from sparkyard import resources
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker import jvm_temp
from sparkyard.worker.children import Children, tree_rss
from sparkyard.worker.class_archive import ClassArchive
from sparkyard.worker.disk import no_space
from sparkyard.worker.runner.base import ERROR_TAIL_LINES, AttemptRun, Outcome, log_tail
from sparkyard.worker.spark_home import spark_submit_path
from sparkyard.worker.warm_conf import MASTER_CONF, master_notice

log = logging.getLogger(__name__)

# Seconds between SIGTERM and SIGKILL when an attempt is killed.
KILL_GRACE_S = 5.0
# How often the memory of a running spark-submit (its whole process tree) is measured against the limit.
MEMORY_CHECK_S = 0.5
# Spark settings applied unless the job sets them: no UI (dozens of concurrent applications would fight
# over ports 4040+), and a local dir inside the attempt's directory.
DEFAULT_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
# The driver program (run as a file by spark-submit, never imported by the worker).
BOOTSTRAP = Path(sparkyard.worker.__file__).parent / "bootstrap.py"


def _temp_dir(work_dir: Path) -> Path:
    """An attempt's JVM and driver temporary files (worker/jvm_temp.py), removed when its spark-submit ends."""
    return work_dir / "spark-local"


class SubmitRunner:
    name = "submit"

    def __init__(self, spark_master: str, slots: int, children: Children, *, task_memory_mb: int = 0,
                 conf: dict[str, str] | None = None, archive: ClassArchive | None = None) -> None:
        self._master = spark_master or "local[1]"
        self._conf = dict(conf or {})
        self._archive = archive  # of Spark's classes, for every attempt's JVM (worker/class_archive.py)
        self._slots = slots
        self._children = children
        self._task_memory_mb = task_memory_mb
        self._spark_submit = ""
        self._error = ""
        self._running: set[asyncio.Task[None]] = set()
        self._kills: dict[str, asyncio.Event] = {}  # by attempt tag: set when that attempt is to be killed

    async def start(self) -> None:
        self._spark_submit = spark_submit_path()
        if not Path(self._spark_submit).exists():
            self._error = f"spark-submit not found at {self._spark_submit}"
            raise RuntimeError(self._error)
        if self._archive is not None:  # no JVM warms at this runner's start: made at once, in the background
            self._archive.make_soon()

    def readiness(self) -> tuple[int, str, int]:
        if self._error:
            return pb.READINESS_DEGRADED, self._error, 0
        if not self._spark_submit:
            return pb.READINESS_STARTING, "looking for spark-submit", 0
        return pb.READINESS_READY, "", self._slots

    def engine_changed(self, problem: str) -> None:
        return None  # each attempt is an application of its own: nothing outlives the attempts handed back

    async def close(self) -> None:
        return None

    def command(self, attempt: AttemptRun, work_dir: Path, task_file: Path, result_file: Path) -> list[str]:
        spec = attempt.assignment.spec
        cmd = [self._spark_submit or spark_submit_path(), "--master", self._master, "--name", attempt.tag]
        job_conf = {k: v for k, v in spec.conf.items() if k != MASTER_CONF}  # the worker's engine decides
        conf = jvm_temp.temp_conf({**DEFAULT_CONF, **self._conf, **job_conf}, _temp_dir(work_dir))
        if self._archive is not None:
            conf, _ = self._archive.conf(conf)
        for key, value in sorted(conf.items()):
            cmd += ["--conf", f"{key}={value}"]
        cmd += resources.submit_args(spec)
        ws = attempt.workspace
        py_files = [ws.archive] if ws.archive else []
        py_files += ws.py_files
        if py_files:
            cmd += ["--py-files", ",".join(py_files)]
        if ws.files:
            cmd += ["--files", ",".join(ws.files)]
        return [*cmd, str(BOOTSTRAP), str(task_file), str(result_file)]

    def begin(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        killed = self._kills[attempt.tag] = asyncio.Event()
        task = asyncio.ensure_future(self._run_then(attempt, killed, done))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    def kill(self, attempt: AttemptRun) -> None:
        killed = self._kills.get(attempt.tag)
        if killed is not None:
            killed.set()

    async def _run_then(self, attempt: AttemptRun, killed: asyncio.Event, done: Callable[[Outcome], None]) -> None:
        try:
            outcome = await self.run(attempt, killed)
        except asyncio.CancelledError:
            done(Outcome("FAILED", error="worker stopping"))
            raise
        except Exception as exc:
            log.exception("task=%s submit runner failed", attempt.assignment.task_id)
            outcome = Outcome.failure(exc, "submit runner error: ")
        finally:
            self._kills.pop(attempt.tag, None)
        done(outcome)

    async def run(self, attempt: AttemptRun, killed: asyncio.Event) -> Outcome:
        if not self._spark_submit:  # not the worker's default runner: started on first use
            await self.start()
        a = attempt.assignment
        work_dir = attempt.work_dir
        task_file = work_dir / "task.json"
        result_file = work_dir / "result.json"
        ctx = attempt.context()
        ws = attempt.workspace
        cmd = self.command(attempt, work_dir, task_file, result_file)
        env = {**os.environ, **dict(a.spec.env), **ctx.env(),
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARKYARD_WORKER_PID": str(os.getpid())}
        try:
            work_dir.mkdir(parents=True, exist_ok=True)
            task_file.write_text(json.dumps({
                "entrypoint": ws.entrypoint, "sys_path": list(ws.sys_path), "context": ctx.to_json(),
                "context_id": f"{a.task_id}.a{a.attempt}", "result_max_bytes": attempt.result_max_bytes,
            }))
            with open(attempt.log_path, "ab") as logf:
                logf.write(f"sparkyard: in {ws.cwd}: {' '.join(cmd)}\n".encode())
                notice = master_notice(a.spec.conf, self._master)
                if notice:
                    logf.write(f"sparkyard: warning: {notice}\n".encode())
                logf.flush()
                proc = await self._children.spawn(
                    *cmd, what="spark-submit", stdin=asyncio.subprocess.DEVNULL, stdout=logf,
                    stderr=asyncio.subprocess.STDOUT, cwd=ws.cwd, env=env,
                )
        except OSError as exc:
            if not no_space(exc):
                raise
            return Outcome("FAILED", error=f"could not start: {exc}", no_space=exc)
        log.info("task=%s attempt=%d spark-submit pid=%d", a.task_id, a.attempt, proc.pid)
        waiter = asyncio.create_task(proc.wait())
        killer = asyncio.create_task(killed.wait())
        limit = (a.spec.task_memory_mb or self._task_memory_mb) * 1024 * 1024
        try:
            while True:
                await asyncio.wait({waiter, killer}, timeout=MEMORY_CHECK_S if limit else None,
                                   return_when=asyncio.FIRST_COMPLETED)
                if waiter.done():
                    break
                if killer.done():
                    await self._kill_group(proc, waiter, attempt.kill_reason)
                    return Outcome("FAILED", error=f"killed: {attempt.kill_reason}")
                rss = await asyncio.to_thread(tree_rss, proc.pid)
                if rss > limit:
                    reason = (f"memory limit exceeded: spark-submit used {rss / 2**20:.0f} MiB, over the "
                              f"--task-memory limit of {limit / 2**20:.0f} MiB")
                    await self._kill_group(proc, waiter, reason, grace=False)
                    return Outcome("FAILED", error=reason, traceback=log_tail(attempt.log_path, ERROR_TAIL_LINES))
        finally:
            killer.cancel()
            if not waiter.done():
                await self._kill_group(proc, waiter, "worker stopping")
            Children.kill_group(proc.pid)  # whatever the application left running in its group
            self._children.forget(proc.pid)
            await asyncio.to_thread(jvm_temp.remove, _temp_dir(work_dir))
        return self._outcome(proc.returncode or 0, result_file, attempt.log_path)

    async def _kill_group(self, proc: asyncio.subprocess.Process, waiter: asyncio.Task[int], reason: str,
                          grace: bool = True) -> None:
        log.info("killing spark-submit pid=%d (%s)", proc.pid, reason)
        steps = ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)) if grace else ((signal.SIGKILL, None),)
        for sig, pause in steps:
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            if pause is None:
                break
            done, _ = await asyncio.wait({waiter}, timeout=pause)
            if done:
                return
        await waiter

    @staticmethod
    def _outcome(code: int, result_file: Path, log_path: str) -> Outcome:
        try:
            result = json.loads(result_file.read_text())
        except (OSError, ValueError):
            how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with exit code {code}"
            return Outcome("FAILED", error=f"spark-submit {how} before the task returned",
                           traceback=log_tail(log_path, ERROR_TAIL_LINES))
        if result.get("ok"):
            return Outcome("SUCCEEDED", result_json=result.get("result_json", ""))
        return Outcome("FAILED", error=result.get("error", "task failed"), traceback=result.get("traceback", ""))
