"""Builder options and spark.conf.set apply to the program's session."""
from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = (SparkSession.builder.appName("conf").config("spark.sql.shuffle.partitions", "3")
         .config("spark.sql.ansi.enabled", "false").getOrCreate())
spark.conf.set("spark.sql.session.timeZone", "UTC")
write(args.out, {"partitions": spark.conf.get("spark.sql.shuffle.partitions"), "ansi": spark.conf.get("spark.sql.ansi.enabled"),
                 "tz": spark.conf.get("spark.sql.session.timeZone")})
