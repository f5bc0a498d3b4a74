"""Which of a job's conf sends its attempt to a fresh driver (worker/warm_conf.py), without Spark: the
static-key test is Spark's own in the driver, given here as a set."""

from __future__ import annotations

from sparkyard.worker.warm_conf import cannot_apply, fresh_driver_conf, master_notice

STATIC = {"spark.sql.extensions", "spark.sql.globalTempDatabase", "spark.sql.warehouse.dir"}
STARTED_WITH = {"spark.master": "local[1]", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "8"}


def _cannot(conf: dict[str, str]) -> list[str]:
    return cannot_apply(conf, STARTED_WITH, STATIC.__contains__)


def test_runtime_sql_conf_and_what_the_driver_started_with_need_no_fresh_driver() -> None:
    assert _cannot({"spark.sql.shuffle.partitions": "3", "spark.sql.session.timeZone": "UTC",
                    "spark.sql.catalog.lake": "org.example.Catalog", "spark.ui.enabled": "false"}) == []


def test_static_sql_and_core_conf_need_a_jvm_started_with_them() -> None:
    conf = {"spark.sql.extensions": "org.example.Ext", "spark.jars.packages": "a:b:1", "spark.serializer": "kryo",
            "spark.hadoop.fs.s3a.endpoint": "http://s3", "spark.myapp.mode": "on", "spark.sql.shuffle.partitions": "3",
            "spark.driver.memory": "2g"}
    assert _cannot(conf) == ["spark.driver.memory=2g", "spark.hadoop.fs.s3a.endpoint=http://s3", "spark.jars.packages=a:b:1",
                             "spark.myapp.mode=on", "spark.serializer=kryo", "spark.sql.extensions=org.example.Ext"]


def test_warehouse_name_master_and_foreign_keys_never_need_one() -> None:
    assert _cannot({"spark.sql.warehouse.dir": "wh", "spark.app.name": "x", "spark.master": "local[4]",
                    "hive.exec.dynamic.partition": "true"}) == []


def test_a_fresh_driver_starts_with_the_workers_conf_then_the_jobs_less_what_is_per_attempt() -> None:
    worker = {"spark.ui.enabled": "false", "spark.serializer": "java"}
    job = {"spark.serializer": "kryo", "spark.sql.warehouse.dir": "wh", "spark.master": "yarn", "spark.app.name": "n"}
    assert fresh_driver_conf(worker, job) == {"spark.ui.enabled": "false", "spark.serializer": "kryo"}


def test_a_jobs_own_master_is_said_not_applied() -> None:
    assert master_notice({"spark.master": "local[1]"}, "local[1]") == ""
    assert master_notice({}, "local[1]") == ""
    notice = master_notice({"spark.master": "local[4]"}, "local[1]")
    assert "spark.master=local[4] is not applied" in notice and "(local[1])" in notice
