"""Which of a job's Spark conf a warm driver can give an attempt, and which needs a JVM started with it.

A warm driver's SparkContext started before the attempt came, with the worker's conf. A job's ``--conf``
reaches the attempt's own ``newSession()``, which can take runtime SQL conf only. Spark fixes the rest
when its context or shared state starts: static SQL conf (``spark.sql.extensions``,
``spark.sql.catalogImplementation``…) and core conf (``spark.jars``, ``spark.jars.packages``,
``spark.serializer``, ``spark.hadoop.*``, executor sizes, any ``spark.*`` outside ``spark.sql.*``, which
Spark's components read from the context's ``SparkConf``). Under spark-submit the program's JVM starts
with all of it, so the session runner runs such an attempt on a **fresh driver** started with exactly the
worker's conf and the job's (worker/runner/fresh.py) instead of letting the difference pass silently.

Three keys are never a reason for a fresh driver: ``spark.sql.warehouse.dir`` (each attempt has a
warehouse of its own already: worker/spark_reset.py), ``spark.app.name`` (the job's name is Sparkyard's,
under every runner) and ``spark.master`` (the worker's engine decides where a job runs, under every
runner: the attempt's log says so, :func:`master_notice`). A key outside ``spark.*`` is not Spark's
(spark-submit ignores it with a warning); it is set on the session as given.
"""

from __future__ import annotations

from typing import Callable, Mapping

from sparkyard.worker.spark_reset import WAREHOUSE_CONF

MASTER_CONF = "spark.master"
# Keys that never need a JVM of their own (see the module docstring).
PER_ATTEMPT = frozenset({WAREHOUSE_CONF, "spark.app.name", MASTER_CONF})


def cannot_apply(conf: Mapping[str, str], started_with: Mapping[str, str],
                 is_static: Callable[[str], bool]) -> list[str]:
    """The ``key=value`` items of a job's ``conf`` that a driver whose context started with ``started_with``
    cannot give an attempt (``is_static``: Spark's own test for a static SQL conf key)."""
    items = []
    for key, value in sorted(conf.items()):
        if key in PER_ATTEMPT or not key.startswith("spark.") or started_with.get(key) == value:
            continue
        if not key.startswith("spark.sql.") or is_static(key):
            items.append(f"{key}={value}")
    return items


def fresh_driver_conf(worker_conf: Mapping[str, str], job_conf: Mapping[str, str]) -> dict[str, str]:
    """The conf a fresh driver for one job starts with: the worker's, then the job's (as ``--conf`` on
    spark-submit's line adds to its defaults), less what every attempt gets per attempt anyway."""
    return {**worker_conf, **{k: v for k, v in job_conf.items() if k not in PER_ATTEMPT}}


def master_notice(conf: Mapping[str, str], master: str) -> str:
    """What an attempt's log says of a job's ``--conf spark.master`` that is not the worker's ('' if none)."""
    asked = conf.get(MASTER_CONF, "")
    if not asked or asked == master:
        return ""
    return (f"--conf {MASTER_CONF}={asked} is not applied: the worker's engine ({master}) decides where a job "
            "runs; choose workers with --group")
