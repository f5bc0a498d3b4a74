"""The connect runner inside a client process: each attempt gets a Spark Connect session of its own.

The connect runner's client processes are the session runner's driver processes (worker/driver.py), started
without a Spark of their own: the Spark is the worker's Spark Connect server, and a client is light (no
JVM), so an attempt costs a new session on the server, not a Spark start. Per attempt:

* a new remote session (its own session id on the server: own SQL conf, temp views, UDFs and artifacts),
  made on first use — a task that never touches Spark costs the server nothing — carrying the attempt's
  tag (``addTag``); the job's ``--conf`` is set on it, and what the server refuses (static conf) is
  reported in the attempt's log;
* the job's Python code is added to it with ``addArtifacts``: the modules of its shipped bundle (zipped)
  and each ``--py-files`` entry, so that a UDF running on the server imports what the attempt imports;
  its ``--files`` too (``file=True``), so that ``SparkFiles.get(name)`` finds them there;
* ``SparkSession.builder…getOrCreate()``, ``SparkSession.getActiveSession()`` and ``active()`` return that
  session, and ``spark.stop()`` ends only the attempt's use of it, so a program written for
  ``spark-submit`` runs unchanged if it uses DataFrames and SQL only;
* every plan the attempt sends (from any of its threads) is looked at before it leaves
  (worker/connect_plans.py): where the server is the worker's own on its host, relative paths given to Spark
  are made absolute in the attempt's working directory, where a spark-submit driver would resolve them
  (elsewhere the attempt's log says once that they resolve on the server); a write to the server's catalog
  is said once in the attempt's log, with the server's warehouse, since that catalog is shared by every job
  on the server, and so is a read by name of a table or view the attempt did not create (it may be another
  job's), and a Python function sent to run on the server (its relative paths resolve in the server's
  Python workers' directory, not the attempt's);
* Spark Connect has no SparkContext: ``spark.sparkContext``, ``df.rdd``, ``SparkContext(…)`` and
  ``SparkContext.getOrCreate()`` raise :class:`ConnectRunnerError`, which names the runner and the two
  runners that have them;
* a cancel interrupts the attempt's operations by its tag (``interruptTag``) and, where the server has
  Sparkyard's command plugin (worker/connect_plugin.py), every Spark job of its session — those its
  operations did not start, as a declarative pipeline's flows; at the end, whatever the attempt left running
  from other threads is interrupted (``interruptAll`` of its own session) and the session is released on the
  server.

Outside an attempt every patched call behaves as PySpark's own.
"""

from __future__ import annotations

import logging
import os
import threading
import zipfile
from pathlib import Path
from typing import Any, Callable

from sparkyard.worker import connect_plans, connect_plugin, py_daemon
from sparkyard.worker.connect_notices import AttemptNotices

log = logging.getLogger(__name__)

# The SPARK_MASTER argument that starts a driver process (worker/driver.py) as a connect runner's client.
CONNECT_MODE = "connect"

# Python dependency files ``addArtifacts(…, pyfile=True)`` takes.
PYFILE_SUFFIXES = (".py", ".zip", ".egg", ".jar")
# Name of the zip of a bundle's modules, in the attempt's scratch directory (an artifact keeps its name).
BUNDLE_ZIP = "sparkyard-bundle.zip"


