"""A spark-submit program that fails with an uncaught exception after writing its output: `… OUT`."""
import json
import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
with open(sys.argv[1], "w") as f:
    json.dump({"rows": spark.range(3).count()}, f)
raise ValueError("bad input row 3")
