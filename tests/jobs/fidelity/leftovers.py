"""What a program leaves in its JVM and process besides its Spark session: a file it adds to the
SparkContext (read back through SparkFiles on the driver and executors), a key on the context's Hadoop
configuration, a JVM system property, a daemon thread still running with a local property of its own, and
a non-daemon thread that does the program's last job after its main code has ended (Python waits for it,
in the program's working directory; an RDD function on an executor looks there too)."""
import os
import threading
import time

from report import parser, write
from pyspark import SparkFiles
from pyspark.sql import SparkSession

args = parser().parse_args()
spark = SparkSession.builder.getOrCreate()
sc = spark.sparkContext
sc.addFile("data/part-2.txt")  # relative: the program's working directory
sc._jsc.hadoopConfiguration().set("fidelity.hadoop.key", "on")
sc._jvm.java.lang.System.setProperty("fidelity.system.property", "on")


def first_line(_: int) -> str:
    with open(SparkFiles.get("part-2.txt")) as f:
        return f.readline().strip()


def in_program_dir(_: int) -> bool:  # a Python worker's relative path, as a UDF opening a file beside the program
    return os.path.isfile("data/part-1.txt")


def idle() -> None:  # dies with the program's process under spark-submit
    sc.setLocalProperty("spark.scheduler.pool", "idle-pool")
    threading.Event().wait()


def finish() -> None:
    time.sleep(1)  # well after the main code has ended
    sc.setJobGroup("finisher", "the program's last job, on a thread of its own")
    with open(SparkFiles.get("part-2.txt")) as f:
        lines = len(f.readlines())
    write(args.out, {"driver_lines": lines, "executor_first": sc.parallelize([0]).map(first_line).first(),
                     "in_program_dir": os.path.isfile("data/part-1.txt"),
                     "executor_in_program_dir": sc.parallelize([0]).map(in_program_dir).first(),
                     "job_group": sc.getLocalProperty("spark.jobGroup.id"),
                     "hadoop_key": sc._jsc.hadoopConfiguration().get("fidelity.hadoop.key"),
                     "system_property": sc._jvm.java.lang.System.getProperty("fidelity.system.property")})


threading.Thread(target=idle, name="fidelity-idle", daemon=True).start()
threading.Thread(target=finish, name="fidelity-finisher").start()
