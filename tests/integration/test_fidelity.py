"""A warm driver behaves like a fresh spark-submit: the programs of tests/jobs/fidelity, each run by the
session runner and by the submit runner from a copy of the same directory, with the command line a
spark-submit user would type (`sparkyard submit [options] prog.py args…`), must leave the results and exit
codes a real `spark-submit` gives, recorded by tests/fidelity_expected.py (which the record must match:
the Spark version, the programs' digest, the cases). The session runs go one after another through one
warm driver, so each program also runs on whatever the previous one left behind (tables, a database, a
global view, cache, a job group, a running stream, set conf, Python's logging configured, an atexit
function);
`clean_slate.py` after them checks it saw none of it. `static_conf.py` is given --conf and `sizes.py`
spark-submit's sizes that a warm driver's JVM cannot take: each must run on a fresh driver started with
them. `leftovers.py` leaves what no reset can take back (an added file, a Hadoop configuration key, a JVM
system property, a daemon thread): the driver must retire after it, saying why.

Cold JVMs are most of this module's cost (each ~10 CPU-seconds): the worker's driver, the fresh drivers of
`static_conf.py` and `sizes.py`, the replacement after `leftovers.py`, one spark-submit per submit-runner
case. The spark-submit references are recorded, not run here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from fidelity_expected import CASES, PROGRAMS, load, program
from harness import Cluster, RedisServer, cluster_with_worker

# The setup runs every program through one warm driver and two through the submit runner, on 2 shared
# cores: ~1-2 min, up to ~5 under heavy load.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

# The submit runner is spark-submit itself (one per attempt, ~10 CPU-seconds each): it runs the programs
# whose outcome depends on what it hands spark-submit (working directory, arguments, exit code), to keep
# this suite's cost low.
SUBMIT_RUNNER_CASES = ("streaming.py", "flags.py")


def _copy(root: Path, name: str) -> Path:
    target = root / name
    shutil.copytree(PROGRAMS, target)
    return target


def _sparkyard(cluster: Cluster, where: Path, runner: str, case: str, out: Path) -> tuple[int, str]:
    """`sparkyard submit --runner R --wait prog.py --out OUT args…` from ``where``: the exit code, and the
    session driver that ran it (from the first line of its log)."""
    options, args, _ = CASES[case]
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address, "submit",
                           "--runner", runner, "--wait", "--json", *options, program(case), "--out", str(out), *args],
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
def recorded() -> dict[str, tuple[int, object]]:
    """What spark-submit gives per case: exit code and output (tests/fidelity_expected.json)."""
    made = load()
    return {case: (c["exit_code"], c["output"]) for case, c in made["cases"].items()}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def runs(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    """Exit codes, outputs and driver processes per runner: the session runner (one slot: one warm driver,
    in order), then the submit runner; and the worker's log."""
    root = tmp_path_factory.mktemp("fidelity")
    results: dict[str, dict] = {}
    with cluster_with_worker(redis_server.url, root / "cluster", "w", 1, namespace="fidelity") as (cluster, _):
        for runner, cases in (("session", tuple(CASES)), ("submit", SUBMIT_RUNNER_CASES)):
            where, out = _copy(root, runner), root / f"out-{runner}"
            out.mkdir()
            done = [_sparkyard(cluster, where, runner, c, out / f"{c}.json") for c in cases]
            outputs = _results(out, cases)
            results[runner] = {c: (code, outputs[c]) for c, (code, _) in zip(cases, done)}
            results[f"{runner} processes"] = dict(zip(cases, (process for _, process in done)))
        results["worker log"] = {"text": cluster.workers["w"].log()}
        yield results


def test_spark_submit_itself_gives_what_the_programs_expect(recorded: dict[str, tuple[int, object]]) -> None:
    codes = {case: code for case, (code, _) in recorded.items()}
    outputs = {case: output for case, (_, output) in recorded.items()}
    assert codes == {case: code for case, (_, _, code) in CASES.items()}
    assert outputs["warehouse.py"] == {"count": 4, "events_dir": True, "orders_dir": True, "tables": ["events", "local_view"],
                                       "warehouse_is_here": True}
    assert outputs["clean_slate.py"]["tables"] == [] and outputs["clean_slate.py"]["databases"] == ["default"]
    assert outputs["streaming.py"] == {"checkpoint_here": True, "rows": 5, "sink_metadata_here": True}
    assert outputs["static_conf.py"] == {"global_database": "job_temp", "rows": 2, "mode": "on"}
    assert outputs["flags.py"]["argv"] == ["--out", *CASES["flags.py"][1]] and outputs["flags.py"]["input_lines"] > 0
    assert outputs["flags.py"]["exit_hook_in_program_dir"] is True
    assert outputs["clean_slate.py"]["ansi"] == "true" and outputs["clean_slate.py"]["checkpoint_dir"] is None
    assert outputs["clean_slate.py"]["root_logger"] == [0, 30, 0] and outputs["builder_conf.py"]["root_at_start"] == [0, 30]
    assert outputs["sizes.py"]["spark.driver.memory"] == "700m" and outputs["sizes.py"]["heap_as_asked"] is True
    assert outputs["leftovers.py"]["in_program_dir"] is True and outputs["leftovers.py"]["job_group"] == "finisher"


@pytest.mark.parametrize("runner", ["session", "submit"])
def test_each_runner_gives_what_spark_submit_gives(runs: dict[str, dict], recorded: dict[str, tuple[int, object]],
                                                   runner: str) -> None:
    for case, (code, output) in runs[runner].items():
        assert (case, output) == (case, recorded[case][1])
        assert (case, code) == (case, recorded[case][0])


def test_one_warm_driver_ran_the_programs_but_those_needing_their_own_jvm_and_retired_after_leftovers(
        runs: dict[str, dict]) -> None:
    processes = runs["session processes"]
    own_jvm = ("static_conf.py", "sizes.py")
    before = {processes[c] for c in CASES if c not in ("clean_slate.py#after-leftovers", *own_jvm)}
    assert len(before) == 1 and "warm driver" in next(iter(before)), processes
    assert all("fresh driver" in processes[c] for c in own_jvm), processes
    assert processes["clean_slate.py#after-leftovers"] not in before, processes
    retired = [line for line in runs["worker log"]["text"].splitlines() if " retires after task=" in line]
    assert len(retired) == 1, retired
    for why in ("added files to the SparkContext (part-2.txt)", "Hadoop configuration (fidelity.hadoop.key)",
                "JVM system properties (fidelity.system.property)", "threads running (fidelity-idle)"):
        assert why in retired[0], retired[0]
