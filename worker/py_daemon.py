"""The Python daemon of a warm driver in local mode: each Python worker it forks (UDFs, pandas UDFs,
``mapInPandas``, RDD functions) starts in the working directory of the attempt being run.

Why: under spark-submit in local mode Spark's Python workers are forked from a daemon that the driver's JVM
started in the program's directory, so a function that opens ``data/lookup.csv`` finds it beside the
program. A warm driver's daemon is started once, in the driver's own directory, and serves attempt after
attempt from different directories. The driver (worker/compat.py, through :func:`tell_workers`) writes the
current attempt's directory to a file named by :data:`CWD_FILE_ENV` as each attempt begins; this daemon (Spark's own,
``pyspark.daemon``, given as ``spark.python.daemon.module``) moves each worker there before the worker
reads its task. One attempt runs in a driver at a time, so the file names the directory of the attempt whose
tasks are running. Only in local mode: a cluster's executors run in their own directories, as they do under
spark-submit, and may not have Sparkyard installed.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import tempfile
from pathlib import Path
from typing import Callable

from sparkyard.worker import jvm_temp
from sparkyard.worker.runtime_hadoop import on_cluster

log = logging.getLogger(__name__)

DAEMON_CONF = "spark.python.daemon.module"
MODULE = "sparkyard.worker.py_daemon"
CWD_FILE_ENV = "SPARKYARD_ATTEMPT_CWD_FILE"
# Without CWD_FILE_ENV (the worker's own Spark Connect server), the file of this name in the daemon's own
# directory: Spark starts a session's Python workers in a directory of that session, where its file
# artifacts are, and the attempt's client adds this one naming its directory (worker/remote_spark.py).
SESSION_FILE = ".sparkyard-attempt-cwd"


def daemon_conf(master: str, conf: dict[str, str]) -> dict[str, str]:
    """In local mode, Spark's Python daemon as this module wraps it (each Python worker in the
    attempt's directory), unless the conf chooses its own daemon or another Python for the workers."""
    if on_cluster(master) or DAEMON_CONF in conf or "spark.pyspark.python" in conf:
        return {}
    # In the driver's temporary directory, which the worker removes once the driver is gone, however it ended
    # (outside a worker, the system's: gone at the process's exit).
    directory = os.environ.get(jvm_temp.DIRECTORY_ENV) or tempfile.gettempdir()
    path = Path(directory) / f"sparkyard-attempt-cwd-{os.getpid()}"
    os.environ[CWD_FILE_ENV] = str(path)
    atexit.register(path.unlink, missing_ok=True)
    return {DAEMON_CONF: MODULE}


def tell_workers(cwd: str) -> None:
    """Name ``cwd`` to the Python daemon for the workers it forks from now on."""
    path = os.environ.get(CWD_FILE_ENV)
    if not path:
        return
    try:
        temporary = f"{path}.new"
        Path(temporary).write_text(cwd, encoding="utf-8")
        os.replace(temporary, path)
    except OSError:
        try:  # not the previous attempt's directory, then: with no file the workers start where the daemon is
            Path(path).unlink(missing_ok=True)
        except OSError:
            pass
        log.warning("the Python workers' directory could not be set to %s", cwd, exc_info=True)


def attempt_cwd(path: str) -> str:
    """The directory the file at ``path`` names ('' if there is none to read)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def in_attempt_dir(spark_worker: Callable[[socket.socket, bool], int]) -> Callable[[socket.socket, bool], int]:
    """Spark's per-task worker function, run in the current attempt's directory."""
    def worker(sock: socket.socket, authenticated: bool) -> int:
        cwd = attempt_cwd(os.environ.get(CWD_FILE_ENV) or SESSION_FILE)
        if cwd:
            try:
                os.chdir(cwd)
            except OSError:  # the attempt's directory is gone: the worker runs where the daemon is, as before
                pass
        return spark_worker(sock, authenticated)
    return worker


def main() -> None:
    import pyspark.daemon as spark_daemon

    setattr(spark_daemon, "worker", in_attempt_dir(spark_daemon.worker))  # its manager calls it by name, in each fork
    spark_daemon.manager()


if __name__ == "__main__":
    main()
