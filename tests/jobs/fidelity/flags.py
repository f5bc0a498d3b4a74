"""A command-line ETL script: its own flags and positional arguments as spark-submit hands them, relative
paths and globs (Spark's readers and Python's own file access), then spark.stop() and an exit code of its
own choosing; its result is written by a function it registered with atexit (Python runs it as the
program ends, in its working directory)."""
import argparse
import atexit
import glob
import os
import sys

from report import write
from pyspark.sql import SparkSession

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--date", required=True)
p.add_argument("--limit", type=int, default=0)
p.add_argument("inputs", nargs="*")
args = p.parse_args()
spark = SparkSession.builder.getOrCreate()
with open(args.inputs[0]) as f:
    first = f.readline().strip()
result = {"date": args.date, "limit": args.limit, "inputs": args.inputs,
          "argv": [a for a in sys.argv[1:] if a != args.out], "rows": spark.range(args.limit).count(),
          "input_lines": spark.read.text(args.inputs).count(), "spark_lines": spark.read.text("data/part-*.txt").count(),
          "python_files": sorted(glob.glob("data/*.txt")), "first": first,
          "words": sorted(spark.sparkContext.textFile("data/*.txt").flatMap(str.split).distinct().collect()),
          "total": spark.range(6).selectExpr("sum(id)").first()[0]}


def at_exit() -> None:
    result["exit_hook_in_program_dir"] = os.path.isfile("data/part-1.txt")
    write(args.out, result)


atexit.register(at_exit)
spark.stop()
sys.exit(3)
