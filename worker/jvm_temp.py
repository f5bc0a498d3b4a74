"""Where the Spark JVMs a worker starts keep their temporary files: in a directory of the worker's, removed
when that JVM is gone.

Left to itself a Spark driver writes to the system's temporary directory (``java.io.tmpdir``, usually
/tmp): ``spark-*`` and ``blockmgr-*`` (its local dir: shuffle and spill files), ``artifacts-*`` (two per
JVM, left even after a clean exit) and ``liblz4-java-*`` (a native library extracted at every start). A
JVM that is killed — a cancelled spark-submit, a crashed warm driver — leaves all of them, so a worker that
runs a micro-batch job for months fills /tmp with hundreds of thousands of directories. Every driver the
worker starts gets its own directory as ``java.io.tmpdir`` and (unless configured) ``spark.local.dir``,
and the worker removes the directory once the process group is gone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
TMPDIR_OPTION = "-Djava.io.tmpdir"
# The same directory, named to the driver's Python process: what it keeps for its own life goes there too
# (worker/py_daemon.py), so a driver killed with -9 leaves nothing in /tmp.
DIRECTORY_ENV = "SPARKYARD_DRIVER_TEMP_DIR"


def temp_conf(conf: dict[str, str], directory: Path) -> dict[str, str]:
    """``conf`` with the driver's temporary files in ``directory`` (created here); a ``java.io.tmpdir`` or
    ``spark.local.dir`` the worker's or the job's conf sets wins."""
    directory.mkdir(parents=True, exist_ok=True)
    out = dict(conf)
    options = out.get(JAVA_OPTIONS, "")
    if TMPDIR_OPTION not in options:
        out[JAVA_OPTIONS] = f"{options} {TMPDIR_OPTION}={directory}".strip()
    out.setdefault("spark.local.dir", str(directory))
    return out


def remove(directory: Path) -> None:
    """Remove a driver's temporary directory (its process group has ended); runs in a thread: shuffle files
    can make it large."""
    shutil.rmtree(directory, ignore_errors=True)
