"""The program's own flags and positional arguments, as spark-submit hands them."""
import argparse
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
write(args.out, {"date": args.date, "limit": args.limit, "inputs": args.inputs,
                 "argv": [a for a in sys.argv[1:] if a != args.out],
                 "rows": spark.range(args.limit).count()})
