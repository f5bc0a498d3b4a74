"""A pandas UDF (needs pandas and pyarrow, as under spark-submit)."""
import pandas as pd
from report import parser, write
from pyspark.sql import SparkSession
from pyspark.sql.functions import pandas_udf

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()


@pandas_udf("long")
def doubled(s: pd.Series) -> pd.Series:
    return s * 2


write(args.out, {"values": [r[0] for r in spark.range(4).select(doubled("id")).collect()]})
