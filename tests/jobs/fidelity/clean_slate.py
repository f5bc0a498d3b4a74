"""What a fresh spark-submit sees: no tables, databases, views, functions, cache, job group, set conf,
checkpoint directory or changed log level."""
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
    "ansi": spark.conf.get("spark.sql.ansi.enabled"),  # builder_conf.py sets it to false
    "streams": len(spark.streams.active),
    "checkpoint_dir": sc.getCheckpointDir(),
    "log_level_set": sc._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().name() == "ERROR",
})
