"""A worker's Spark JVMs keep their temporary files in a directory of the worker's (worker/jvm_temp.py)."""

from __future__ import annotations

from pathlib import Path

from sparkyard.worker.jvm_temp import remove, temp_conf


def test_the_directory_is_the_jvms_tmpdir_and_local_dir_after_the_options_already_given(tmp_path: Path) -> None:
    conf = temp_conf({"spark.driver.extraJavaOptions": "-XX:+UseSerialGC", "spark.ui.enabled": "false"},
                     tmp_path / "t")
    assert conf == {"spark.driver.extraJavaOptions": f"-XX:+UseSerialGC -Djava.io.tmpdir={tmp_path / 't'}",
                    "spark.ui.enabled": "false", "spark.local.dir": str(tmp_path / "t")}
    assert (tmp_path / "t").is_dir()
    (tmp_path / "t" / "blockmgr-1").mkdir()
    remove(tmp_path / "t")
    assert not (tmp_path / "t").exists()


def test_a_tmpdir_or_local_dir_configured_wins(tmp_path: Path) -> None:
    given = {"spark.driver.extraJavaOptions": "-Djava.io.tmpdir=/scratch", "spark.local.dir": "/fast"}
    assert temp_conf(given, tmp_path / "t") == given
    assert temp_conf({}, tmp_path / "u") == {"spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={tmp_path / 'u'}",
                                             "spark.local.dir": str(tmp_path / "u")}
