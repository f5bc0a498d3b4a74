"""The connect runner: a Spark Connect server the worker starts and supervises, a remote session per
attempt in warm client processes. Real Redis, master, worker, Spark Connect server and Spark; one server
is shared by the tests of this module (the last one kills it)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import Iterator

import psutil
import pytest

from harness import EXAMPLES, Cluster, RedisServer, cluster_with_worker, free_port, stop_process, wait_for
from sparkyard.client import Client, first_run_id
from sparkyard.pipeline import Pipeline
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.children import Children
from sparkyard.worker.connect_server import ConnectServer

TASKS = EXAMPLES / "tasks.py"
pytestmark = pytest.mark.spark

PROGRAM = """\
import sys
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

spark = SparkSession.builder.appName("report").config("spark.sql.shuffle.partitions", "3").getOrCreate()
same = SparkSession.getActiveSession() is spark
rows = spark.range(10).groupBy((F.col("id") % 2).alias("odd")).count().orderBy("odd").collect()
print("counts", [r["count"] for r in rows], spark.conf.get("spark.sql.shuffle.partitions"), same)
spark.stop()
"""
BUNDLE_JOB = """\
import os

from pyspark import SparkFiles
from pyspark.sql.functions import udf
from mylib.maths import triple

def offset(x):
    with open(SparkFiles.get("offset.txt")) as f:  # a --files entry, an artifact of the attempt's session
        here = os.path.isfile("mylib/maths.py")  # relative: the attempt's directory, as under spark-submit
        return triple(x) + int(f.read()) + (1000 if here else 0)

def main(spark, ctx):
    with open(SparkFiles.get("offset.txt")) as f:  # on the client too, as on a spark-submit driver
        assert int(f.read()) == 100
    return [r[0] for r in spark.range(4).select(udf(offset, "long")("id")).orderBy("id").collect()]
"""

# A stream with a relative input, checkpoint and sink, as in Spark's guides; run from two directories.
STREAM_PROGRAM = """\
import os
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
spark.range(int(sys.argv[1])).write.mode("overwrite").parquet("in")
query = (spark.readStream.schema("id long").parquet("in").writeStream.format("parquet")
         .option("checkpointLocation", "chk").option("path", "out").trigger(availableNow=True).start())
query.awaitTermination()
print("rows", spark.read.parquet("out").count(), os.path.isdir("chk/offsets"), os.path.isdir("out/_spark_metadata"))
"""

# Reads a folder of CSV files given by its absolute path (both jobs read the same files) and caches them.
CACHE_PROGRAM = """\
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
df = spark.read.schema("n int").csv(sys.argv[1])
df.cache()
df.createOrReplaceTempView("numbers")
spark.sql("CACHE TABLE numbers")
print("rows", df.count(), spark.table("numbers").count())
spark.catalog.listTables()
try:
    spark.table("made_elsewhere").count()  # a name this program did not create
except Exception as exc:
    print("not found:", type(exc).__name__)
