"""The Spark Connect server of a connect-runner worker: started, watched and restarted by the worker.

With ``--connect-url sc://HOST:PORT`` the worker uses a server somebody else runs, and only probes it (a
TCP connect every ``EXTERNAL_PROBE_S``) so that it offers no slot while the server does not answer.

Otherwise the worker runs its own: ``spark-submit --class …SparkConnectServer`` of the installed pyspark
(its jars hold the connect server), in the foreground as a child of the worker — what
``sbin/start-connect-server.sh --wait`` runs, without the daemon script, so the worker knows its pid. It
listens on 127.0.0.1 on a free port (the same one again after a restart, while it is free), runs its
Spark on the worker's ``--spark-master`` (``local[SLOTS]`` by default: the attempts of all slots share
it) with the worker's ``--conf``, and logs to ``<work_dir>/connect/server.log``. Like every child it is
started in its own process group and recorded (worker/children.py); it is tied to the worker by
``PR_SET_PDEATHSIG`` (set by a Python step that then execs spark-submit, which execs the JVM: one pid
throughout), so a worker killed with -9 takes it along. It is ready once its port accepts a connection;
when it dies it is started again after the pause a pool's driver waits (worker/backoff.py: 1 s
after a server that was ready, doubling up to a minute while it keeps failing to come up). Until it is
ready the runner offers no slot. When the worker's Spark cluster manager stops answering (worker/engine.py) the server is stopped — its application is lost with the
manager — and started again once the manager answers. It loads the command plugin that lets an attempt's
cancel reach every Spark job of its session (worker/connect_plugin.py), when the worker could build it.

Whether the server sees the attempts' files as they do (`ConnectServer.paths_elsewhere`) decides
whether an attempt's relative paths are resolved in its working directory before its plans leave it
(worker/connect_plans.py). On a local master its Python workers (UDFs, pandas UDFs, `mapInPandas`…) start
in the directory of the attempt whose session they serve (`ConnectServer.functions_follow`: Spark's
daemon as worker/py_daemon.py wraps it, and each attempt's session carries a file naming its directory);
where they cannot (`ConnectServer.functions_dir` names where they run, if known), the attempt is told once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import sys
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Callable

from sparkyard.config import connect_address
from sparkyard.worker import connect_plugin, jvm_temp, py_daemon
from sparkyard.worker.backoff import restart_pause
from sparkyard.worker.class_archive import ClassArchive
from sparkyard.worker.children import Children, tied_command
from sparkyard.worker.engine import answers
from sparkyard.worker.spark_home import spark_submit_path

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# How long a server may take from its start to accepting connections before it is killed and started again.
START_TIMEOUT_S = 180.0
# How often a starting server's port is tried.
START_POLL_S = 0.2
# How long a stopping server may take after SIGTERM before its process group is killed.
STOP_GRACE_S = 10.0
# How often a server given by --connect-url is probed.
EXTERNAL_PROBE_S = 2.0
# Settings of a supervised server unless the worker's --conf sets them: no UI (ports 4040+ are shared).
SERVER_CONF = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


def default_fs(conf: dict[str, str], env: dict[str, str]) -> str:
    """The default filesystem a server started with ``conf`` and ``env`` gets ('' for the local one): its
    ``spark.hadoop.fs.defaultFS``, else ``fs.defaultFS`` of a ``core-site.xml`` in ``HADOOP_CONF_DIR`` or
    ``YARN_CONF_DIR`` (which spark-submit puts on its classpath)."""
    given = conf.get("spark.hadoop.fs.defaultFS")
    if given is None:
        for directory in (env.get("HADOOP_CONF_DIR"), env.get("YARN_CONF_DIR")):
            site = Path(directory or "") / "core-site.xml"
            if directory and site.is_file():
                try:
                    root = ElementTree.parse(site).getroot()
                except (OSError, ElementTree.ParseError):
                    continue
                given = next((p.findtext("value") for p in root.iter("property")
                              if (p.findtext("name") or "").strip() == "fs.defaultFS"), None)
                if given is not None:
                    break
    given = (given or "").strip()
    return "" if not given or given.startswith("file:") else given


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConnectServer:
    def __init__(self, url: str, spark_master: str, conf: dict[str, str], work_dir: Path, children: Children,
                 on_change: Callable[[], None], archive: ClassArchive | None = None) -> None:
        self._given = url
        self._archive = archive  # of Spark's classes, for the server's JVM (worker/class_archive.py)
        self._archived: Path | None = None  # the archive the running server's JVM was given
        self._master = spark_master
        self._conf = {**SERVER_CONF, **conf}
        self._dir = work_dir
        self._temp = work_dir / "tmp"  # the JVM's temporary files and Spark's local directory (worker/jvm_temp.py)
        self._children = children
        self._on_change = on_change
        self._port = 0
        self.url = url
        self.ready = False
        self.failed = False  # it died, failed to start or does not answer (not merely starting)
        self.reason = "Spark Connect server not started"
        self.started_in_s = 0.0  # how long the last start took, to accepting connections
        self.starts = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.plugin: Path | None = None  # the command plugin's jar the server was started with
        self._task: asyncio.Task[None] | None = None
        self._engine_up = asyncio.Event()  # cleared while the cluster manager of its --spark-master is gone
        self._engine_up.set()
        self.paths_elsewhere = self._paths_elsewhere()
        self.functions_dir = self._functions_dir()
        # Its Python workers start in the attempt's directory (worker/py_daemon.py), unless the conf chooses
        # its own daemon or Python for them.
        own = {py_daemon.DAEMON_CONF, "spark.pyspark.python"} & set(conf)
        self.functions_follow = bool(self.functions_dir) and not own

    @property
    def supervised(self) -> bool:
        return not self._given

    def _paths_elsewhere(self) -> str:
        """Why a relative path resolves on the server somewhere other than the attempt's directory would
        ('' when the server is the worker's own, on its host, on the local filesystem: it sees the files
        the attempt sees, so the attempt's relative paths can be made absolute for it)."""
        if not self.supervised:
            return f"the Spark Connect server {self._given} is not the worker's own"
        fs = default_fs(self._conf, dict(os.environ))
        return f"the Spark Connect server's default filesystem is {fs}" if fs else ""

    def _functions_dir(self) -> str:
        """Under which directory the server's Python workers run ('' where this worker cannot tell): Spark
        starts them in a directory of their session under SparkFiles' root, which is in Spark's local
        directory — on a local master, the one the worker gives its own server unless its conf names another."""
        if not self.supervised or not self._master.startswith("local") or "spark.local.dir" in self._conf \
                or os.environ.get("SPARK_LOCAL_DIRS"):
            return ""
        return str(self._temp)

    def start(self) -> None:
        if self._task is None:
            self.reason = "Spark Connect server starting"
            loop = self._supervise() if self.supervised else self._probe_external()
            self._task = asyncio.create_task(loop, name="connect-server")

    def _set(self, ready: bool, reason: str) -> None:
        if (ready, reason) != (self.ready, self.reason):
            self.ready, self.reason, self.failed = ready, reason, not ready
            self._on_change()

    # ---- a server given by --connect-url ----------------------------------------------------------------

    async def _probe_external(self) -> None:
        host, port = connect_address(self._given)
        while True:
            problem = await answers(host, port)
            self._set(not problem, f"Spark Connect server {self._given} does not answer ({problem})" if problem else "")
            await asyncio.sleep(EXTERNAL_PROBE_S)

    # ---- a supervised server ----------------------------------------------------------------------------

    def engine_changed(self, problem: str) -> None:
        if not self.supervised:
            return
        if not problem:
            self._engine_up.set()
            return
        self._engine_up.clear()
        if self.proc is not None and self.proc.returncode is None:
            Children.kill_group(self.proc.pid, signal.SIGTERM)

    async def _supervise(self) -> None:
        failures = 0
        while True:
            if not self._engine_up.is_set():
                self._set(False, f"Spark Connect server waits for its Spark master {self._master}")
                await self._engine_up.wait()
                failures = 0
            try:
                came_up, how = await self._run_once()
            except OSError as exc:  # cannot even be started (no pyspark home, an unusable work directory)
                came_up, how = False, f"could not be started ({exc})"
            failures = 0 if came_up else failures + 1
            delay = restart_pause(failures + 1)  # a server that came up and then died: the first pause
            log.error("Spark Connect server %s; starting it again in %.0fs (log: %s)", how, delay,
                      self._dir / "server.log")
            self._set(False, f"Spark Connect server {how}; restarting in {delay:.0f}s")
            await asyncio.sleep(delay)

    def command(self, port: int) -> list[str]:
        spark_submit = spark_submit_path()
        if not Path(spark_submit).exists():
            raise FileNotFoundError(f"spark-submit not found at {spark_submit}")
        conf = jvm_temp.temp_conf({**self._conf, "spark.connect.grpc.binding.address": "127.0.0.1",
                                   "spark.connect.grpc.binding.port": str(port)}, self._temp)
        if self._archive is not None:
            conf, self._archived = self._archive.conf(conf)
        cmd = [spark_submit, "--class", SERVER_CLASS, "--name", "sparkyard Spark Connect server",
               "--master", self._master]
        if self.functions_follow:
            conf[py_daemon.DAEMON_CONF] = py_daemon.MODULE
        if self.plugin is not None:
            conf["spark.connect.extensions.command.classes"] = connect_plugin.CLASS
            cmd += ["--jars", str(self.plugin)]
        for key, value in sorted(conf.items()):
            cmd += ["--conf", f"{key}={value}"]
        return tied_command(*cmd)

    async def _run_once(self) -> tuple[bool, str]:
        """Start the server, wait for it to answer, then for its end: (whether it came up, how it ended)."""
        if not self._port or not _port_free(self._port):
            self._port = _free_port()
        self._dir.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(jvm_temp.remove, self._temp)  # what a killed worker's server left
        if self.plugin is None:
            jars = Path(spark_submit_path()).parent.parent / "jars"
            version = next((p.stem for p in jars.glob("spark-connect_*.jar")), "unknown")
            self.plugin = await asyncio.to_thread(connect_plugin.build, jars, self._dir / "plugin", version)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_CONNECT_MODE": "0"}
        began = time.monotonic()
        with open(self._dir / "server.log", "ab") as logf:
            self.proc = proc = await self._children.spawn(
                *self.command(self._port), what="Spark Connect server", stdin=asyncio.subprocess.DEVNULL,
                stdout=logf, stderr=asyncio.subprocess.STDOUT, env=env, cwd=self._dir)
        self.starts += 1
        log.info("Spark Connect server starting (pid %d, port %d, master %s)", proc.pid, self._port, self._master)
        try:
            came_up = await self._until_up(proc, began)
            if came_up:
                await proc.wait()
            return came_up, self._ended(proc, came_up)
        finally:
            if proc.returncode is None:
                await self._stop(proc)
            Children.kill_group(proc.pid)  # Python workers it started
            self._children.forget(proc.pid)
            self.proc = None
            await asyncio.to_thread(jvm_temp.remove, self._temp)

    async def _until_up(self, proc: asyncio.subprocess.Process, began: float) -> bool:
        deadline = began + START_TIMEOUT_S
        while proc.returncode is None and time.monotonic() < deadline:
            if not await answers("127.0.0.1", self._port):
                self.started_in_s = time.monotonic() - began
                self.url = f"sc://127.0.0.1:{self._port}"
                log.info("Spark Connect server ready at %s in %.1fs (pid %d)", self.url, self.started_in_s, proc.pid)
                self._set(True, "")
                if self._archive is not None:
                    if self._archived is not None:
                        self._archive.check(proc.pid, self._archived)
                    self._archive.make_soon()  # after its start, not to slow it
                return True
            await asyncio.sleep(START_POLL_S)
        return False

    @staticmethod
    def _ended(proc: asyncio.subprocess.Process, came_up: bool) -> str:
        code = proc.returncode
        if code is None:
            return f"did not accept connections within {START_TIMEOUT_S:.0f}s of its start"
        how = f"was killed by signal {signal.Signals(-code).name}" if code < 0 else f"exited with exit code {code}"
        return how if came_up else f"{how} before accepting connections"

    @staticmethod
    async def _stop(proc: asyncio.subprocess.Process) -> None:
        Children.kill_group(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except asyncio.TimeoutError:
            Children.kill_group(proc.pid)
            await proc.wait()

    async def close(self) -> None:
        """Stop probing or supervising, and stop a supervised server."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
