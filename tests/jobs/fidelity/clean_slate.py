"""What a fresh spark-submit sees: no tables, databases, views, functions, cache, job group, set conf,
checkpoint directory or changed log level; no Hadoop configuration key or JVM system property a program
set; Python's logging as a fresh interpreter has it."""
import logging

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
    "hadoop_key": sc._jsc.hadoopConfiguration().get("fidelity.hadoop.key"),
    "system_property": sc._jvm.java.lang.System.getProperty("fidelity.system.property"),
    "root_logger": [len(logging.root.handlers), logging.root.level, logging.root.manager.disable],
    "app_logger": [len(logging.getLogger("fidelity.app").handlers), logging.getLogger("fidelity.app").level],
    "log_level_set": sc._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().name() == "ERROR",
})
