"""The server-side half of a connect attempt's cancel: a Spark Connect command plugin that cancels every
Spark job of the caller's session (``worker/java/InterruptSessionJobs.java``).

Why it is needed: Spark Connect's interrupt stops the Spark jobs started in the threads of the interrupted
operations. A Spark declarative pipeline's flows run in a thread pool that Spark shares between the
pipeline runs of a server, and a pool thread keeps the job tags of the run that created it: a flow given a
thread an earlier run left carries that run's tags, and an interrupt of the attempt's operations does not
reach it. Every SQL execution of a session also carries the session's own job tag, which only the server
knows; the plugin cancels by that tag. The session is the attempt's own, so nothing else is touched.

The worker builds the plugin once per PySpark version into its work directory with ``javac`` (found beside
the ``java`` Spark uses) and starts its supervised server with it. Without a JDK the server starts without
it, and the worker says what that leaves running.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

log = logging.getLogger(__name__)

CLASS = "sparkyard.InterruptSessionJobs"
TYPE_URL = f"type.googleapis.com/{CLASS}"  # the command's Any type (the Java class compares it)
SOURCE = Path(__file__).with_name("java") / "InterruptSessionJobs.java"
COMPILE_TIMEOUT_S = 300


def javac() -> str | None:
    """The Java compiler of the JDK Spark runs on (JAVA_HOME's), else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def build(spark_jars: Path, target_dir: Path, version: str) -> Path | None:
    """The plugin's jar for this PySpark version, compiled now if it is not there yet; None (and why, in
    the log) when it cannot be built."""
    jar = target_dir / f"sparkyard-connect-{version}.jar"
    if jar.exists():
        return jar
    compiler = javac()
    if compiler is None:
        log.warning("no javac (JDK) found: the Spark Connect server starts without the plugin that cancels a "
                    "cancelled attempt's Spark jobs its operations did not start (a declarative pipeline's "
                    "flows may then run to their end; docs/pipelines.md)")
        return None
    classes = target_dir / f"classes-{version}"
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    try:
        subprocess.run([compiler, "-nowarn", "-cp", f"{spark_jars}/*", "-d", str(classes), str(SOURCE)], check=True,
                       capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        log.warning("could not build the Spark Connect plugin (%s); the server starts without it", detail.strip())
        return None
    partial = jar.with_suffix(".partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for path in sorted(classes.rglob("*.class")):
            archive.write(path, path.relative_to(classes).as_posix())
    partial.replace(jar)
    shutil.rmtree(classes, ignore_errors=True)
    return jar


def interrupt_session_jobs(session: object) -> None:
    """Ask the server to cancel every Spark job of this Spark Connect session (the plugin must be loaded)."""
    from pyspark.sql.connect import proto

    command = proto.Command()
    command.extension.type_url = TYPE_URL
    session.client.execute_command(command)  # type: ignore[attr-defined]
