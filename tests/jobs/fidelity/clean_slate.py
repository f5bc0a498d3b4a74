"""What a fresh spark-submit sees: no tables, databases, views, functions, cache, job group or set conf."""
from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
sc = spark.sparkContext
write(args.out, {
    "databases": sorted(d.name for d in spark.catalog.listDatabases()),
    "current_database": spark.catalog.currentDatabase(),
    "tables": sorted(t.name for t in spark.catalog.listTables()),
    "global_views": [r[1] for r in spark.sql("SHOW VIEWS IN global_temp").collect()],
    "functions": [f.name for f in spark.catalog.listFunctions() if f.name == "plus_one"],
    "persisted_rdds": len(sc._jsc.getPersistentRDDs()),
    "job_group": sc.getLocalProperty("spark.jobGroup.id"),
    "pool": sc.getLocalProperty("spark.scheduler.pool"),
    "time_zone_set": spark.conf.get("spark.sql.session.timeZone") == "Asia/Tokyo",
    "streams": len(spark.streams.active),
})
