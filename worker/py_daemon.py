"""The Python daemon of a warm driver in local mode: each Python worker it forks (UDFs, pandas UDFs,
``mapInPandas``, RDD functions) starts in the working directory of the attempt being run.

Why: under spark-submit in local mode Spark's Python workers are forked from a daemon that the driver's JVM
started in the program's directory, so a function that opens ``data/lookup.csv`` finds it beside the
program. A warm driver's daemon is started once, in the driver's own directory, and serves attempt after
attempt from different directories. The driver (worker/compat.py) writes the current attempt's directory
to a file named by :data:`CWD_FILE_ENV` as each attempt begins; this daemon (Spark's own,
``pyspark.daemon``, given as ``spark.python.daemon.module``) moves each worker there before the worker
reads its task. One attempt runs in a driver at a time, so the file names the directory of the attempt whose
tasks are running. Only in local mode: a cluster's executors run in their own directories, as they do under
spark-submit, and may not have Sparkyard installed.
"""

from __future__ import annotations

import os
import socket
from typing import Callable

DAEMON_CONF = "spark.python.daemon.module"
MODULE = "sparkyard.worker.py_daemon"
CWD_FILE_ENV = "SPARKYARD_ATTEMPT_CWD_FILE"
# Without CWD_FILE_ENV (the worker's own Spark Connect server), the file of this name in the daemon's own
# directory: Spark starts a session's Python workers in a directory of that session, where its file
# artifacts are, and the attempt's client adds this one naming its directory (worker/remote_spark.py).
SESSION_FILE = ".sparkyard-attempt-cwd"


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
