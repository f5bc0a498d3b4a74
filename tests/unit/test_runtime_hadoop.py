"""Which runtime settings of an attempt are Hadoop's, and when a warm driver says so and retires
(worker/runtime_hadoop.py): on a cluster, not in local mode nor on a fresh driver. Without a JVM: the
readers' option watch is checked on PySpark's own reader class, its Java side a recorder."""

from __future__ import annotations

from typing import Any

import pytest

from sparkyard.worker.runtime_hadoop import RuntimeHadoop, gives_hadoop, hadoop_keys, notice, on_cluster


def test_local_mode_runs_executors_in_the_driver_and_every_other_master_does_not() -> None:
    assert [on_cluster(m) for m in ("local", "local[1]", "local[*]", "local[2,3]")] == [False] * 4
    assert [on_cluster(m) for m in ("spark://h:7077", "spark://a:7077,b:7077", "yarn", "k8s://https://k:6443",
                                    "local-cluster[2,1,1024]")] == [True] * 5


def test_hadoop_settings_are_the_spark_hadoop_and_fs_keys() -> None:
    keys = ["spark.hadoop.fs.s3a.endpoint", "fs.s3a.access.key", "FS.defaultFS", "spark.sql.shuffle.partitions",
            "header", "path", "spark.hadoopish", "hadoop.security.authentication", "fs.s3a.access.key"]
    assert [k for k in keys if gives_hadoop(k)] == keys[:3] + keys[-1:]
    assert hadoop_keys(keys) == keys[:3]


def test_the_notice_names_the_key_and_the_conf_that_gives_it_at_submit() -> None:
    for key in ("spark.hadoop.fs.s3a.endpoint", "fs.s3a.endpoint"):
        line = notice(key)
        assert "\n" not in line
        assert f"the runtime setting {key} may not take effect" in line
        assert "--conf spark.hadoop.fs.s3a.endpoint=… at submit" in line and "--runner submit" in line


def _attempt(master: str, fresh: bool = False) -> tuple[RuntimeHadoop, list[str]]:
    said: list[str] = []
    hadoop = RuntimeHadoop(master)
    hadoop.begin(said.append, fresh=fresh)
    return hadoop, said


def test_on_a_cluster_the_first_setting_is_said_once_and_every_one_retires_the_driver() -> None:
    hadoop, said = _attempt("spark://h:7077")
    assert hadoop.active
    hadoop.saw(["header", "inferSchema"])
    assert (said, hadoop.reason()) == ([], "")
    hadoop.saw(["fs.s3a.endpoint", "header"])
    hadoop.saw(["spark.hadoop.fs.gs.project.id", "fs.s3a.endpoint"])
    assert said == [notice("fs.s3a.endpoint")]
    assert hadoop.reason() == ("the program gave Hadoop settings at runtime (fs.s3a.endpoint, spark.hadoop.fs.gs."
                               "project.id), whose FileSystem instances the cluster's executors keep")
    hadoop.end(None)
    hadoop.begin(said.append, fresh=False)  # the next attempt (of a replacement driver) starts clean
    assert hadoop.reason() == ""


def test_local_mode_and_a_fresh_driver_watch_nothing() -> None:
    for master, fresh in (("local[1]", False), ("spark://h:7077", True)):
        hadoop, _ = _attempt(master, fresh)
        assert not hadoop.active, (master, fresh)


class _Recorder:
    """The Java reader behind a DataFrameReader: keeps the options it was given."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}

    def option(self, key: str, value: str) -> _Recorder:
        self.given[key] = value
        return self


@pytest.fixture
def reader_class(monkeypatch: pytest.MonkeyPatch) -> Any:
    """PySpark's DataFrameReader; the option methods of every watched class are put back after the test."""
    from pyspark.sql.readwriter import DataFrameReader, DataFrameWriter, DataFrameWriterV2
    from pyspark.sql.streaming.readwriter import DataStreamReader, DataStreamWriter

    for cls in (DataFrameReader, DataFrameWriter, DataFrameWriterV2, DataStreamReader, DataStreamWriter):
        for name in ("option", "options"):
            monkeypatch.setattr(cls, name, getattr(cls, name))
    return DataFrameReader


def _reader(cls: Any) -> Any:
    reader = object.__new__(cls)
    reader._jreader = _Recorder()
    return reader


def test_a_readers_options_are_watched_on_a_cluster_while_an_attempt_runs(reader_class: Any) -> None:
    hadoop, said = _attempt("spark://h:7077")
    hadoop.install()
    reader = _reader(reader_class)
    reader.option("header", True).options(**{"fs.s3a.endpoint": "http://s3", "sep": ";"})
    reader.option(key="spark.hadoop.fs.x", value="1")
    assert reader._jreader.given == {"header": "true", "fs.s3a.endpoint": "http://s3", "sep": ";",
                                     "spark.hadoop.fs.x": "1"}
    assert (said, hadoop.keys) == ([notice("fs.s3a.endpoint")], ["fs.s3a.endpoint", "spark.hadoop.fs.x"])
    hadoop.end(None)
    reader.option("fs.other", "2")  # between attempts: PySpark's own call, nothing seen
    assert hadoop.keys == ["fs.s3a.endpoint", "spark.hadoop.fs.x"] and reader._jreader.given["fs.other"] == "2"


def test_local_mode_leaves_the_readers_as_pyspark_has_them(reader_class: Any) -> None:
    option, options = reader_class.option, reader_class.options
    RuntimeHadoop("local[1]").install()
    assert (reader_class.option, reader_class.options) == (option, options)