"""


def _server_pid(cluster: Cluster, worker_id: str) -> int:
    records = [json.loads(p.read_text()) for p in (cluster.root / worker_id / "children").glob("*.json")]
    return next(r["pid"] for r in records if r["what"] == "Spark Connect server")


def _readiness(client: Client, worker_id: str) -> int:
    return next((w.readiness for w in client.workers() if w.id == worker_id and w.alive), pb.READINESS_UNSPECIFIED)


def _run(client: Client, entrypoint: str, **options: object) -> pb.Run:
    run, timed_out = client.wait(first_run_id(client.submit(entrypoint, **options)), timeout=180)
    assert not timed_out
    return run


@pytest.fixture(scope="module")
def connect(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Client]]:
    """A master and one worker whose default runner is connect: its own Spark Connect server (local[1])
    and 2 warm clients."""
    with cluster_with_worker(redis_server.url, tmp_path_factory.mktemp("connect"), "c", 2, namespace="connect",
                             runner="connect") as pair:
        yield pair


def test_dataframe_tasks_and_a_spark_submit_program_run_on_their_own_remote_sessions(
        connect: tuple[Cluster, Client], tmp_path: Path) -> None:
    cluster, client = connect
    run = _run(client, f"{TASKS}:count", args=["7"], conf={"spark.yarn.queue": "etl"})
    assert run.state == pb.RUN_SUCCEEDED, run
    assert json.loads(run.tasks[0].result_json)["count"] == 7
    # Core conf the server takes as a plain value, without applying it (spark-submit would start with it).
    assert "conf spark.yarn.queue=etl is Spark core conf, fixed when the Spark Connect server's application " \
           "started" in b"".join(client.logs(run.tasks[0].id)).decode()
    program = tmp_path / "report.py"
    program.write_text(PROGRAM)
    run = _run(client, str(program))
    assert run.state == pb.RUN_SUCCEEDED, run
    log = b"".join(client.logs(run.tasks[0].id)).decode()
    assert "counts [5, 5] 3 True" in log  # getOrCreate() gave the attempt's session, with the builder's conf
    # The server is the worker's own child (tied to it), a JVM.
    server = psutil.Process(_server_pid(cluster, "c"))
    assert server.name() == "java" and server.ppid() == cluster.workers["c"].pid


def test_shipped_bundle_code_and_files_reach_a_udf_on_the_server(connect: tuple[Cluster, Client], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, client = connect
    project = tmp_path / "proj"
    (project / "mylib").mkdir(parents=True)
    (project / "mylib" / "__init__.py").write_text("")
    (project / "mylib" / "maths.py").write_text("def triple(x):\n    return x * 3\n")
    (project / "job.py").write_text(BUNDLE_JOB)
    (project / "offset.txt").write_text("100\n")
    monkeypatch.chdir(project)
    run = _run(client, "job.py:main", bundle=".", files=["offset.txt"])
    assert run.state == pb.RUN_SUCCEEDED, run.tasks[0].attempts[-1].error
    assert json.loads(run.tasks[0].result_json) == [1100, 1103, 1106, 1109]
    # The UDF runs in the server's Python workers, started in the attempt's directory (the worker's own
    # server, a local master: worker/py_daemon.py), so nothing needs saying.
    log = b"".join(client.logs(run.tasks[0].id)).decode()
    assert "the Python function 'offset' runs in the Spark Connect server's Python workers" not in log, log


def test_relative_paths_resolve_in_each_attempt_s_directory_so_two_jobs_do_not_share_a_checkpoint(
        connect: tuple[Cluster, Client], tmp_path: Path) -> None:
    _, client = connect
    logs = []
    for name, rows in (("first", 3), ("second", 4)):
        program = tmp_path / name / "stream.py"
        program.parent.mkdir()
        program.write_text(STREAM_PROGRAM)
        run = _run(client, str(program), args=[str(rows)], cwd=str(program.parent))
        log = b"".join(client.logs(run.tasks[0].id)).decode()
        assert run.state == pb.RUN_SUCCEEDED, log[-3000:]
        logs.append(log)
    # Each job's stream read its own input into its own sink, with its own checkpoint beside it.
    assert "rows 3 True True" in logs[0] and "rows 4 True True" in logs[1], logs


def test_what_a_job_cached_is_not_served_to_the_next_job_reading_the_same_files(
        connect: tuple[Cluster, Client], tmp_path: Path) -> None:
    """The server's cache is shared by every session and outlives them: uncached at the attempt's end, or a
    later job reading the same folder gets the first job's rows, however the files changed (spark-submit's
    cache ends with its JVM)."""
    _, client = connect
    data = tmp_path / "numbers"
    data.mkdir()
    (data / "a.csv").write_text("1\n2\n3\n")
    program = tmp_path / "cached.py"
    program.write_text(CACHE_PROGRAM)
    counts = []
    for more in ("", "4\n5\n"):
        if more:
            (data / "b.csv").write_text(more)
        run = _run(client, str(program), args=[str(data)])
        log = b"".join(client.logs(run.tasks[0].id)).decode()
        assert run.state == pb.RUN_SUCCEEDED, log[-3000:]
        counts.append(re.search(r"rows (\d+) (\d+)", log).groups())  # type: ignore[union-attr]
        # A listing of the server's catalog shows what other jobs left there: said once.
        assert log.count("sparkyard: warning: catalog.listTables(): under the connect runner the catalog is the "
                         "Spark Connect server's, shared by every job on that server") == 1, log[-3000:]
        # So is a read by name of a table the attempt did not create; not that of its own view.
        assert log.count("sparkyard: warning: spark.table('made_elsewhere') reads a table or view this attempt did "
                         "not create: under the connect runner the name resolves in the Spark Connect server's "
                         "catalog") == 1, log[-3000:]
        assert "spark.table('numbers')" not in log and "not found: AnalysisException" in log, log[-3000:]
    assert counts == [("3", "3"), ("5", "5")]


def test_rdd_code_fails_with_a_message_naming_the_connect_runner(connect: tuple[Cluster, Client]) -> None:
    _, client = connect
    run = _run(client, f"{TASKS}:sleep_in_spark", args=["0"])
    assert run.state == pb.RUN_FAILED
    error = run.tasks[0].attempts[-1].error
    assert "spark.sparkContext is not available under the connect runner" in error, error
    assert "--runner session" in error


def test_cancel_and_timeout_interrupt_the_attempts_spark_operation(connect: tuple[Cluster, Client],
                                                                   tmp_path: Path) -> None:
    _, client = connect
    markers = tmp_path / "markers"
    job = client.submit(f"{TASKS}:sleep_in_udf", args=["600", str(markers)])
    wait_for(lambda: list(markers.glob("*.started")), 120, "the UDF to start on the server")
    client.cancel(first_run_id(job))
    run, _ = client.wait(first_run_id(job), timeout=60)
    assert run.state == pb.RUN_CANCELLED and run.tasks[0].attempts[-1].state == pb.ATTEMPT_CANCELLED
    timed = _run(client, f"{TASKS}:sleep_in_udf", args=["600", str(markers)], timeout="5s")
    attempt = timed.tasks[0].attempts[-1]
    assert attempt.state == pb.ATTEMPT_TIMED_OUT, attempt
    # The server runs on one core (local[1]): the next task runs only if both UDFs were interrupted.
    after = _run(client, f"{TASKS}:count", args=["3"])
    assert after.state == pb.RUN_SUCCEEDED, after.tasks[0].attempts[-1].error


RELATIVE_WRITE = """\
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
spark.range(2).write.mode("overwrite").parquet("rel_out")
spark.range(2).write.mode("overwrite").parquet("rel_out")
"""


def test_a_worker_with_connect_url_uses_that_server_and_offers_no_slot_while_it_does_not_answer(
        connect: tuple[Cluster, Client], tmp_path: Path) -> None:
    cluster, client = connect
    url = re.findall(r"Spark Connect server ready at (\S+)", cluster.workers["c"].log())[-1]
    # A --spark-master beside --connect-url is not the connect runner's engine (the server's cluster is):
    # that nothing answers there must not make the worker degraded.
    unused = f"spark://127.0.0.1:{free_port()}"
    cluster.start_worker("e", slots=1, runner="connect", group="external",
                         extra=("--connect-url", url, "--spark-master", unused))
    silent = f"sc://127.0.0.1:{free_port()}"
    cluster.start_worker("s", slots=1, runner="connect", group="silent", extra=("--connect-url", silent))
    try:
        cluster.wait_workers("e")
        run = _run(client, f"{TASKS}:count", args=["5"], group="external")
        assert run.state == pb.RUN_SUCCEEDED and run.tasks[0].worker == "e", run
        # Another server may not see the attempt's files: its relative paths are left to it, and said so.
        program = tmp_path / "relative.py"
        program.write_text(RELATIVE_WRITE)
        run = _run(client, str(program), group="external")
        log = b"".join(client.logs(run.tasks[0].id)).decode()
        assert run.state == pb.RUN_SUCCEEDED, log[-3000:]
        assert log.count(f"relative paths given to Spark ('rel_out') resolve on the Spark Connect server, not in "
                         f"this attempt's working directory (the Spark Connect server {url} is not the worker's "
                         "own)") == 1, log[-3000:]
        assert unused not in cluster.workers["e"].log()
        info = wait_for(lambda: next((w for w in client.workers() if w.id == "s" and w.alive
                                      and w.readiness == pb.READINESS_DEGRADED), None), 60,
                        "the worker whose server does not answer to say so")
        assert f"Spark Connect server {silent} does not answer" in info.readiness_reason
    finally:
        for worker_id in ("e", "s"):
            stop_process(cluster.workers.pop(worker_id).process, signal.SIGINT)


SDP_SPEC = """name: sales
storage: file://{storage}
libraries:
  - glob:
      include: transformations/**
"""
SDP_PY = """from pyspark import pipelines as dp


@dp.materialized_view
def orders():
    return spark.range(10).withColumnRenamed("id", "amount")


@dp.materialized_view
def big_orders():
    return spark.read.table("orders").where("amount > 5")
"""
SDP_SQL = "CREATE MATERIALIZED VIEW revenue AS SELECT sum(amount) AS total FROM orders\n"


def test_a_spark_declarative_pipeline_runs_as_a_step_with_each_dataset_s_outcome(
        connect: tuple[Cluster, Client], tmp_path: Path) -> None:
    _, client = connect
    project = tmp_path / "sdp"
    (project / "transformations").mkdir(parents=True)
    (project / "spark-pipeline.yml").write_text(SDP_SPEC.format(storage=tmp_path / "storage"))
    (project / "transformations" / "orders.py").write_text(SDP_PY)
    (project / "transformations" / "revenue.sql").write_text(SDP_SQL)
    p = Pipeline("sdp-it", base_dir=tmp_path)
    marts = p.sdp_step("marts", "sdp/spark-pipeline.yml")
    p.step("after", f"{TASKS}:upstream_echo", after=[marts])
    spec = p.to_spec()
    job = client.submit_spec(spec).job
    run, timed_out = client.wait(client.trigger(job.id).id, timeout=300)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    steps = {s.name: s for s in run.steps}
    marts_run = client.run(steps["marts"].run_id)
    outcome = json.loads(marts_run.tasks[0].result_json)
    assert outcome["run"] == "COMPLETED"
    assert {name.rsplit(".", 1)[-1]: state for name, state in outcome["flows"].items()} == {
        "orders": "COMPLETED", "big_orders": "COMPLETED", "revenue": "COMPLETED"}
    log = b"".join(client.logs(marts_run.tasks[0].id)).decode()
    assert "Flow" in log and "Run is COMPLETED" in log
    assert "did not create" not in log, log[-3000:]  # a flow reading the pipeline's own dataset by name
    after = json.loads(client.run(steps["after"].run_id).tasks[0].result_json)
    assert after == {"marts": outcome}


SDP_WARM_PY = """from pyspark import pipelines as dp


@dp.materialized_view
def warm_rows():
    return spark.range(3)
"""
# A flow that marks each row it reaches (one a second, on the server's one core) and one downstream of it.
SDP_SLOW_PY = """import os
import time

from pyspark import pipelines as dp
from pyspark.sql.functions import udf
from pyspark.sql.types import LongType

MARKS = {marks!r}


def mark(x, where=MARKS, pause=1.0):
    os.makedirs(where, exist_ok=True)
    open(os.path.join(where, str(x)), "w").close()
    time.sleep(pause)
    return x


@dp.materialized_view
def slow_rows():
    return spark.range(0, 600, 1, 1).select(udf(mark, LongType())("id").alias("id"))


@dp.materialized_view
def after_slow():
    return spark.read.table("slow_rows").select(udf(lambda x: mark(x, MARKS + "-after", 0), LongType())("id"))
"""


def _sdp_project(root: Path, name: str, transformation: str) -> Pipeline:
    project = root / name
    (project / "transformations").mkdir(parents=True)
    (project / "spark-pipeline.yml").write_text(SDP_SPEC.format(storage=root / f"{name}-storage"))
    (project / "transformations" / f"{name}.py").write_text(transformation)
    p = Pipeline(f"sdp-{name}", base_dir=root)
    p.sdp_step(name, f"{name}/spark-pipeline.yml")
    return p


def _settled(directory: Path, quiet_s: float, timeout: float) -> int:
    """The number of files in ``directory`` once it has not changed for ``quiet_s``."""
    seen = {"count": -1, "since": time.monotonic()}

    def quiet() -> int | None:
        count = len(list(directory.glob("*")))
        if count != seen["count"]:
            seen.update(count=count, since=time.monotonic())
        return count if time.monotonic() - seen["since"] >= quiet_s else None

    return wait_for(quiet, timeout, f"{directory} to stop growing")


def test_cancelling_a_declarative_pipeline_step_stops_its_flows_on_the_server(
        connect: tuple[Cluster, Client], tmp_path: Path) -> None:
    """Spark runs flows in a thread pool shared by the pipeline runs of a server, whose threads keep the job
    tags of the run that made them: right after another run, a flow carries that run's tags, and only the
    cancel of every Spark job of the attempt's session (worker/connect_plugin.py) stops it."""
    _, client = connect
    warm = client.submit_spec(_sdp_project(tmp_path, "warm", SDP_WARM_PY).to_spec()).job
    run, timed_out = client.wait(client.trigger(warm.id).id, timeout=300)
    assert not timed_out and run.state == pb.RUN_SUCCEEDED, run
    marks = tmp_path / "marks"
    slow = client.submit_spec(_sdp_project(tmp_path, "slow", SDP_SLOW_PY.format(marks=str(marks))).to_spec()).job
    run_id = client.trigger(slow.id).id
    wait_for(lambda: len(list(marks.glob("*"))) >= 3, 300, "the flow to reach its third row")
    client.cancel(run_id)
    run, timed_out = client.wait(run_id, timeout=120)
    assert not timed_out and run.state == pb.RUN_CANCELLED, run
    reached = _settled(marks, quiet_s=8, timeout=90)
    assert reached < 60, f"the flow went on to row {reached} after the cancel"
    assert not (tmp_path / "marks-after").exists()  # the flow downstream of it never started
    after = _run(client, f"{TASKS}:count", args=["3"])  # the server's one core is free again
    assert after.state == pb.RUN_SUCCEEDED, after.tasks[0].attempts[-1].error


def test_a_killed_server_is_restarted_and_tasks_run_again(connect: tuple[Cluster, Client]) -> None:
    cluster, client = connect
    old = _server_pid(cluster, "c")
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: _readiness(client, "c") == pb.READINESS_DEGRADED, 30,
             "the worker to offer no slot while its server is down")
    wait_for(lambda: _readiness(client, "c") == pb.READINESS_READY, 180, "the restarted server to be ready")
    assert _server_pid(cluster, "c") != old
    run = _run(client, f"{TASKS}:count", args=["4"])
    assert run.state == pb.RUN_SUCCEEDED, run.tasks[0].attempts[-1].error


def test_the_server_dies_with_its_worker(connect: tuple[Cluster, Client]) -> None:
    cluster, _ = connect
    server = psutil.Process(_server_pid(cluster, "c"))
    cluster.kill_worker("c")  # SIGKILL: the worker cannot stop it; its parent-death signal does
    wait_for(lambda: not server.is_running() or server.status() == psutil.STATUS_ZOMBIE, 30,
             "the Spark Connect server to die with its worker")


async def test_a_server_that_cannot_start_is_reported_with_its_backoff(tmp_path: Path) -> None:
    """(Starting again after the backoff is the killed-server test's part.)"""
    reasons: list[str] = []
    server = ConnectServer("", "no-such-master", {}, tmp_path, Children(tmp_path), lambda: reasons.append(server.reason))
    server.start()
    try:
        deadline = time.monotonic() + 120
        while not server.failed and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not server.ready and server.failed, reasons
    finally:
        await server.close()
    assert reasons[-1] == "Spark Connect server exited with exit code 1 before accepting connections; restarting in 2s"
    assert not list((tmp_path / "children").glob("*.json"))  # the failed start was ended and forgotten

