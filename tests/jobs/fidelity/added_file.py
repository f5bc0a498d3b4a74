"""A file the program adds to the SparkContext itself, read back through SparkFiles on the driver and executors."""
from report import parser, write
from pyspark import SparkFiles
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
spark.sparkContext.addFile("data/part-2.txt")  # relative: the program's working directory


def first_line(_: int) -> str:
    with open(SparkFiles.get("part-2.txt")) as f:
        return f.readline().strip()


with open(SparkFiles.get("part-2.txt")) as f:
    lines = len(f.readlines())
write(args.out, {"driver_lines": lines, "executor_first": spark.sparkContext.parallelize([0]).map(first_line).first()})
