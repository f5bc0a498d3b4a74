"""saveAsTable lands in ./spark-warehouse of the working directory; a database and views of its own."""
import os

from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.appName("warehouse").getOrCreate()
spark.range(4).write.saveAsTable("events")
spark.sql("CREATE DATABASE sales")
spark.range(2).write.saveAsTable("sales.orders")
spark.range(3).createOrReplaceGlobalTempView("shared_view")
spark.range(3).createOrReplaceTempView("local_view")
spark.udf.register("plus_one", lambda x: x + 1, "long")
spark.table("events").cache().count()
spark.sparkContext.setJobGroup("group-1", "a job group")
spark.sparkContext.setLocalProperty("spark.scheduler.pool", "pool-1")
spark.conf.set("spark.sql.session.timeZone", "Asia/Tokyo")
spark.sql("USE sales")
spark.sparkContext.setCheckpointDir("checkpoints")
spark.sparkContext.setLogLevel("ERROR")
write(args.out, {
    "events_dir": os.path.isdir("spark-warehouse/events"),
    "orders_dir": os.path.isdir("spark-warehouse/sales.db/orders"),
    "tables": sorted(t.name for t in spark.catalog.listTables("default")),
    "count": spark.table("default.events").count(),
    "warehouse_is_here": spark.conf.get("spark.sql.warehouse.dir").rstrip("/").endswith(
        os.path.join(os.getcwd(), "spark-warehouse")),
})
