"""A spark-submit program: `spark-submit wordcount_report.py OUT MIN_AMOUNT` (run from this directory)."""
import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

out, min_amount = sys.argv[1], int(sys.argv[2])
spark = SparkSession.builder.appName("report").config("spark.sql.shuffle.partitions", "2").getOrCreate()
sc = spark.sparkContext
words = sc.parallelize(["a b", "b c", "c c"]).flatMap(str.split).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b)
lines = sc.textFile("data/sales.csv").count()
df = spark.read.csv("data/sales.csv", header=True, inferSchema=True)
totals = {r["region"]: r["total"] for r in df.groupBy("region").agg(F.sum("amount").alias("total")).collect()
          if r["total"] >= min_amount}
print(f"report: {len(totals)} regions over {min_amount}")
print("report: to stderr", file=sys.stderr)
with open(out, "w") as f:
    json.dump({"words": dict(sorted(words.collect())), "lines": lines, "totals": totals,
               "partitions": spark.conf.get("spark.sql.shuffle.partitions")}, f, sort_keys=True)
spark.stop()
