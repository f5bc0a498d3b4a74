"""An RDD program with its own SparkContext(appName=…), which getOrCreate() then returns, a line on stdout
and one on stderr, and a job failing with an exception."""
import sys

from report import parser, write
from pyspark import SparkConf, SparkContext

args = parser().parse_args()
sc = SparkContext(conf=SparkConf().setAppName("rdd-only"))
counts = dict(sc.parallelize(["a", "b", "a"]).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b).collect())
write(args.out, {"counts": counts, "same_context": SparkContext.getOrCreate() is sc})
print("context_only: to stdout")
print("context_only: to stderr", file=sys.stderr)
raise ValueError("the program fails on purpose")