class ConnectRunnerError(NotImplementedError):
    """Something a Spark Connect session does not have was asked for (a SparkContext, an RDD)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} is not available under the connect runner: Spark Connect offers the DataFrame "
                         "and SQL API only (no SparkContext, no RDDs); run this job with --runner session or "
                         "--runner submit")


def zip_modules(root: str, target: Path) -> Path | None:
    """The ``.py`` files under ``root`` as one zip with the same layout (None when it has none): data
    files stay out, so the artifact sent to the server for every attempt stays small."""
    sources = sorted(p for p in Path(root).rglob("*.py") if p.is_file())
    if not sources:
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sources:
            archive.write(path, path.relative_to(root).as_posix())
    return target


class RemoteSpark:
    """The client process's Spark: no session between attempts, a new remote one in each."""

    def __init__(self) -> None:
        # pyspark.sql.functions, udf() and the type parser choose their Spark Connect flavour by this.
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
        import pyspark
        from pyspark.sql.connect.session import SparkSession

        # Imported now so that the first attempt does not pay for them (pandas, pyarrow, grpc).
        import pyspark.sql.connect.dataframe  # noqa: F401
        import pyspark.sql.connect.functions  # noqa: F401
        import pyspark.sql.connect.udf  # noqa: F401

        self.version = pyspark.__version__
        self._cls: Any = SparkSession
        self._release = SparkSession.stop
        self.in_attempt = False
        self.stopped = False  # the attempt called stop()
        self._task: dict[str, Any] = {}
        self._session: Any = None
        self._warn: Callable[[str], None] = log.warning
        self._notices: AttemptNotices | None = None  # what the attempt's log is told (see :meth:`look`)
        self._cache_lock = threading.Lock()
        self._persisted: list[Any] = []  # relations the attempt cached, uncached at its end
        self._cached_tables: list[str] = []

    # ---- per attempt -------------------------------------------------------------------------------------

    def begin(self, task: dict[str, Any], warn: Callable[[str], None]) -> None:
        """An attempt starts; ``task["connect"]`` holds the server's URL, the attempt's tag, its bundle root,
        ``--py-files`` and scratch directory, and what the worker knows of where the server resolves paths."""
        self.in_attempt = True
        self.stopped = False
        self._task = task
        self._session = None
        self._warn = warn
        self._notices = AttemptNotices(warn, task["connect"], self._warehouse)
        self._persisted, self._cached_tables = [], []

    def session(self) -> Any:
        """The attempt's session, made on first use."""
        if self._session is None:
            connect = self._task["connect"]
            session = self._cls.builder.remote(connect["url"]).create()
            self._session = session  # released at the end even if what follows fails
            self._make_current(session)
            session.addTag(connect["tag"])
            for key, value in self._task["conf"].items():
                self._set_conf(session, key, value)
            artifacts = self._artifacts(connect)
            if artifacts:
                session.addArtifacts(*artifacts, pyfile=True)
            files = list(self._task["files"])
            if connect["functions_follow"]:  # the worker's own server starts its Python workers in this directory
                named = Path(connect["scratch"]) / py_daemon.SESSION_FILE
                named.write_text(self._task["cwd"], encoding="utf-8")
                files.append(str(named))
            if files:
                session.addArtifacts(*files, file=True)
        return self._session

    def _set_conf(self, session: Any, key: str, value: str) -> None:
        """A job's conf on the attempt's session. Core conf (``spark.*`` outside ``spark.sql.*``) is fixed
        when the server's application starts: the server refuses the keys Spark registered, and takes any
        other (``spark.yarn.queue`` with no YARN classes loaded, a program's ``spark.myapp.*``) as a plain
        session value that Spark itself never applies — both are said."""
        try:
            session.conf.set(key, value)
        except Exception as exc:
            self._warn(f"conf {key}={value} cannot be set on a Spark Connect session "
                       f"({str(exc).splitlines()[0]}); use --runner submit for it")
            return
        if key.startswith("spark.") and not key.startswith("spark.sql.") and not session.conf.isModifiable(key):
            self._warn(f"conf {key}={value} is Spark core conf, fixed when the Spark Connect server's application "
                       "started: the attempt's session carries it (spark.conf.get returns it) but Spark does not "
                       "apply it; use --runner submit for it")

    @staticmethod
    def _artifacts(connect: dict[str, Any]) -> list[str]:
        paths: list[str] = []
        if connect["bundle_root"]:
            bundle_zip = zip_modules(connect["bundle_root"], Path(connect["scratch"]) / BUNDLE_ZIP)
            if bundle_zip is not None:
                paths.append(str(bundle_zip))
        paths += [p for p in connect["py_files"] if p.endswith(PYFILE_SUFFIXES)]
        return paths

    def _make_current(self, session: Any) -> None:
        self._cls._default_session = session
        self._cls._active_session.session = session

    def look(self, message: Any) -> None:
        """A request or plan of the attempt on its way to the server (any thread of the attempt)."""
        notices = self._notices
        if not self.in_attempt or notices is None:
            return
        elsewhere = self._task["connect"]["paths_elsewhere"]
        found = connect_plans.inspect(message, None if elsewhere else self._task["cwd"],
                                      functions=notices.wants_functions)
        if found.persisted or found.cached_tables:
            with self._cache_lock:
                self._persisted += [_copy(relation) for relation in found.persisted]
                self._cached_tables += found.cached_tables
        notices.tell(found)

    def _warehouse(self) -> str:
        session = self._session
        try:
            return str(session.conf.get("spark.sql.warehouse.dir")) if session is not None else "location unknown"
        except Exception as exc:
            return f"location unknown: {str(exc).splitlines()[0]}"

    def cannot_apply(self, conf: dict[str, str]) -> list[str]:
        """Nothing: the server's session takes what it can, and what it refuses is said in the log."""
        return []

    def cancel(self) -> None:
        """Interrupt the attempt's operations (called from the driver's reader thread)."""
        session = self._session
        if session is not None:
            # The session's jobs first: interrupting the operations lets the attempt's code end, and its end
            # releases the session.
            if self._task["connect"].get("session_jobs"):
                connect_plugin.interrupt_session_jobs(session)
            session.interruptTag(self._task["connect"]["tag"])

    def dirty(self) -> str:
        """Nothing an attempt does outlives its own Spark Connect session: this process may run the next."""
        return ""

    def end(self) -> None:
        """After an attempt: interrupt what it left running and release its session on the server."""
        self.in_attempt = False
        session, self._session = self._session, None
        if session is not None:
            try:
                session.interruptAll()
            except Exception:
                log.debug("interruptAll after the attempt failed", exc_info=True)
            self._uncache(session)
            self._release(session)
        self._cls._default_session = None
        self._cls._active_session.session = None

    def _uncache(self, session: Any) -> None:
        """What the attempt cached leaves the server's cache, which every session shares and which outlives
        them: a later job reading the same files would be served this attempt's data (spark-submit's cache
        ends with its JVM)."""
        for relation in self._persisted:
            try:
                session.client._analyze(method="unpersist", relation=relation, blocking=False)
            except Exception:
                log.debug("unpersist after the attempt failed", exc_info=True)
        for table in self._cached_tables:
            try:
                session.catalog.uncacheTable(table)
            except Exception:  # dropped by the attempt, or a name it never made
                log.debug("uncacheTable(%r) after the attempt failed", table, exc_info=True)
        self._persisted, self._cached_tables = [], []

    # ---- the patches ---------------------------------------------------------------------------------------

    def install(self) -> None:
        """Patch PySpark's entry points (once per process)."""
        from pyspark import SparkContext, SparkFiles
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.dataframe import DataFrame as RemoteDataFrame

        shared = self
        remote_cls = self._cls
        self._watch_plans()
        builders = (type(SparkSession.builder), type(remote_cls.builder))
        originals = {cls: cls.getOrCreate for cls in builders}
        original_get_active = SparkSession.getActiveSession.__func__  # type: ignore[attr-defined]
        original_active = SparkSession.active.__func__  # type: ignore[attr-defined]
        original_sc_init = SparkContext.__init__
        original_sc_get_or_create = SparkContext.getOrCreate.__func__  # type: ignore[attr-defined]

        def get_or_create(builder: Any) -> Any:
            if not shared.in_attempt:
                return originals[type(builder)](builder)
            session = shared.session()
            options = {k: v for k, v in builder._options.items()
                       if k not in ("spark.master", "spark.remote", "spark.app.name")}
            for key, value in options.items():
                try:
                    session.conf.set(key, value)
                except Exception as exc:
                    shared._warn(f"{key}={value} set by the program cannot apply to a Spark Connect session "
                                 f"({str(exc).splitlines()[0]})")
            return session

        def get_active(cls: Any) -> Any:
            return shared.session() if shared.in_attempt else original_get_active(cls)

        def active(cls: Any) -> Any:
            return shared.session() if shared.in_attempt else original_active(cls)

        def stop(session: Any) -> None:
            if shared.in_attempt and session is shared._session:
                shared.stopped = True
                return
            shared._release(session)

        def sc_init(sc: Any, *args: Any, **kwargs: Any) -> None:
            if shared.in_attempt:
                raise ConnectRunnerError("SparkContext")
            original_sc_init(sc, *args, **kwargs)

        def sc_get_or_create(cls: Any, conf: Any = None) -> Any:
            if shared.in_attempt:
                raise ConnectRunnerError("SparkContext.getOrCreate()")
            return original_sc_get_or_create(cls, conf)

        def spark_context(session: Any) -> Any:
            raise ConnectRunnerError("spark.sparkContext")

        def rdd(frame: Any) -> Any:
            raise ConnectRunnerError("DataFrame.rdd")

        original_files_get = SparkFiles.get.__func__  # type: ignore[attr-defined]

        def files_get(cls: Any, filename: str) -> str:
            # On a spark-submit driver SparkFiles.get finds the job's --files; here the client process has no
            # SparkContext to ask, but has the files themselves (the server's copies are for its UDFs).
            if shared.in_attempt and not cls._is_running_on_worker:
                local = {os.path.basename(p): p for p in shared._task.get("files", [])}
                if filename in local:
                    return local[filename]
            return str(original_files_get(cls, filename))

        patches: dict[Any, dict[str, Any]] = {
            **{cls: {"getOrCreate": get_or_create} for cls in builders},
            SparkSession: {"getActiveSession": classmethod(get_active), "active": classmethod(active)},
            remote_cls: {"stop": stop, "sparkContext": property(spark_context)},
            RemoteDataFrame: {"rdd": property(rdd)},
            SparkContext: {"__init__": sc_init, "getOrCreate": classmethod(sc_get_or_create)},
            SparkFiles: {"get": classmethod(files_get)},
        }
        for owner, methods in patches.items():
            for name, method in methods.items():
                setattr(owner, name, method)

    def _watch_plans(self) -> None:
        """Route every plan through :meth:`look`: once as it is set in a request (before the client may
        compress it) and once as each ExecutePlan and AnalyzePlan request is sent (those whose relation is
        set directly, as ``persist``); a path made absolute by the first is left as it is by the second."""
        from pyspark.sql.connect.client.core import SparkConnectClient
        from pyspark.sql.connect.proto import base_pb2_grpc

        look = self.look
        original_set_plan = SparkConnectClient._try_compress_and_set_plan
        original_stub_init = base_pb2_grpc.SparkConnectServiceStub.__init__

        def set_plan(client: Any, plan: Any, message: Any, op_type: Any) -> None:
            look(message)
            original_set_plan(client, plan, message, op_type)

        def looking(send: Any) -> Callable[..., Any]:
            def sent(request: Any, *args: Any, **kwargs: Any) -> Any:
                look(request)
                return send(request, *args, **kwargs)
            return sent

        def stub_init(stub: Any, channel: Any) -> None:
            original_stub_init(stub, channel)
            stub.ExecutePlan = looking(stub.ExecutePlan)
            stub.AnalyzePlan = looking(stub.AnalyzePlan)

        SparkConnectClient._try_compress_and_set_plan = set_plan  # type: ignore[method-assign,assignment]
        base_pb2_grpc.SparkConnectServiceStub.__init__ = stub_init  # type: ignore[method-assign]


def _copy(message: Any) -> Any:
    copied = type(message)()
    copied.CopyFrom(message)
    return copied
