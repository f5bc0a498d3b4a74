"""Builder options and spark.conf.set apply to the program's session, and a pandas UDF (pandas and pyarrow,
as under spark-submit) runs under them."""
import pandas as pd
from report import parser, write
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf

args = parser().parse_args()
spark = (SparkSession.builder.appName("conf").config("spark.sql.shuffle.partitions", "3")
         .config("spark.sql.ansi.enabled", "false").getOrCreate())
spark.conf.set("spark.sql.session.timeZone", "UTC")


@pandas_udf("long")
def doubled(s: pd.Series) -> pd.Series:
    return s * 2


write(args.out, {"partitions": spark.conf.get("spark.sql.shuffle.partitions"), "ansi": spark.conf.get("spark.sql.ansi.enabled"),
                 "tz": spark.conf.get("spark.sql.session.timeZone"),
                 "values": [r[0] for r in spark.range(4).select(doubled("id")).collect()]})
