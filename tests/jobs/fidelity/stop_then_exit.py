"""spark.stop() then an exit code of the program's own choosing."""
import sys

from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
total = spark.range(6).selectExpr("sum(id)").first()[0]
spark.stop()
write(args.out, {"total": total})
sys.exit(3)
