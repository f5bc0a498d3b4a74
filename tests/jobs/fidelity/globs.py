"""Relative globs, for Spark's readers and for Python's own file access."""
import glob

from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
with open("data/part-1.txt") as f:
    first = f.readline().strip()
write(args.out, {"spark_lines": spark.read.text("data/part-*.txt").count(), "python_files": sorted(glob.glob("data/*.txt")),
                 "first": first, "words": sorted(spark.sparkContext.textFile("data/*.txt").flatMap(str.split).distinct().collect())})
