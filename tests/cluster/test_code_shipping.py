"""Acceptance test of code shipping: a spark-submit style project submitted with ``--bundle``, ``--py-files``
and ``--files`` runs on a worker host that cannot see the directory it was submitted from."""

from __future__ import annotations

import json
import textwrap
import zipfile

import pytest

from netcluster import NetCluster, results
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

JOB = '''\
"""A spark-submit style program: no main(spark, ctx), its argument in sys.argv, its own session."""
import sys

from pyspark.sql import SparkSession

import helpers            # a module of the bundle
from depmod import VALUE  # a module of deps.zip (--py-files)

if len(sys.argv) != 2:
    raise SystemExit(f"usage: job.py TAG (got {sys.argv[1:]!r})")
spark = SparkSession.builder.appName("shipped-job").getOrCreate()
with open("data/input.csv") as f:  # shipped with --files, read by its relative path
    rows = len(f.read().splitlines()) - 1
total = spark.read.csv("data/input.csv", header=True, inferSchema=True).agg({"n": "sum"}).collect()[0][0]
print(f"RESULT {helpers.label(sys.argv[1])} {VALUE} rows={rows} total={total}", flush=True)
spark.stop()
'''
EXPECTED_LINE = "RESULT helper[X] zipped-42 rows=4 total=10"


@pytest.mark.spark
@pytest.mark.acceptance
def test_shipped_job_runs_on_a_worker_without_the_files(net_cluster: NetCluster) -> None:
    cluster = net_cluster
    project = cluster.submit_dir
    (project / "job.py").write_text(JOB)
    (project / "helpers.py").write_text(textwrap.dedent('''\
        def label(tag):
            return f"helper[{tag}]"
        '''))
    (project / "data").mkdir()
    (project / "data" / "input.csv").write_text("n\n1\n2\n3\n4\n")
    with zipfile.ZipFile(project / "deps.zip", "w") as deps:  # depmod exists only inside the zip
        deps.writestr("depmod/__init__.py", 'VALUE = "zipped-42"\n')

    # The workers really do not have the project: its files do not exist for them.
    client = cluster.client()
    job = client.submit("cluster_jobs:path_exists", args=[str(project / "job.py")], base_dir=project,
                        parallelism=2)
    run, _ = client.wait(first_run_id(job), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED, run
    assert [r["exists"] for r in results(run)] == [False, False]

    submit = cluster.cli("submit", "--bundle", ".", "--py-files", "deps.zip", "--files", "data/input.csv",
                         "--wait", "--json", "job.py", "X")
    assert submit.returncode == 0, f"exit {submit.returncode}\n{submit.stdout}\n{submit.stderr}"
    shipped = json.loads(submit.stdout)
    assert shipped["state"] == "SUCCEEDED", shipped
    (task,) = shipped["tasks"]
    assert task["worker"] in ("w1", "w2")
    logs = cluster.cli("logs", task["id"])
    assert logs.returncode == 0, logs.stderr
    assert EXPECTED_LINE in logs.stdout, logs.stdout
