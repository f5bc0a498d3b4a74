"""Builder options and spark.conf.set apply to the program's session, and a pandas UDF (pandas and pyarrow,
as under spark-submit) runs under them. The program configures Python's logging as a fresh interpreter
lets it (basicConfig, a logger of its own with a file handler, logging.disable)."""
import logging

import pandas as pd
from report import parser, write
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf

args = parser().parse_args()
root_at_start = [len(logging.root.handlers), logging.root.level]
logging.basicConfig(level=logging.INFO, format="fidelity %(message)s")
app = logging.getLogger("fidelity.app")
app.setLevel(logging.DEBUG)
app.addHandler(logging.FileHandler("app.log"))
app.info("configured")
logging.disable(logging.DEBUG)
spark = (SparkSession.builder.appName("conf").config("spark.sql.shuffle.partitions", "3")
         .config("spark.sql.ansi.enabled", "false").getOrCreate())
spark.conf.set("spark.sql.session.timeZone", "UTC")


@pandas_udf("long")
def doubled(s: pd.Series) -> pd.Series:
    return s * 2


write(args.out, {"partitions": spark.conf.get("spark.sql.shuffle.partitions"), "ansi": spark.conf.get("spark.sql.ansi.enabled"),
                 "tz": spark.conf.get("spark.sql.session.timeZone"), "root_at_start": root_at_start,
                 "root_after_basic_config": [len(logging.root.handlers), logging.root.level],
                 "values": [r[0] for r in spark.range(4).select(doubled("id")).collect()],
                 "app_log": open("app.log").read()})
