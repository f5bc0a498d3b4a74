"""An RDD program with its own SparkContext(appName=…) and a job failing with an exception."""
from report import parser, write
from pyspark import SparkConf, SparkContext

args = parser().parse_args()
sc = SparkContext(conf=SparkConf().setAppName("rdd-only"))
counts = dict(sc.parallelize(["a", "b", "a"]).map(lambda w: (w, 1)).reduceByKey(lambda a, b: a + b).collect())
write(args.out, {"counts": counts})
raise ValueError("the program fails on purpose")
