"""The submit runner: one ``spark-submit`` process per attempt — a separate Spark application.

Isolation is total (own JVM, own conf, own memory) at the price of Spark's start-up, ~10 s for a trivial
job on local[1] (docs/benchmarks.md). ``--master`` is the worker's ``--spark-master`` (``local[1]`` by
default; ``spark://…``, ``yarn`` or ``k8s://…`` work the same way).

The process is started in its own process group and killed as a group (SIGTERM, then SIGKILL after a
grace) on cancel, timeout or lost lease; the driver bootstrap kills the group itself if the worker dies.
Everything the application prints — the task's output and Spark's log — goes to the attempt's log file.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Callable

from pyspark.find_spark_home import _find_spark_home

import sparkyard.worker
from sparkyard.worker.runner.base import AttemptRun, Outcome

log = logging.getLogger(__name__)

# Seconds between SIGTERM and SIGKILL when an attempt is killed.
KILL_GRACE_S = 5.0
# Lines of the log quoted in the error when spark-submit fails without a result.
ERROR_TAIL_LINES = 20
# Spark settings applied unless the job sets them: no UI (dozens of concurrent applications would fight
# over ports 4040+), and a local dir inside the attempt's directory.
DEFAULT_CONF = {"spark.ui.enabled": "false"}
# The driver program (run as a file by spark-submit, never imported by the worker).
BOOTSTRAP = Path(sparkyard.worker.__file__).parent / "bootstrap.py"


def spark_submit_path() -> str:
    """spark-submit of the installed pyspark (its bin/ ships inside the wheel)."""
    home = Path(_find_spark_home())
    return str(home / "bin" / "spark-submit")


def _tail(path: Path, lines: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class SubmitRunner:
    name = "submit"

    def __init__(self, spark_master: str) -> None:
        self._master = spark_master or "local[1]"
        self._spark_submit = ""
        self._running: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._spark_submit = spark_submit_path()
        if not Path(self._spark_submit).exists():
            raise RuntimeError(f"spark-submit not found at {self._spark_submit}")

    def stuck(self) -> int:
        return 0

    async def close(self) -> None:
        return None

    def command(self, attempt: AttemptRun, work_dir: Path, task_file: Path, result_file: Path) -> list[str]:
        spec = attempt.assignment.spec
        cmd = [self._spark_submit or spark_submit_path(), "--master", self._master, "--name", attempt.tag]
        conf = {**DEFAULT_CONF, "spark.local.dir": str(work_dir / "spark-local"), **dict(spec.conf)}
        for key, value in sorted(conf.items()):
            cmd += ["--conf", f"{key}={value}"]
        if spec.py_files:
            cmd += ["--py-files", ",".join(spec.py_files)]
        return [*cmd, str(BOOTSTRAP), str(task_file), str(result_file)]

    def begin(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        task = asyncio.ensure_future(self._run_then(attempt, done))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _run_then(self, attempt: AttemptRun, done: Callable[[Outcome], None]) -> None:
        try:
            outcome = await self.run(attempt)
        except asyncio.CancelledError:
            done(Outcome("FAILED", error="worker stopping"))
            raise
        except Exception as exc:
            log.exception("task=%s submit runner failed", attempt.assignment.task_id)
            outcome = Outcome.failure(exc, "submit runner error: ")
        done(outcome)

    async def run(self, attempt: AttemptRun) -> Outcome:
        a = attempt.assignment
        work_dir = attempt.work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        task_file = work_dir / "task.json"
        result_file = work_dir / "result.json"
        ctx = attempt.context()
        task_file.write_text(json.dumps({
            "entrypoint": a.spec.entrypoint, "context": ctx.to_json(), "context_id": f"{a.task_id}.a{a.attempt}",
            "result_max_bytes": attempt.result_max_bytes,
        }))
        cmd = self.command(attempt, work_dir, task_file, result_file)
        env = {**os.environ, **dict(a.spec.env), **ctx.env(),
               "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARKYARD_WORKER_PID": str(os.getpid())}
        with open(attempt.log_path, "ab") as logf:
            logf.write(f"sparkyard: {' '.join(cmd)}\n".encode())
            logf.flush()
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=logf, stderr=asyncio.subprocess.STDOUT,
                cwd=work_dir, env=env, start_new_session=True,
            )
        log.info("task=%s attempt=%d spark-submit pid=%d", a.task_id, a.attempt, proc.pid)
        waiter = asyncio.create_task(proc.wait())
        killed = asyncio.Event()
        attempt.on_kill = killed.set
        if attempt.killed:
            killed.set()
        killer = asyncio.create_task(killed.wait())
        try:
            await asyncio.wait({waiter, killer}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                await self._kill_group(proc, waiter, attempt.kill_reason)
                return Outcome("FAILED", error=f"killed: {attempt.kill_reason}")
        finally:
            killer.cancel()
            if not waiter.done():
                await self._kill_group(proc, waiter, "worker stopping")
            shutil.rmtree(work_dir / "spark-local", ignore_errors=True)
        return self._outcome(proc.returncode or 0, result_file, Path(attempt.log_path))

    async def _kill_group(self, proc: asyncio.subprocess.Process, waiter: asyncio.Task[int], reason: str) -> None:
        log.info("killing spark-submit pid=%d (%s)", proc.pid, reason)
        for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            if grace is None:
                break
            done, _ = await asyncio.wait({waiter}, timeout=grace)
            if done:
                return
        await waiter

    @staticmethod
    def _outcome(code: int, result_file: Path, log_path: Path) -> Outcome:
        try:
            result = json.loads(result_file.read_text())
        except (OSError, ValueError):
            tail = _tail(log_path, ERROR_TAIL_LINES)
            return Outcome("FAILED", error=f"spark-submit exited with code {code} before the task returned",
                           traceback=tail)
        if result.get("ok"):
            return Outcome("SUCCEEDED", result_json=result.get("result_json", ""))
        return Outcome("FAILED", error=result.get("error", "task failed"), traceback=result.get("traceback", ""))
