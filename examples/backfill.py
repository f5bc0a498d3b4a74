"""A backfill split over input partitions: each task sums the partitions in its slice.

    sparkyard submit examples/backfill.py:main --inputs 'examples/data/day-*.csv' --parallelism 3 --wait

Sparkyard cuts the inputs into (at most) --parallelism slices; ``ctx.inputs`` is this task's slice and
``ctx.fencing_token`` lets a sink reject writes of a stale attempt.
"""

from __future__ import annotations

from typing import Any


def main(spark: Any, ctx: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    paths = ctx.input_values
    if not paths:
        return {"task": ctx.task_index, "rows": 0, "amount": 0}
    df = spark.read.option("header", True).csv(paths).withColumn("amount", F.col("amount").cast("long"))
    row = df.agg(F.count("*").alias("rows"), F.sum("amount").alias("amount")).first()
    return {"task": ctx.task_index, "of": ctx.task_count, "inputs": len(paths), "rows": row["rows"],
            "amount": row["amount"], "token": ctx.fencing_token}
