"""Per-job Spark resources (common/resources.py): spark-submit's names on the CLI and the client, checked
where the spec is checked, handed to spark-submit by the submit runner, and said — not dropped — by the
session runner, whose warm drivers cannot apply them. Code shipped to executors: the bundle's archive."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkyard import errors, resources
from sparkyard.cli.main import build_parser
from sparkyard.options import JobOptions, build_spec
from sparkyard.spec import SpecError, normalize
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.children import Children
from sparkyard.worker.runner.base import AttemptRun
from sparkyard.worker.runner.submit import SubmitRunner
from sparkyard.worker.workspace import workspace

DIGEST = "ab" * 32


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "job.py").write_text("def main(spark, ctx):\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_cli_flags_and_the_client_options_make_the_same_resources(project: Path) -> None:
    args = build_parser().parse_args(["submit", "job.py:main", "--driver-memory", "2G", "--executor-memory",
                                      "512m", "--executor-cores", "2", "--num-executors", "3"])
    from_cli = JobOptions.from_namespace(args).to_spec(args.entrypoint)[0]
    from_client = build_spec("job.py:main", driver_memory="2g", executor_memory="512m", executor_cores=2,
                             num_executors=3)
    for spec in (from_cli, from_client):
        resources_of = (spec.driver_memory, spec.executor_memory, spec.executor_cores, spec.num_executors)
        assert resources_of == ("2g", "512m", 2, 3)
    assert normalize(from_cli, require_absolute_path=False).executor_memory == "512m"


@pytest.mark.parametrize("options, named", [
    ({"driver_memory": "2 GB"}, "driver_memory"),
    ({"executor_memory": "1.5g"}, "executor_memory"),
    ({"executor_memory": "lots"}, "executor_memory"),
    ({"executor_cores": -1}, "executor_cores"),
    ({"num_executors": "two"}, "num_executors"),
])
def test_a_bad_resource_is_refused_by_the_client_naming_it(project: Path, options: dict[str, object],
                                                            named: str) -> None:
    with pytest.raises(errors.InvalidArgument, match=f"^{named}: "):
        build_spec("job.py:main", **options)


@pytest.mark.parametrize("field, value, fragment", [
    ("driver_memory", "2gig", "not a size like 512m"),
    ("executor_memory", "9" * 30, "not a size like 512m"),
    ("executor_cores", -2, "outside 0..1024"),
    ("num_executors", 10**6, "outside 0..100000"),
])
def test_the_master_refuses_a_bad_resource_naming_the_field(field: str, value: object, fragment: str) -> None:
    spec = pb.JobSpec(entrypoint="/jobs/job.py:main")
    setattr(spec, field, value)
    with pytest.raises(SpecError, match=fragment) as caught:
        normalize(spec)
    assert caught.value.field == field


def test_the_submit_runner_hands_resources_and_the_bundle_archive_to_spark_submit(tmp_path: Path) -> None:
    spec = pb.JobSpec(entrypoint="jobs/job.py:main", py_files=["deps.zip"], driver_memory="1g",
                      executor_memory="2g", executor_cores=2, num_executors=4)
    root = tmp_path / "bundles" / DIGEST
    (root / "jobs").mkdir(parents=True)
    attempt = AttemptRun(pb.TaskAssignment(task_id="t1", attempt=1, spec=spec), "w1", str(tmp_path / "log"),
                         str(tmp_path / "attempts"), 1024, workspace(spec, root, tmp_path / "scratch"))
    cmd = SubmitRunner("spark://m:7077", 1, Children(tmp_path)).command(attempt, tmp_path, Path("t"), Path("r"))
    flags = dict(zip(cmd, cmd[1:]))
    assert (flags["--driver-memory"], flags["--executor-memory"], flags["--executor-cores"],
            flags["--num-executors"]) == ("1g", "2g", "2", "4")
    assert flags["--master"] == "spark://m:7077"
    assert flags["--py-files"] == f"{tmp_path}/bundles/{DIGEST}.zip,{root}/deps.zip"


def test_executors_import_from_the_places_of_the_bundle_on_the_attempts_sys_path(tmp_path: Path) -> None:
    spec = pb.JobSpec(entrypoint="jobs/etl.py:main", py_files=["lib/util.py", "deps.zip"])
    ws = workspace(spec, tmp_path / DIGEST, tmp_path / "scratch")
    assert ws.archive == str(tmp_path / f"{DIGEST}.zip")
    assert ws.executor_path == (f"{DIGEST}.zip/jobs", f"{DIGEST}.zip", f"{DIGEST}.zip/lib")
    assert workspace(pb.JobSpec(entrypoint="/jobs/etl.py:main"), None, tmp_path).executor_path == ()


def test_only_the_connect_runner_says_which_resources_it_cannot_honour_and_why() -> None:
    assert resources.submit_notice(pb.JobSpec(runner=pb.RUNNER_SESSION, driver_memory="4g", executor_cores=2)) == ""
    assert resources.submit_notice(pb.JobSpec(runner=pb.RUNNER_SUBMIT, driver_memory="4g")) == ""
    assert resources.shared_app_notice(pb.JobSpec(runner=pb.RUNNER_CONNECT), "connect") == ""
    connect = resources.submit_notice(pb.JobSpec(runner=pb.RUNNER_CONNECT, driver_memory="4g"))
    assert connect.startswith("the connect runner cannot honour --driver-memory 4g (the server's JVM is already running)")


def test_a_jobs_sizes_become_the_conf_spark_submit_gives_the_cluster_manager() -> None:
    spec = pb.JobSpec(conf={"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "3"}, driver_memory="2g",
                      executor_memory="4g", executor_cores=2, num_executors=5)
    sizes = {"spark.driver.memory": "2g", "spark.executor.memory": "4g", "spark.executor.cores": "2"}
    assert resources.spark_conf(spec, "yarn") == {"spark.sql.shuffle.partitions": "3", **sizes,
                                                  "spark.executor.instances": "5"}
    assert resources.spark_conf(spec, "spark://m:7077") == {"spark.sql.shuffle.partitions": "3", **sizes}
    # local mode has no executors of their own: spark-submit passes the driver's memory alone
    assert resources.spark_conf(spec, "local[1]") == {"spark.sql.shuffle.partitions": "3", "spark.driver.memory": "2g"}
    assert resources.spark_conf(pb.JobSpec(conf={"a": "b"}), "yarn") == {"a": "b"}
