"""Programs written for spark-submit run unchanged under both runners, with the result and exit status
spark-submit gives them: each is run by a real `spark-submit` and through Sparkyard, and compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from harness import EXAMPLES, TEST_DRIVER_CONF, Cluster, RedisServer
from sparkyard.client import Client, first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.spark_home import spark_submit_path

PROGRAMS = EXAMPLES / "programs"
pytestmark = pytest.mark.spark

# program → (args after the output path, expected exit code)
CASES = {
    "wordcount_report.py": (["6"], 0),
    "own_context_exit.py": (["3"], 3),
    "crash.py": ([], 1),
}


def _spark_submit(program: str, out: Path) -> int:
    args, _ = CASES[program]
    done = subprocess.run([spark_submit_path(), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", TEST_DRIVER_CONF, program, str(out), *args], cwd=PROGRAMS, capture_output=True, timeout=300,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    return done.returncode


@pytest.fixture(scope="module")
def by_spark_submit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, object]]:
    """Exit code and output of each program under plain spark-submit (two at a time)."""
    out = tmp_path_factory.mktemp("spark-submit")
    with ThreadPoolExecutor(2) as pool:
        codes = dict(zip(CASES, pool.map(lambda p: _spark_submit(p, out / f"{p}.json"), CASES)))
    return {p: (codes[p], json.loads((out / f"{p}.json").read_text())) for p in CASES}


@pytest.fixture(scope="module")
def cluster(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Client]]:
    """One worker with one slot: every program runs in the same warm driver, one after another."""
    cluster = Cluster(redis_server.url, tmp_path_factory.mktemp("programs"), namespace="programs")
    try:
        yield cluster, cluster.start_with_worker("w", 1)
    finally:
        cluster.stop()


@pytest.mark.parametrize("runner", ["session", "submit"])
def test_spark_submit_programs_give_the_same_results_and_exit_status(
        runner: str, by_spark_submit: dict[str, tuple[int, object]], cluster: tuple[Cluster, Client],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = cluster
    monkeypatch.chdir(PROGRAMS)  # where the user submits from: relative paths resolve from here
    jobs = {p: client.submit(p, args=[str(tmp_path / f"{p}.json"), *CASES[p][0]], runner=runner) for p in CASES}
    for program, job in jobs.items():
        run, _ = client.wait(first_run_id(job), timeout=300)
        code, expected = by_spark_submit[program]
        assert code == CASES[program][1], f"{program} under spark-submit exited {code}"
        assert (run.state == pb.RUN_SUCCEEDED) == (code == 0), (program, run)
        assert json.loads((tmp_path / f"{program}.json").read_text()) == expected, program
        attempt = run.tasks[0].attempts[0]
        if code not in (0, 1):
            assert f"exit code {code}" in attempt.error, attempt.error
        elif code == 1:
            assert "ValueError: bad input row 3" in attempt.error, attempt.error
    log = b"".join(client.logs(run_id_task(client, jobs["wordcount_report.py"]))).decode()
    assert "report: 2 regions over 6" in log and "report: to stderr" in log


def run_id_task(client: Client, job: pb.Job) -> str:
    return client.run(first_run_id(job)).tasks[0].id


def test_the_next_task_after_a_program_that_stopped_spark_runs_normally(cluster: tuple[Cluster, Client],
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    _, client = cluster
    monkeypatch.chdir(PROGRAMS)
    stopped = client.submit("wordcount_report.py", args=[str(tmp_path / "out.json"), "0"])
    assert client.wait(first_run_id(stopped), timeout=120)[0].state == pb.RUN_SUCCEEDED
    after = client.submit(f"{EXAMPLES / 'tasks.py'}:count", args=["5"])
    run, _ = client.wait(first_run_id(after), timeout=120)
    assert run.state == pb.RUN_SUCCEEDED and json.loads(run.tasks[0].result_json)["count"] == 5
