"""The driver program ``spark-submit`` runs for every task of the submit runner.

    spark-submit … bootstrap.py TASK_FILE RESULT_FILE

It calls the task's entrypoint with its context and writes the outcome to RESULT_FILE (JSON, written
atomically): ``{"ok": true, "result_json": …}`` or ``{"ok": false, "error": …, "traceback": …,
"exit_code": …}``, and exits with 0 on success, else the script's exit code (1 for an exception) — what
``spark-submit`` of the program itself would give. A ``main(spark, ctx)`` function gets a SparkSession
built here (spark-submit's ``--master``/``--conf`` apply); a plain script runs as ``__main__`` with its
own ``sys.argv`` and makes its Spark itself (``getOrCreate()``, ``SparkContext(appName=…)``), exactly as
under spark-submit. Whatever Spark is left running at the end is stopped.

A watchdog thread ties the Spark application to the worker that launched it: when the worker process is
gone (killed with -9, crashed), the watchdog kills this process group — the driver and its JVM — so an
orphan can never keep running a task that the master is about to hand to another worker.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# spark-submit puts this file's directory first on sys.path; it holds Sparkyard's own worker modules
# (context.py, entry.py, …) which must not shadow a user's modules of the same name.
_HERE = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if p and str(Path(p).resolve()) != _HERE]

import json  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

# How often the watchdog checks that the worker is alive.
WATCHDOG_INTERVAL_S = 0.5


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
            return False
        except ProcessLookupError:
            return True
        except PermissionError:
            return False


def _watch_worker(pid: int) -> None:
    while True:
        if _process_gone(pid):
            sys.stderr.write(f"sparkyard: worker process {pid} is gone; stopping this attempt\n")
            sys.stderr.flush()
            os.killpg(os.getpgid(0), signal.SIGKILL)
        time.sleep(WATCHDOG_INTERVAL_S)


def _write_result(path: Path, payload: dict[str, object]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: bootstrap.py TASK_FILE RESULT_FILE\n")
        return 2
    task_file, result_file = Path(argv[1]), Path(argv[2])
    worker_pid = int(os.environ.get("SPARKYARD_WORKER_PID", "0"))
    if worker_pid:
        threading.Thread(target=_watch_worker, args=(worker_pid,), name="sparkyard-watchdog", daemon=True).start()
    task = json.loads(task_file.read_text())
    from sparkyard.worker.py_state import join_program_threads, own_logging

    own_logging()  # the root logger stays as a fresh interpreter has it, for the program
    threads_before = set(threading.enumerate())

    from sparkyard.worker.context import TaskContext, set_current
    from sparkyard.worker.entry import encode_result, invoke

    from sparkyard.worker.entry import LazySpark, ScriptExit

    ctx = TaskContext.from_json(task["context"], logging.getLogger(f"sparkyard.task.{task['context_id']}"))
    set_current(ctx)  # current_context() of a plain script is its ctx global, with the same outputs
    sys.path[:0] = task.get("sys_path", [])
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    try:
        value = invoke(task["entrypoint"], LazySpark(SparkSession.builder.getOrCreate), ctx)
        _write_result(result_file, {"ok": True, "result_json": encode_result(value, int(task["result_max_bytes"]))})
        code = 0
    except ScriptExit as exc:
        _write_result(result_file, {"ok": False, "error": str(exc), "exit_code": exc.exit_code})
        code = exc.exit_code
    except BaseException as exc:  # the outcome of user code, whatever it raised, is the task's result
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        _write_result(result_file, {"ok": False, "error": message, "traceback": traceback.format_exc(), "exit_code": 1})
        traceback.print_exc()
        code = 1
    finally:
        join_program_threads(threads_before)  # as Python does before it exits, and before Spark stops
        active = SparkContext._active_spark_context
        if active is not None:
            try:
                active.stop()
            except Exception:
                traceback.print_exc()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
