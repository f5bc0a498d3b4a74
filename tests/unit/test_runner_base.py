"""A driver whose Java gateway exited before it could answer says the JVM's own reason (an unresolvable
--packages coordinate: spark-submit says "unresolved dependency", the driver's Python side only
"[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number")."""

from __future__ import annotations

from pathlib import Path

from sparkyard.worker.runner.base import jvm_reason

IVY = """\
:: loading settings :: url = jar:file:/venv/pyspark/jars/ivy-2.5.2.jar!/org/apache/ivy/core/settings/ivysettings.xml
\t::::::::::::::::::::::::::::::::::::::::::::::
\t::          UNRESOLVED DEPENDENCIES         ::
\t::::::::::::::::::::::::::::::::::::::::::::::
\t:: org.apache.spark#spark-avro_2.13;4.0.0: not found
Exception in thread "main" java.lang.RuntimeException: [unresolved dependency: org.apache.spark#spark-avro_2.13;4.0.0: not found]
\tat org.apache.spark.deploy.SparkSubmitUtils$.resolveMavenCoordinates(SparkSubmit.scala:1600)
\tat org.apache.spark.deploy.SparkSubmit.prepareSubmitEnvironment(SparkSubmit.scala:341)
Traceback (most recent call last):
pyspark.errors.exceptions.base.PySparkRuntimeError: [JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.
"""


def test_the_last_jvm_exception_of_a_driver_log_is_its_reason(tmp_path: Path) -> None:
    log = tmp_path / "driver-1.log"
    log.write_text(IVY)
    assert jvm_reason(str(log)) == ("java.lang.RuntimeException: [unresolved dependency: "
                                    "org.apache.spark#spark-avro_2.13;4.0.0: not found]")


def test_a_log_without_a_jvm_exception_or_no_log_gives_nothing(tmp_path: Path) -> None:
    log = tmp_path / "driver-1.log"
    log.write_text("ready\nValueError: a Python error is not the JVM's\n")
    assert jvm_reason(str(log)) == "" and jvm_reason(str(tmp_path / "missing.log")) == ""


def test_only_the_part_of_the_log_this_driver_wrote_counts(tmp_path: Path) -> None:
    log = tmp_path / "driver-1.log"
    log.write_text(IVY)
    since = log.stat().st_size
    with log.open("a") as more:
        more.write("the next driver of this number: started and failed for a Python reason\n")
    assert jvm_reason(str(log), since) == ""
