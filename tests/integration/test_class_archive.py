"""A worker makes the class archive of its Spark JVMs in the background (worker/class_archive.py), and the
drivers it starts afterwards map it — a warm driver of the pool, a fresh one started with a job's own
``spark.driver.extraJavaOptions`` (which it keeps), and a submit-runner attempt's ``spark-submit``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness import EXAMPLES, Cluster, RedisServer, wait_for
from sparkyard.client import Client, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

TASKS = EXAMPLES / "tasks.py"

pytestmark = pytest.mark.spark


def _run(client: Client, archive_dir: Path, **options: object) -> dict[str, Any]:
    """The task's view of its driver's JVM; ``mapped``: the archives of ``archive_dir`` it maps (not the JDK's)."""
    run, _ = client.wait(first_run_id(client.submit(f"{TASKS}:jvm_class_archive", **options)), timeout=300)
    assert run.state == pb.RUN_SUCCEEDED, run.tasks[0].attempts[-1].error
    result: dict[str, Any] = json.loads(run.tasks[0].result_json)
    result["mapped"] = [m for m in result["mapped"] if m.startswith(f"{archive_dir}/")]
    result["log"] = b"".join(client.logs(run.tasks[0].id)).decode()
    return result


def test_a_worker_makes_the_archive_and_its_next_drivers_map_it(redis_server: RedisServer, tmp_path: Path) -> None:
    archive_dir = tmp_path / "archive"
    cluster = Cluster(redis_server.url, tmp_path / "cluster", namespace="cds", class_archive_dir=str(archive_dir))
    try:
        cluster.start_master()
        # One attempt per driver: each attempt after the first runs on a driver started after it.
        cluster.start_worker("w", slots=1, extra=("--driver-max-tasks", "1"))
        cluster.wait_workers("w")
        client = cluster.client()
        first = _run(client, archive_dir)  # on the driver warmed before the archive was made: none mapped
        assert first["mapped"] == [], first
        archives = wait_for(lambda: list(archive_dir.glob("*.jsa")), 600, "the worker to make its class archive")
        assert len(archives) == 1 and archives[0].stat().st_size > 50 * 2**20
        assert not list(archive_dir.glob("*.tmp"))
        archive = str(archives[0])
        # The pool's replacement driver warmed before the archive was there, perhaps: one more attempt ends it.
        second = _run(client, archive_dir)
        pooled = second if second["mapped"] else _run(client, archive_dir)
        assert pooled["mapped"] == [archive], pooled
        assert "class archive" in cluster.workers["w"].log() and "is not used" not in cluster.workers["w"].log()
        # A job's own Java options start a fresh driver: they are kept, and the archive is given too.
        fresh = _run(client, archive_dir, conf={"spark.driver.extraJavaOptions": "-Dsparkyard.mine=1"})
        assert fresh["mine"] == "1" and fresh["mapped"] == [archive], fresh
        assert "-Dsparkyard.mine=1" in str(fresh["options"]) and f"SharedArchiveFile={archive}" in str(fresh["options"])
        # Started with the job's options (the worker's added to them): the log says so, and not that they
        # "cannot change in a warm driver".
        assert "this driver was started for this attempt" in fresh["log"] and "cannot change" not in fresh["log"], \
            fresh["log"]
        # A spark-submit attempt (the submit runner) starts from it as well, with the job's options.
        submitted = _run(client, archive_dir, runner="submit", conf={"spark.driver.extraJavaOptions": "-Dsparkyard.mine=2"})
        assert submitted["mine"] == "2" and submitted["mapped"] == [archive], submitted
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()
