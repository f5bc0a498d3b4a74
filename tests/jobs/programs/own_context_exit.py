"""A spark-submit program that builds its own SparkContext and exits with a code: `… OUT CODE`."""
import json
import sys

from pyspark import SparkConf, SparkContext

sc = SparkContext(conf=SparkConf().setAppName("own-context"))
again = SparkContext.getOrCreate()
total = sc.parallelize(range(10)).map(lambda x: x * x).sum()
with open(sys.argv[1], "w") as f:
    json.dump({"total": total, "same_context": again is sc}, f)
print(f"own context: total {total}")
sc.stop()
sys.exit(int(sys.argv[2]))
