"""spark-submit compatibility inside a warm driver: the process's one SparkContext looks like the task's own.

A warm driver process (worker/driver.py) runs one attempt after another against one SparkContext, so a
program written for ``spark-submit`` must not be able to tell — or break — that its Spark is shared:

* ``SparkSession.builder…getOrCreate()`` and ``SparkSession.getActiveSession()`` return the attempt's own
  session (``newSession()`` of the driver's root session: own SQL conf, temp views and UDFs); builder
  options are applied with Spark's own rule for an existing session (runtime SQL conf is set, static conf
  is reported in the attempt log and left alone);
* ``SparkContext.getOrCreate()``, ``SparkContext(conf=…)`` and ``SparkContext(appName=…)`` return the
  shared context instead of failing with "Cannot run multiple SparkContexts at once"; what cannot apply
  (another master, app name or static conf) is reported in the attempt log;
* ``spark.stop()`` / ``sc.stop()`` (and leaving a ``with`` block) end only the attempt's use of Spark: the
  next attempt in this process is unaffected;
* the attempt's shipped code reaches the executors: its bundle's archive and each ``.zip``/``.egg``
  ``--py-files`` entry are added once per driver (``SparkContext.addPyFile``, under content-addressed
  names, so two bundles never collide), and while the attempt runs the context's Python includes — what
  every Python UDF or RDD function the attempt creates puts on its executors' ``sys.path`` — are the
  driver's own plus only this attempt's archives and places in them. Another attempt's code, still
  registered with the context, is on none of its executors' paths;
* the job's ``--files`` are added with ``SparkContext.addFile``, so ``SparkFiles.get(name)`` finds them on
  the driver and the executors. Spark keys an added file by its name alone, for the context's life, so
  the session runner hands an attempt only to a driver that serves none of its files' names from another
  path (worker/runner/session.py). (Spark
  4.3's ``SparkSession.addArtifacts`` is the same ``addPyFile`` in classic mode: context-wide, and refusing a
  second file of the same name, so it cannot isolate attempts; session-scoped artifacts are Spark
  Connect's.)

* what an attempt leaves in the context that Spark shares between sessions — the catalog's tables and
  databases, cached data, streaming queries, local properties, listeners, Hadoop FileSystem instances — is
  put back when it ends, and its relative paths (warehouse, checkpoints, readers and writers) resolve in its
  working directory on every thread (worker/spark_reset.py), and in local mode so do those of the Python
  workers Spark forks for its UDFs and RDD functions (worker/py_daemon.py);
* on a cluster, where the executors' Hadoop ``FileSystem`` instances outlive the attempt out of the
  driver's reach, Hadoop settings the attempt gives at runtime (session conf, readers' and writers'
  options) are said in its log and retire the driver after it (worker/runtime_hadoop.py).

Outside an attempt every patched call behaves exactly as PySpark's own, so the driver's start-up and
shutdown are untouched. One attempt at a time runs in a driver, on its main thread.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from sparkyard.worker import py_daemon
from sparkyard.worker.runtime_hadoop import RuntimeHadoop, on_cluster
from sparkyard.worker.spark_reset import WAREHOUSE_CONF, Reset, warehouse_of
from sparkyard.worker.warm_conf import PER_ATTEMPT, cannot_apply

log = logging.getLogger(__name__)

DAEMON_CONF = py_daemon.DAEMON_CONF


def _served_name(path: str) -> str:
    """A name for a shipped file that no other file shares: the bundle cache holds each bundle under its
    digest, so the path names the content (a path outside any bundle, ``--no-ship``, adds its version)."""
    try:
        st = os.stat(path)
        version = f"{st.st_mtime_ns}:{st.st_size}"
    except OSError:
        version = ""
    key = hashlib.sha256(f"{path}\0{version}".encode()).hexdigest()[:16]
    return f"{key}-{os.path.basename(path)}"


def _serve(source: str, folder: str, name: str) -> Path:
    """The copy of ``source`` the context serves. Executors fetch every registered file when they start a
    task, so the context serves a hard link of its own, not the worker's cache entry, which the worker may
    evict while this driver lives."""
    from pyspark import SparkFiles

    served = Path(SparkFiles.getRootDirectory()) / folder / name
    served.parent.mkdir(parents=True, exist_ok=True)
    if not served.exists():
        try:
            os.link(source, served)
        except OSError:  # another filesystem
            shutil.copyfile(source, served)
    return served


class SharedSpark:
    """The driver's root session and the current attempt's view of it (installed once per process)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.sc = root.sparkContext
        self.in_attempt = False
        self.stopped = False  # the attempt called stop()
        self.touched = False  # the attempt reached Spark (only then can it have left jobs running)
        self._static_test: Any = None  # Spark's SQLConf.isStaticConfigKey (worker/warm_conf.py)
        self._session: Any = None
        self._conf: dict[str, str] = {}
        self._warn: Callable[[str], None] = log.warning
        self._jvm_cwd = ""
        self._cwd = ""
        self._internal = False  # the driver itself adds files to the context (not the program)
        self.reset = Reset(root)  # what the attempt leaves in the context, put back when it ends
        self.hadoop = RuntimeHadoop(self.sc.master)  # its runtime Hadoop settings, on a cluster
        self._includes = list(self.sc._python_includes)  # the driver's own (a worker's spark.submit.pyFiles)
        self._shipped: set[str] = set()  # archives added to the context, by served name
        self._files: set[str] = set()  # --files added to the context, by source path
        self.own_sql: frozenset[str] = frozenset()  # the driver's own SQL settings: not the attempt's (build)
        self._started_with = dict(self.sc.getConf().getAll())  # the conf the context started with

    @classmethod
    def build(cls, master: str, conf: dict[str, str], *, warm: bool, own_sql: frozenset[str] = frozenset()
              ) -> SharedSpark:
        """The driver's root session; with ``warm``, warmed by a first job (class loading and code generation
        are not a task's cost). ``own_sql``: SQL settings in ``conf`` that are the driver's own choice, not
        the worker's ``--conf``: an attempt's session has Spark's defaults for them, as under spark-submit."""
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.master(master).appName(f"sparkyard-driver-{os.getpid()}")
        for key, value in {**py_daemon.daemon_conf(master, conf), **conf}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        if warm:
            spark.range(1).collect()
        shared = cls(spark)
        shared.own_sql = own_sql
        return shared

    @property
    def version(self) -> str:
        return str(self.root.version)

    # ---- per attempt -------------------------------------------------------------------------------------

    def begin(self, task: dict[str, Any], warn: Callable[[str], None]) -> None:
        """An attempt starts (``task`` is the driver's run message: its ``cwd`` and ``conf`` apply here, and
        its bundle's ``archive`` ('' for none) is shipped to executors with ``executor_path``, its places in it,
        and so are its ``py_files`` archives and its ``files``)."""
        self.in_attempt = True
        self.stopped = False
        self.touched = False
        self._session = None
        self._conf = task["conf"]
        self._warn = warn
        self._cwd = task["cwd"]
        if task["cwd"] != self._jvm_cwd:
            self.reset.enter(task["cwd"])
            py_daemon.tell_workers(task["cwd"])
            self._jvm_cwd = task["cwd"]
        self.reset.forget()
        self.hadoop.begin(warn, fresh=bool(task.get("fresh")))
        includes = list(task["executor_path"])
        if task["archive"]:
            self._ship(task["archive"], os.path.basename(task["archive"]))
        for path in task["py_files"]:
            if path.endswith((".zip", ".egg")):
                includes.append(self._ship(path, _served_name(path)))
        for path in task["files"]:
            self._add_file(path)
        self.sc._python_includes[:] = [*self._includes, *includes]

    def cannot_apply(self, conf: dict[str, str]) -> list[str]:
        """The items of a job's conf this context cannot give its attempt (worker/warm_conf.py)."""
        return cannot_apply(conf, self._started_with, self._is_static)

    def _is_static(self, key: str) -> bool:
        """Spark's test for a static SQL conf key (looked up in the JVM once, on the first key that needs it)."""
        if self._static_test is None:
            self._static_test = self.sc._jvm.org.apache.spark.sql.internal.SQLConf.isStaticConfigKey
        return bool(self._static_test(key))

    def _touch(self) -> None:
        """The attempt reaches Spark: from now on it can leave something behind (worker/spark_reset.py)."""
        if not self.touched:
            self.touched = True
            self.reset.begin()

    def cancel(self) -> None:
        """Cancel the attempt's Spark jobs (a driver runs one attempt: all of its jobs are the attempt's)."""
        self.sc.cancelAllJobs()

    def _ship(self, archive: str, name: str) -> str:
        """Register an archive of Python code with the context once, as ``name`` (returned: the entry it
        takes on the executors' ``sys.path``)."""
        if name in self._shipped:
            return name
        served = _serve(archive, "sparkyard-bundles", name)
        # addPyFile puts the archive on this process's sys.path too. The attempt must import from its bundle
        # root instead, where the driver forgets the modules it loaded when it ends.
        path = list(sys.path)
        self._internal = True
        try:
            self.sc.addPyFile(str(served))
        finally:
            self._internal = False
        sys.path[:] = path
        self._shipped.add(name)
        return name

    def _add_file(self, path: str) -> None:
        """Serve a --files entry under its own name (SparkFiles.get(name)). The session runner never sends
        an attempt whose file's name this driver serves from another path; it warms a fresh driver."""
        if path in self._files:
            return
        self._internal = True
        try:
            self.sc.addFile(str(_serve(path, f"sparkyard-files/{_served_name(path)}", os.path.basename(path))))
        finally:
            self._internal = False
        self._files.add(path)

    def session(self) -> Any:
        """The attempt's session, created on first use (a task that never touches Spark costs nothing)."""
        self._touch()
        if self._session is None:
            from pyspark.sql import SparkSession

            session = self.root.newSession()
            self.hadoop.session_started(session)
            for key in self.own_sql - self._conf.keys():  # Spark's default, as a spark-submit program has it
                session.conf.unset(key)
            for key, value in self._conf.items():
                # Core and static conf are the JVM's: a warm driver refuses an attempt whose core or static conf
                # differs from its own, so here the driver was started with it (a fresh driver, with the worker's
                # own additions to it, such as the driver's Java options).
                if key in PER_ATTEMPT or self._started_with.get(key) == value or self.cannot_apply({key: value}):
                    continue
                try:
                    session.conf.set(key, value)
                except Exception as exc:
                    self._warn(f"conf {key}={value} cannot change in a warm driver ({str(exc).splitlines()[0]}); "
                               "use --runner submit for it")
            self.reset.use_warehouse(session, warehouse_of(self._cwd, self._conf.get(WAREHOUSE_CONF)))
            self._session = session
            SparkSession._instantiatedSession = session
            SparkSession._activeSession = session
            jvm_session = SparkSession._get_j_spark_session_class(session._jvm)
            jvm_session.setDefaultSession(session._jsparkSession)
            jvm_session.setActiveSession(session._jsparkSession)
        return self._session

    def end(self) -> None:
        """After an attempt: cancel what it left running, put back what it changed in the context
        (worker/spark_reset.py), and make the root session the default again."""
        from pyspark.sql import SparkSession

        self.in_attempt = False
        self.sc._python_includes[:] = self._includes
        self.hadoop.end(self._session)
        if self.touched:
            try:
                self.sc.cancelAllJobs()  # jobs started from threads the attempt left behind
            except Exception:
                log.debug("cancelAllJobs after the attempt failed", exc_info=True)
            self.reset.clear(self._session)
        if self._session is not None:
            SparkSession._instantiatedSession = self.root
            SparkSession._activeSession = self.root
            jvm_session = SparkSession._get_j_spark_session_class(self.root._jvm)
            jvm_session.setDefaultSession(self.root._jsparkSession)
            jvm_session.setActiveSession(self.root._jsparkSession)
        self._session = None

    def dirty(self) -> str:
        """Why the context must not run another attempt ('' when it may): worker/spark_reset.py, and on a
        cluster worker/runtime_hadoop.py."""
        return "; ".join(r for r in (self.reset.dirty(), self.hadoop.reason()) if r)

    # ---- the patches ---------------------------------------------------------------------------------------

    def install(self) -> None:
        """Patch PySpark's entry points (once per process)."""
        from pyspark import SparkContext
        from pyspark.sql import SparkSession

        shared = self
        builder_cls = type(SparkSession.builder)
        original_get_or_create = builder_cls.getOrCreate
        original_get_active = SparkSession.getActiveSession.__func__  # type: ignore[attr-defined]
        original_session_stop = SparkSession.stop
        original_sc_init = SparkContext.__init__
        original_sc_stop = SparkContext.stop
        original_sc_get_or_create = SparkContext.getOrCreate.__func__  # type: ignore[attr-defined]

        def get_or_create(builder: Any) -> Any:
            if not shared.in_attempt:
                return original_get_or_create(builder)
            session = shared.session()
            options = dict(builder._options)
            options.pop("spark.app.name", None)  # the attempt's name is Sparkyard's, as under any scheduler
            master = options.pop("spark.master", None)
            warehouse = options.pop(WAREHOUSE_CONF, None)
            if warehouse is not None:  # static in Spark, but each attempt's session has a warehouse of its own
                shared.reset.use_warehouse(session, warehouse_of(shared._cwd, warehouse))
            if master not in (None, shared.sc.master):
                shared._warn(f"spark.master {master} set by the program is ignored: this task runs in a warm "
                             f"driver ({shared.sc.master}); use --runner submit to choose it")
            for key, value in options.items():
                if not session.conf.isModifiable(key) and session.conf.get(key, None) != value:
                    shared._warn(f"{key}={value} set by the program's builder is ignored: the warm driver's "
                                 "JVM started without it and it cannot change while the JVM runs; use --runner "
                                 "submit for it")
            if options:
                module = SparkSession._get_j_spark_session_module(session._jvm)
                module.applyModifiableSettings(session._jsparkSession, options)
            return session

        def get_active(cls: Any) -> Any:
            if shared.in_attempt:
                return shared.session()
            return original_get_active(cls)

        def session_stop(session: Any) -> None:
            if shared.in_attempt:
                shared.stopped = True
                return
            original_session_stop(session)

        def sc_new(cls: Any, *args: Any, **kwargs: Any) -> Any:
            if shared.in_attempt and cls is SparkContext and SparkContext._active_spark_context is shared.sc:
                shared._touch()
                return shared.sc
            return object.__new__(cls)

        def sc_init(sc: Any, *args: Any, **kwargs: Any) -> None:
            if shared.in_attempt and sc is shared.sc:
                conf = kwargs.get("conf")
                master = kwargs.get("master", args[0] if args else None)
                if master is None and conf is not None:
                    master = conf.get("spark.master", None)
                if master not in (None, sc.master):
                    shared._warn(f"SparkContext master {master} is ignored: this task runs in a warm driver "
                                 f"({sc.master}); use --runner submit to choose it")
                return
            original_sc_init(sc, *args, **kwargs)

        def sc_stop(sc: Any) -> None:
            if shared.in_attempt and sc is shared.sc:
                shared.stopped = True
                return
            original_sc_stop(sc)

        def added(method: Any) -> Any:
            def add(sc: Any, path: str, *args: Any, **kwargs: Any) -> Any:
                if shared.in_attempt and not shared._internal:
                    shared.reset.added.append(os.path.basename(str(path)))
                    if ":" not in str(path):  # the JVM resolves a relative path in its own start directory
                        path = os.path.abspath(path)
                return method(sc, path, *args, **kwargs)
            return add

        def sc_get_or_create(cls: Any, conf: Any = None) -> Any:
            if shared.in_attempt:
                shared._touch()
                return shared.sc
            return original_sc_get_or_create(cls, conf)

        patches: dict[Any, dict[str, Any]] = {
            builder_cls: {"getOrCreate": get_or_create},
            SparkSession: {"getActiveSession": classmethod(get_active), "stop": session_stop},
            SparkContext: {"__new__": sc_new, "__init__": sc_init, "stop": sc_stop,
                           "getOrCreate": classmethod(sc_get_or_create), "addFile": added(SparkContext.addFile),
                           "addPyFile": added(SparkContext.addPyFile), "addArchive": added(SparkContext.addArchive)},
        }
        for owner, methods in patches.items():
            for name, method in methods.items():
                setattr(owner, name, method)
        self.hadoop.install()
