"""Hadoop settings a program gives at runtime — a spark.hadoop.* key set on its session and a reader's
option — reach the Hadoop FileSystem its read makes (of a scheme nothing made before: http), which Hadoop
caches per JVM. Run twice with other values (two jobs): under spark-submit each sees its own."""
from report import parser, write
from pyspark.sql import SparkSession

p = parser()
p.add_argument("--value", required=True)
args = p.parse_args()
spark = SparkSession.builder.getOrCreate()
sc = spark.sparkContext
spark.conf.set("spark.hadoop.fidelity.session.key", args.value)
try:
    spark.read.option("fidelity.read.key", args.value).format("text").load("http://127.0.0.1:9/none").count()
except Exception as exc:
    failed = type(exc).__name__
filesystem = sc._jvm.org.apache.hadoop.fs.FileSystem.get(sc._jvm.java.net.URI("http://127.0.0.1:9/"),
                                                         sc._jsc.hadoopConfiguration())
conf = filesystem.getConf()
write(args.out, {"session_key": conf.get("spark.hadoop.fidelity.session.key"),
                 "read_key": conf.get("fidelity.read.key"), "read_failed": failed})
