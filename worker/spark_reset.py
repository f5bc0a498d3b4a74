"""What one attempt can leave behind in a warm driver's JVM, and how it is put back before the next one.

A warm driver (worker/driver.py) runs attempt after attempt against one SparkContext. Each attempt has a
``newSession()`` of its own (SQL conf, temporary views and functions, current database), but Spark keeps
some state per context or per JVM, shared by every session. Under spark-submit each program starts with
all of it empty, so between attempts this module empties it:

* the session catalog's databases, tables and functions (Spark's in-memory catalog belongs to the
  context): they are forgotten, never dropped — the data of a managed table stays on disk where the
  attempt wrote it, as it does after spark-submit's JVM exits;
* global temporary views; cached tables and persisted RDDs;
* streaming queries still running (stopped, as spark-submit's JVM would at exit);
* the main thread's local properties (job group, description, scheduler pool);
* the context's checkpoint directory (``sc.setCheckpointDir``) and the JVM's log level (``sc.setLogLevel``);
* listeners added to the context's listener bus (``sc._jsc.sc().addSparkListener``; the bus of each
  session whose ``spark.streams`` was used, which holds its ``spark.streams.addListener`` listeners and
  which Spark never removes): removed — a SparkListener would hear every later attempt's events, and each
  session's bus would stay on the context for the driver's life;
* Hadoop ``FileSystem`` instances made during the attempt: closed, which takes them out of Hadoop's cache.
  Hadoop caches one instance per scheme, authority and user for the JVM's life, made with the
  configuration of the first call — the attempt's session conf (its ``spark.hadoop.*`` keys set at
  runtime included) and its readers' options — so the next attempt would get this one's instead of its
  own. In ``local`` mode the executors are this JVM, so that is all of them. A cluster's executors keep
  their own caches, out of the driver's reach: an attempt there that gives Hadoop settings at runtime is
  told so in its log and retires the driver (worker/runtime_hadoop.py);
* where relative paths resolve: the default database's location is the attempt's
  ``./spark-warehouse`` (``spark.sql.warehouse.dir`` of its session), and the JVM's ``user.dir`` and
  Hadoop's local working directory are its working directory, so that checkpoints and file sinks (written
  through Hadoop's ``FileContext``, on Spark's own threads) land beside the program.

What cannot be put back is reported by :meth:`Reset.dirty`, and the session runner retires that driver
instead of handing it another attempt:

* a file the program added to the context itself (``addFile``, ``addPyFile``, ``addArchive``: Spark keys
  them by name for the context's life);
* a change to the context's Hadoop configuration (``sc._jsc.hadoopConfiguration().set(…)``): putting the
  keys back would not take back the ``FileSystem`` instances Hadoop made with them and caches per JVM, in
  the driver and in every executor that ran a task;
* a change to the JVM's system properties (``java.lang.System.setProperty``): the libraries that read one
  (an SDK's region or credentials, a trust store) keep what they read for the JVM's life.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

WAREHOUSE_CONF = "spark.sql.warehouse.dir"


def warehouse_of(cwd: str, configured: str | None) -> str:
    """The warehouse of an attempt in ``cwd``: spark-submit's default ``./spark-warehouse``, or the
    program's or job's own ``spark.sql.warehouse.dir`` (relative to ``cwd`` if relative)."""
    path = configured or "spark-warehouse"
    if "://" in path or path.startswith("file:"):
        return path
    if not path.startswith("/"):
        path = f"{cwd.rstrip('/')}/{path}"
    return f"file:{path}"


class Reset:
    """The pristine state of one context (taken when the driver starts) and the means to return to it."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.sc = root.sparkContext
        self.jvm = self.sc._jvm
        self._catalog = root._jsparkSession.sharedState().externalCatalog().unwrapped()
        self._default_db = self._catalog.getDatabase("default")
        self._props = self.sc._jsc.sc().getLocalProperties().clone()
        self._rdds = set(self.sc._jsc.getPersistentRDDs().keySet())
        self._checkpoint_dir = self.sc._jsc.sc().checkpointDir()  # a Scala Option
        self._log_level = self._root_logger().getLevel().name()
        self.added: list[str] = []  # files the current attempt added to the context itself
        conf_class = self.jvm.java.lang.Class.forName("org.apache.hadoop.conf.Configuration")
        self._overlay = conf_class.getDeclaredField("overlay")  # the keys set on a Configuration since it loaded
        self._overlay.setAccessible(True)
        self._system: Any = None  # the JVM's system properties and the Hadoop conf's keys when the attempt began
        self._hadoop: Any = None
        self._bus = self.sc._jsc.sc().listenerBus()
        self._listeners: Any = None  # the bus's listeners when the attempt began
        fs_class = self.jvm.java.lang.Class.forName("org.apache.hadoop.fs.FileSystem")
        cache_field = fs_class.getDeclaredField("CACHE")
        cache_field.setAccessible(True)
        cache = cache_field.get(None)
        map_field = cache.getClass().getDeclaredField("map")
        map_field.setAccessible(True)
        self._fs_cache = map_field.get(cache)  # Hadoop's FileSystem instances by scheme, authority and user
        self._filesystems: Any = None  # its keys when the attempt began
        # The Java classes used per attempt, looked up once: each name in a ``jvm.java.util.X`` chain is a
        # round trip to the JVM (py4j), and a no-op attempt's whole cost was mostly such lookups.
        self._java_system = self.jvm.java.lang.System
        self._array_list = self.jvm.java.util.ArrayList
        self._hash_set = self.jvm.java.util.HashSet

    def forget(self) -> None:
        """An attempt starts: nothing of it is known yet (:meth:`begin` runs when it first reaches Spark)."""
        self.added = []
        self._system = self._hadoop = self._listeners = self._filesystems = None

    def begin(self) -> None:
        """The attempt reaches Spark (after :meth:`enter`): what :meth:`dirty` compares with when it ends. An
        attempt that never reaches Spark cannot change what this compares, so it costs no JVM call."""
        self._system = self._java_system.getProperties().clone()
        self._hadoop = self._hadoop_keys().clone()
        self._listeners = self._array_list(self._bus.listeners())
        self._filesystems = self._hash_set(self._fs_cache.keySet())

    def _hadoop_keys(self) -> Any:
        """The keys set on the context's Hadoop configuration (Spark's ``spark.hadoop.*``, a program's
        ``set``): comparing them, not every property, ignores Hadoop reloading its default files."""
        conf = self.sc._jsc.hadoopConfiguration()
        overlay = self._overlay.get(conf)
        return overlay if overlay is not None else self.jvm.java.util.Properties()

    def enter(self, cwd: str) -> None:
        """Relative paths of the JVM resolve in ``cwd`` (Hadoop's local filesystem and ``FileContext``, which
        reads ``user.dir`` each time it starts; ``java.io.File`` keeps the JVM's start directory)."""
        jvm = self.jvm
        jvm.java.lang.System.setProperty("user.dir", cwd)
        local_fs = jvm.org.apache.hadoop.fs.FileSystem.getLocal(self.sc._jsc.hadoopConfiguration())
        local_fs.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(f"file://{cwd}"))

    def use_warehouse(self, session: Any, location: str) -> None:
        """Make ``location`` the attempt's warehouse: new databases go under it and the default database
        (which Spark created under the driver's warehouse) lives there, so ``saveAsTable("t")`` writes
        ``<location>/t`` as under spark-submit."""
        session._jsparkSession.sessionState().conf().setConfString(WAREHOUSE_CONF, location)
        db = self._default_db
        self._catalog.alterDatabase(db.copy(db.name(), db.description(), self.jvm.java.net.URI(location),
                                            db.properties()))

    def clear(self, session: Any | None) -> None:
        """Put the context back as the driver started it; each step on its own, so one failing (logged)
        does not leave the others undone."""
        steps = [("streaming queries", lambda: self._stop_streams(session)),
                 ("cached data", self._uncache), ("catalog", self._forget_catalog),
                 ("local properties", self._reset_properties),
                 ("checkpoint directory and log level", self._reset_settings),
                 ("listeners", self._remove_listeners), ("Hadoop FileSystem instances", self._close_filesystems)]
        for what, step in steps:
            try:
                step()
            except Exception:
                log.warning("resetting the attempt's %s failed", what, exc_info=True)

    def dirty(self) -> str:
        """Why this context must not run another attempt ('' when it may)."""
        reasons = []
        if self.added:
            names = ", ".join(sorted(set(self.added)))
            reasons.append(f"the program added files to the SparkContext ({names}), which Spark serves by name "
                           "until it stops")
        if self._hadoop is not None:
            keys = _changed(self._hadoop, self._hadoop_keys())
            if keys:
                reasons.append(f"the program changed the SparkContext's Hadoop configuration ({keys}), whose "
                               "FileSystem instances the JVMs keep")
        if self._system is not None:
            keys = _changed(self._system, self._java_system.getProperties())
            if keys:
                reasons.append(f"the program changed JVM system properties ({keys}), which libraries read once")
        return "; ".join(reasons)

    def _stop_streams(self, session: Any | None) -> None:
        if session is None:
            return
        for query in session.streams.active:
            query.stop()

    def _uncache(self) -> None:
        self.root.catalog.clearCache()  # the cache manager is the context's, shared by every session
        rdds = self.sc._jsc.getPersistentRDDs()
        for key in set(rdds.keySet()) - self._rdds:
            rdds.get(key).unpersist(False)

    def _forget_catalog(self) -> None:
        """Databases, tables and functions out of the in-memory catalog, their files left where they are
        (``dropTable``/``dropDatabase`` would delete a managed table's data)."""
        self._catalog.alterDatabase(self._default_db)
        self.root._jsparkSession.sharedState().globalTempViewManager().clear()
        field = self._catalog.getClass().getDeclaredField("catalog")
        field.setAccessible(True)
        databases = field.get(self._catalog)
        names = self._catalog.listDatabases()
        for i in range(names.length()):
            name = names.apply(i)
            if name != "default":
                databases.remove(name)
        default = databases.apply("default")
        default.tables().clear()
        default.functions().clear()

    def _remove_listeners(self) -> None:
        """The listeners added since the attempt began (after its streams stopped: their last events are
        posted to the bus before this)."""
        if self._listeners is None:
            return
        added = self._array_list(self._bus.listeners())
        added.removeAll(self._listeners)
        for listener in added:
            self.sc._jsc.sc().removeSparkListener(listener)

    def _close_filesystems(self) -> None:
        """Close the FileSystem instances made since the attempt began; closing one removes it from the cache."""
        if self._filesystems is None:
            return
        made = self._hash_set(self._fs_cache.keySet())
        made.removeAll(self._filesystems)
        for key in made:
            filesystem = self._fs_cache.get(key)
            if filesystem is not None:
                filesystem.close()

    def _reset_properties(self) -> None:
        self.sc._jsc.sc().setLocalProperties(self._props.clone())

    def _root_logger(self) -> Any:
        return self.jvm.org.apache.logging.log4j.LogManager.getRootLogger()

    def _reset_settings(self) -> None:
        getattr(self.sc._jsc.sc(), "checkpointDir_$eq")(self._checkpoint_dir)
        if self._root_logger().getLevel().name() != self._log_level:
            self.sc.setLogLevel(self._log_level)


def _changed(before: Any, after: Any, most: int = 5) -> str:
    """The keys of two Java maps whose values differ, named ('' when the maps are equal: one call)."""
    if after.equals(before):
        return ""
    keys = sorted({str(k) for k in before.keySet()} | {str(k) for k in after.keySet()})
    changed = [k for k in keys if before.get(k) != after.get(k)]
    return ", ".join(changed[:most]) + (f" and {len(changed) - most} more" if len(changed) > most else "")
