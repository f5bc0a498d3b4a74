"""A warm driver behaves like a fresh spark-submit: the programs of tests/jobs/fidelity, each run by a real
`spark-submit`, by the session runner and by the submit runner from a copy of the same directory, with
the command line a spark-submit user would type (`sparkyard submit [options] prog.py args…`), must leave
the same results and exit codes. The session runs go one after another through one warm driver, so each
program also runs on whatever the previous one left behind (tables, a database, a global view, cache, a
job group, a running stream, set conf); `clean_slate.py` after `warehouse.py` checks it saw none of it.
`static_conf.py` is given --conf that a warm driver's JVM cannot take: it must run on a fresh driver.

Cold JVMs are most of this module's cost (each ~10 CPU-seconds): one spark-submit per program, one per
submit-runner case, the worker's driver, the replacement after `added_file.py` and the fresh driver of
`static_conf.py`. So the programs each check several things that cannot disturb one another, and the
spark-submit runs go on beside the runners' (two at a time) instead of before them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator

import pytest

from harness import EXAMPLES, TEST_DRIVER_CONF, Cluster, RedisServer, cluster_with_worker
from sparkyard.worker.runner.submit import spark_submit_path

PROGRAMS = EXAMPLES / "fidelity"
# The setup runs every program several ways, on 2 shared cores: ~1.5-2.5 min, up to ~5 under heavy load.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

STATIC_CONF = ["--conf", "spark.sql.globalTempDatabase=job_temp", "--conf", "spark.myapp.mode=on"]
# program → (spark-submit options before it, its arguments besides --out, expected exit code); in the order
# the warm driver runs them.
CASES: dict[str, tuple[list[str], list[str], int]] = {
    "warehouse.py": ([], [], 0),
    "clean_slate.py": ([], [], 0),
    "streaming.py": ([], [], 0),
    "clean_slate.py#after-stream": ([], [], 0),
    "builder_conf.py": ([], [], 0),
    "clean_slate.py#after-builder-conf": ([], [], 0),
    "flags.py": ([], ["--date", "2026-11-01", "--limit", "5", "data/part-1.txt", "data/part-2.txt"], 3),
    "static_conf.py": (STATIC_CONF, [], 0),
    "context_only.py": ([], [], 1),
    "added_file.py": ([], [], 0),
    "clean_slate.py#after-added-file": ([], [], 0),
}
# The submit runner is spark-submit itself (one per attempt, ~10 CPU-seconds each): it runs the programs
# whose outcome depends on what it hands spark-submit (working directory, arguments, exit code), to keep
# this suite's cost low.
SUBMIT_RUNNER_CASES = ("streaming.py", "flags.py")
# spark-submit runs each program once (a fresh JVM: a repeated case is the same run).
BASELINE = tuple(c for c in CASES if "#" not in c)


def _program(case: str) -> str:
    return case.split("#")[0]


def _copy(root: Path, name: str) -> Path:
    target = root / name
    shutil.copytree(PROGRAMS, target)
    return target


def _spark_submit(where: Path, case: str, out: Path) -> int:
    options, args, _ = CASES[case]
    done = subprocess.run([spark_submit_path(), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           "--conf", TEST_DRIVER_CONF, *options, _program(case), "--out", str(out), *args], cwd=where,
                          capture_output=True, timeout=300, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    return done.returncode


def _sparkyard(cluster: Cluster, where: Path, runner: str, case: str, out: Path) -> tuple[int, str]:
    """`sparkyard submit --runner R --wait prog.py --out OUT args…` from ``where``: the exit code, and the
    session driver that ran it (from the first line of its log)."""
    options, args, _ = CASES[case]
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address, "submit",
                           "--runner", runner, "--wait", "--json", *options, _program(case), "--out", str(out), *args],
                          cwd=where, capture_output=True, text=True, timeout=300)
    run = json.loads(done.stdout)
    attempt = run["tasks"][0]["attempts"][-1]
    process = ""
    if runner == "session":
        header = next(cluster.client().logs(run["tasks"][0]["id"])).decode().splitlines()[0]
        process = header.split(", cwd ")[0].split(" on worker ")[1]
    if run["state"] == "SUCCEEDED":
        return 0, process
    error = attempt.get("error", "")
    return int(error.rsplit("exit code ", 1)[1].split()[0]) if "exit code " in error else 1, process


def _results(out: Path, cases: tuple[str, ...] = tuple(CASES)) -> dict[str, object]:
    return {case: json.loads((out / f"{case}.json").read_text()) if (out / f"{case}.json").exists() else None
            for case in cases}


@pytest.fixture(scope="module")
def runs(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple]]:
    """Exit codes and outputs per way of running: spark-submit (two at a time, from the start), and beside
    it the session runner (one slot: one warm driver, in order), then the submit runner."""
    root = tmp_path_factory.mktemp("fidelity")
    results: dict[str, tuple] = {}
    baseline_dir, baseline_out = _copy(root, "spark-submit"), root / "out-spark-submit"
    baseline_out.mkdir()
    with ThreadPoolExecutor(2) as pool:
        codes = pool.map(lambda c: _spark_submit(baseline_dir, c, baseline_out / f"{c}.json"), BASELINE)
        with cluster_with_worker(redis_server.url, root / "cluster", "w", 1, namespace="fidelity") as (cluster, _):
            for runner, cases in (("session", tuple(CASES)), ("submit", SUBMIT_RUNNER_CASES)):
                where, out = _copy(root, runner), root / f"out-{runner}"
                out.mkdir()
                done = [_sparkyard(cluster, where, runner, c, out / f"{c}.json") for c in cases]
                results[runner] = ({c: code for c, (code, _) in zip(cases, done)}, _results(out, cases))
                results[f"{runner} processes"] = dict(zip(cases, (process for _, process in done)))
            baseline, once = dict(zip(BASELINE, codes)), _results(baseline_out, BASELINE)
            results["spark-submit"] = ({c: baseline[_program(c)] for c in CASES}, {c: once[_program(c)] for c in CASES})
            yield results


def test_spark_submit_itself_gives_what_the_programs_expect(runs: dict[str, tuple]) -> None:
    codes, outputs = runs["spark-submit"]
    assert codes == {case: code for case, (_, _, code) in CASES.items()}
    assert outputs["warehouse.py"] == {"count": 4, "events_dir": True, "orders_dir": True, "tables": ["events", "local_view"],
                                       "warehouse_is_here": True}
    assert outputs["clean_slate.py"]["tables"] == [] and outputs["clean_slate.py"]["databases"] == ["default"]
    assert outputs["streaming.py"] == {"checkpoint_here": True, "rows": 5, "sink_metadata_here": True}
    assert outputs["static_conf.py"] == {"global_database": "job_temp", "rows": 2, "mode": "on"}
    assert outputs["flags.py"]["argv"] == ["--out", *CASES["flags.py"][1]] and outputs["flags.py"]["input_lines"] > 0
    assert outputs["clean_slate.py"]["ansi"] == "true" and outputs["clean_slate.py"]["checkpoint_dir"] is None


@pytest.mark.parametrize("runner", ["session", "submit"])
def test_each_runner_gives_what_spark_submit_gives(runs: dict[str, tuple], runner: str) -> None:
    expected_codes, expected = runs["spark-submit"]
    codes, outputs = runs[runner]
    for case in codes:
        assert (case, outputs[case]) == (case, expected[case])
        assert (case, codes[case]) == (case, expected_codes[case])


def test_one_warm_driver_ran_the_programs_but_the_static_conf_one_and_retired_after_one_added_a_file(
        runs: dict[str, tuple]) -> None:
    processes = runs["session processes"]
    before = {processes[c] for c in CASES if c not in ("clean_slate.py#after-added-file", "static_conf.py")}
    assert len(before) == 1 and "warm driver" in next(iter(before)), processes
    assert "fresh driver" in processes["static_conf.py"], processes
    assert processes["clean_slate.py#after-added-file"] not in before, processes
