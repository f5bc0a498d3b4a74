"""Hadoop settings an attempt gives at runtime, which a warm driver on a cluster cannot take back.

Hadoop caches one ``FileSystem`` per scheme, authority and user for a JVM's life, made with the
configuration of the first call. After each attempt the driver closes the instances made in its own JVM
(worker/spark_reset.py); in ``local`` mode the executors are that JVM, so that is the whole of it. On a
cluster (``--spark-master spark://…``, YARN, Kubernetes) the executors are JVMs of their own that outlive
the attempt, and the driver cannot reach their caches: a program that gives Hadoop settings at runtime may
get an executor's instance made with an earlier attempt's settings, and a later attempt may get this
one's. What counts as such a setting (:func:`gives_hadoop`): a key starting with ``spark.hadoop.`` or
``fs.`` that is

* in the attempt's session conf with a value the session did not start with (``spark.conf.set``, the
  builder's ``config`` inside the attempt, SQL ``SET``, or a job's non-Spark ``--conf fs.…``, which the
  runner sets on the session), compared when the attempt ends;
* an option of a reader or writer (``DataFrameReader``, ``DataFrameWriter``, ``DataFrameWriterV2``,
  ``DataStreamReader``, ``DataStreamWriter``: ``option``/``options``, which every format method and
  ``load``/``save``/``start`` keyword goes through), seen when it is given: Spark puts a source's options
  into the Hadoop configuration its files are read and written with.

On a cluster such an attempt's log says so once, in one line naming the first key, and the driver retires
after it (:meth:`RuntimeHadoop.reason`, one of the driver's ``dirty()`` reasons), so no later attempt gets
its executors' instances: they end with the driver's application. In local mode nothing is patched or
compared. A job's own ``--conf spark.hadoop.*`` never gets here: the attempt runs on a driver started with
it (worker/warm_conf.py), and neither does an attempt on such a fresh driver, which ends with it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable, Mapping

PREFIXES = ("spark.hadoop.", "fs.")


def on_cluster(master: str) -> bool:
    """Whether a context of ``master`` has executors in JVMs of their own: all but ``local``, ``local[N]``,
    ``local[N,F]`` (``local-cluster[…]`` starts executor JVMs of its own)."""
    return master != "local" and not master.startswith("local[")


def gives_hadoop(key: str) -> bool:
    """Whether a conf key or a source's option is a Hadoop setting (Spark's keys are case-insensitive)."""
    return key.lower().startswith(PREFIXES)


def hadoop_keys(keys: Iterable[str]) -> list[str]:
    """The Hadoop settings among ``keys``, in order, each once."""
    return list(dict.fromkeys(k for k in keys if gives_hadoop(k)))


def notice(key: str) -> str:
    """The attempt's log line for the first runtime Hadoop setting ``key`` on a cluster."""
    name = key[len(PREFIXES[0]):] if key.lower().startswith(PREFIXES[0]) else key
    return (f"on a cluster this warm driver's executors keep the Hadoop FileSystem instances earlier attempts "
            f"made, so the runtime setting {key} may not take effect for a scheme they already used; give it "
            f"with --conf spark.hadoop.{name}=… at submit (a fresh driver is started with it) or use --runner "
            "submit; this driver retires after the attempt")


class RuntimeHadoop:
    """The runtime Hadoop settings of the current attempt of a driver on a cluster (none in local mode)."""

    def __init__(self, master: str) -> None:
        self.cluster = on_cluster(master)
        self.active = False  # an attempt of a warm driver on a cluster runs
        self.keys: list[str] = []  # its runtime Hadoop settings, in the order seen
        self._warn: Callable[[str], None] = print
        self._settings: Any = None  # the session conf when the attempt's session started (a Java map)

    def begin(self, warn: Callable[[str], None], *, fresh: bool) -> None:
        """An attempt starts; ``fresh``: on a driver started for it alone, which ends with it."""
        self.active = self.cluster and not fresh
        self.keys = []
        self._warn = warn
        self._settings = None

    def session_started(self, session: Any) -> None:
        """The attempt's session exists, as the context made it: what :meth:`end` compares with."""
        if self.active:
            self._settings = session._jvm.java.util.HashMap(_settings(session))

    def saw(self, keys: Iterable[str]) -> None:
        """The attempt gave these keys at runtime; the first Hadoop setting among them is said in its log."""
        new = [k for k in hadoop_keys(keys) if k not in self.keys]
        if not new:
            return
        if not self.keys:
            self._warn(notice(new[0]))
        self.keys.extend(new)

    def end(self, session: Any) -> None:
        """The attempt ends: its session's conf keys changed since it started (a few py4j calls: the
        comparison runs in the JVM)."""
        if self.active and session is not None and self._settings is not None:
            changed = session._jvm.java.util.HashMap(_settings(session))
            changed.entrySet().removeAll(self._settings.entrySet())
            self.saw(str(k) for k in changed.keySet())
        self.active = False
        self._settings = None

    def reason(self) -> str:
        """Why the driver must retire after this attempt ('' when it need not)."""
        if not self.keys:
            return ""
        return (f"the program gave Hadoop settings at runtime ({', '.join(self.keys)}), whose FileSystem instances "
                "the cluster's executors keep")

    def install(self) -> None:
        """Watch the options of PySpark's readers and writers (on a cluster only: local mode is untouched)."""
        if not self.cluster:
            return
        from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter, DataFrameWriterV2
        from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

        def one(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Iterable[str]:
            return args[:1] or [kwargs.get("key", "")]  # option(key, value)

        for owner in (DataFrameReader, DataFrameWriter, DataFrameWriterV2, DataStreamReader, DataStreamWriter):
            setattr(owner, "option", self._watched(owner.option, one))
            setattr(owner, "options", self._watched(owner.options, lambda args, kwargs: kwargs))

    def _watched(self, method: Any, keys_of: Callable[[tuple[Any, ...], Mapping[str, Any]], Iterable[str]]) -> Any:
        @functools.wraps(method)
        def call(source: Any, *args: Any, **kwargs: Any) -> Any:
            if self.active:
                self.saw(str(k) for k in keys_of(args, kwargs))
            return method(source, *args, **kwargs)
        return call


def _settings(session: Any) -> Any:
    """The session's SQL conf as set (Spark's own map: the context's conf merged in, then what was set)."""
    return session._jsparkSession.sessionState().conf().settings()
