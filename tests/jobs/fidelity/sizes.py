"""Run with spark-submit's sizes (--driver-memory, --executor-memory, --executor-cores, --num-executors): the
application's conf has them, and the driver's JVM has the heap asked for."""
from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
conf = spark.sparkContext.getConf()
heap_mb = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20
write(args.out, {key: conf.get(key, None) for key in ("spark.driver.memory", "spark.executor.memory",
                                                     "spark.executor.cores", "spark.executor.instances")}
      | {"heap_as_asked": 500 < heap_mb <= 700})
