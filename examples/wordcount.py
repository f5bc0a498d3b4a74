"""Count the words of a text file with Spark: the "hello world" of Sparkyard.

    sparkyard submit examples/wordcount.py:main --arg README.md --files README.md --wait

A relative path is read where the job's files are on the worker: README.md must be shipped with --files.
"""

from __future__ import annotations

from typing import Any


def main(spark: Any, ctx: Any) -> dict[str, Any]:
    from pyspark.sql import functions as F

    path = ctx.args[0] if ctx.args else __file__
    words = (spark.read.text(path)
             .select(F.explode(F.split(F.lower(F.col("value")), r"[^a-z0-9_]+")).alias("word"))
             .where(F.length("word") > 2))
    top = words.groupBy("word").count().orderBy(F.desc("count"), "word").limit(5).collect()
    ctx.logger.info("counted words of %s", path)
    return {"file": path, "words": words.count(), "top": [[r["word"], r["count"]] for r in top]}
