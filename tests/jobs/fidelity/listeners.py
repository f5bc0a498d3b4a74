"""Listeners the program adds: a SparkListener on the context (addSparkListener) and a streaming query
listener (spark.streams.addListener), which hears its own query. Under spark-submit they go with its JVM;
the second run of this program (another job) must find the context's listener bus as the first did."""
from report import parser, write
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQueryListener

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
sc = spark.sparkContext
bus = sc._jsc.sc().listenerBus()
found = sorted(str(listener.getClass().getSimpleName()) for listener in bus.listeners())
at_start = {name: found.count(name) for name in ("StatsReportListener", "StreamingQueryListenerBus")}
sc._jsc.sc().addSparkListener(sc._jvm.org.apache.spark.scheduler.StatsReportListener())
heard = []


class Heard(StreamingQueryListener):
    def onQueryStarted(self, event: object) -> None:
        heard.append("started")

    def onQueryProgress(self, event: object) -> None:
        pass

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass


spark.streams.addListener(Heard())
spark.range(3).write.mode("overwrite").parquet("listen_in")
query = (spark.readStream.schema("id long").parquet("listen_in").writeStream.format("noop")
         .option("checkpointLocation", "listen_chk").trigger(availableNow=True).start())
query.awaitTermination()
write(args.out, {"at_start": at_start, "rows": query.lastProgress["numInputRows"]})
