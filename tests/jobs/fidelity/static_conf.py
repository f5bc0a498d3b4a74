"""Run with --conf a warm driver's JVM cannot take: a static SQL conf (where global temporary views live)
and a conf of the program's own, read from the SparkContext's conf as spark-submit sets it."""
from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
spark.range(2).createOrReplaceGlobalTempView("shared")
write(args.out, {"global_database": spark.conf.get("spark.sql.globalTempDatabase"),
                 "rows": spark.table("job_temp.shared").count(),
                 "mode": spark.sparkContext.getConf().get("spark.myapp.mode", None)})
