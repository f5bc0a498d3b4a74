"""Structured Streaming with a relative checkpoint and sink, availableNow, read back; a rate stream left running."""
import os

from report import parser, write
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
spark.range(5).write.mode("overwrite").parquet("stream_in")
query = (spark.readStream.schema("id long").parquet("stream_in").writeStream.format("parquet")
         .option("checkpointLocation", "chk_stream").option("path", "stream_out").trigger(availableNow=True).start())
query.awaitTermination()
spark.readStream.format("rate").load().writeStream.format("noop").start()  # still running at the end
write(args.out, {"rows": spark.read.parquet("stream_out").count(), "checkpoint_here": os.path.isdir("chk_stream/offsets"),
                 "sink_metadata_here": os.path.isdir("stream_out/_spark_metadata")})
