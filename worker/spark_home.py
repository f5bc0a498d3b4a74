"""Where the installed pyspark keeps its Spark: the one place a worker looks it up.

The submit runner starts ``bin/spark-submit`` from it, the connect runner's server too (and reads its
``jars/``), and the class archive is named after it. pyspark is imported only when asked: the worker's
modules load without starting its import.
"""

from __future__ import annotations

from pathlib import Path


def spark_home() -> Path:
    """The Spark installation pyspark uses (``SPARK_HOME`` if set, else the one inside the wheel)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def spark_submit_path() -> str:
    """spark-submit of the installed pyspark (its bin/ ships inside the wheel)."""
    return str(spark_home() / "bin" / "spark-submit")
