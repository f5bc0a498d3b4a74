"""A warm driver behaves like a fresh spark-submit: the programs of tests/jobs/fidelity, each run by every
runner (session, submit, connect) from a copy of the same directory, with the command line a spark-submit
user would type (`sparkyard submit [options] prog.py args…`), must leave the results and exit codes a real
`spark-submit` gives, recorded by tests/fidelity_expected.py (which the record must match: the Spark
version, the programs' digest, the cases) — or, where a runner cannot run a program, fail it with the one
line that says why; where it cannot give what spark-submit gives (the connect runner's shared catalog), say
so in the attempt's log.

The session and connect runs go one after another through one warm process each (a driver; a Spark
Connect client with the worker's server), so each program also runs on whatever the previous one left
behind (tables, a database, a global view, cache, a job group, a running stream, set conf, listeners,
Hadoop FileSystem instances, Python's logging, signal handlers, warnings filters and other process
settings, an atexit function); `clean_slate.py` after them checks it saw none of it, and the programs run
twice (`#again`, `#two`: another job) check that the second finds what the first did. `static_conf.py` is
given --conf and `sizes.py` spark-submit's sizes that a warm driver's JVM cannot take: each must run on a
fresh driver started with them. `leftovers.py` leaves what no reset can take back (an added file, a Hadoop
configuration key, a JVM system property, a daemon thread): the driver must retire after it, saying why.

Cost: one worker per runner, shared by every case, the three runners' cases at once (a session worker
with one slot, a connect worker with one, a submit worker with two). Cold JVMs are most of it (each ~10
CPU-seconds): the session worker's driver, the fresh drivers of `static_conf.py` and `sizes.py`, the
replacement after `leftovers.py`, the connect worker's server, one spark-submit per program under the
submit runner (but those of STATE_ONLY). The spark-submit references are recorded, not run here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from fidelity_expected import BASELINE, CASES, PROGRAMS, load, program
from harness import Cluster, RedisServer

# Every case through three runners at once on 2 shared cores: 5-7 min under load average 10-16 (210-250
# CPU-seconds), up to ~20 under heavier load.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

RUNNERS = ("session", "submit", "connect")
SLOTS = {"session": 1, "submit": 2, "connect": 1}
# Under the connect runner Spark Connect has no SparkContext: the programs that use one fail with the
# runner's line saying so (remote_spark.ConnectRunnerError).
# The submit runner gives every attempt a JVM of its own, so it runs each program once (a case repeating a
# program with other arguments is another fresh JVM, nothing more to compare), and not the programs that
# only look for what an earlier job left in the same process (a fresh JVM each, ~7 CPU-seconds, for nothing
# the runner could get wrong: its share is the command line, the working directory and the process it
# starts, which the other programs check).
STATE_ONLY = ("clean_slate.py", "listeners.py", "hadoop_session.py")
SUBMIT_CASES = tuple(case for case in BASELINE if "#" not in case and case not in STATE_ONLY)
CONNECT_REFUSAL = "is not available under the connect runner"
CONNECT_NEEDS_CONTEXT = ("warehouse.py", "clean_slate.py", "listeners.py", "hadoop_session.py", "sizes.py",
                         "context_only.py", "leftovers.py", "flags.py")
# What the connect runner says in the attempt's log when a program writes to the server's shared catalog.
CONNECT_CATALOG_LINE = ("sparkyard: warning: saveAsTable('events'): under the connect runner tables, views and "
                        "databases go to the Spark Connect server's catalog and warehouse (")


@dataclass
class Ran:
    """One case under one runner."""

    code: int
    output: object
    process: str  # the process that ran it, from the first line of its log ('' for the submit runner)
    error: str
    log: str


def _sparkyard(cluster: Cluster, where: Path, runner: str, case: str, out: Path) -> Ran:
    """`sparkyard submit --runner R --group R --wait prog.py --out OUT args…` from ``where``."""
    options, args, _ = CASES[case]
    done = subprocess.run([sys.executable, "-m", "sparkyard.cli.main", "--master", cluster.address, "submit",
                           "--runner", runner, "--group", runner, "--wait", "--json", *options, program(case),
                           "--out", str(out), *args], cwd=where, capture_output=True, text=True, timeout=900)
    assert done.stdout.strip(), done.stderr
    run = json.loads(done.stdout)
    attempt = run["tasks"][0]["attempts"][-1]
    log = b"".join(cluster.client().logs(run["tasks"][0]["id"])).decode(errors="replace")
    process = log.splitlines()[0].split(", cwd ")[0].split(" on worker ")[1] if runner != "submit" else ""
    output = json.loads(out.read_text()) if out.exists() else None
    if run["state"] == "SUCCEEDED":
        return Ran(0, output, process, "", log)
    error = attempt.get("error", "")
    code = int(error.rsplit("exit code ", 1)[1].split()[0]) if "exit code " in error else 1
    return Ran(code, output, process, error, log)


def _run_all(cluster: Cluster, root: Path, runner: str) -> dict[str, Ran]:
    """The runner's cases from its own copy of the programs: the session and connect runners every case in
    order (one warm process), the submit runner each program once (a fresh JVM each), as many at a time as
    its slots."""
    where, out = root / runner, root / f"out-{runner}"
    shutil.copytree(PROGRAMS, where)
    out.mkdir()

    def one(case: str) -> Ran:
        return _sparkyard(cluster, where, runner, case, out / f"{case}.json")

    if runner == "submit":
        with ThreadPoolExecutor(SLOTS[runner]) as pool:
            return dict(zip(SUBMIT_CASES, pool.map(one, SUBMIT_CASES)))
    return {case: one(case) for case in CASES}


@pytest.fixture(scope="module")
def recorded() -> dict[str, tuple[int, object]]:
    """What spark-submit gives per case: exit code and output (tests/fidelity_expected.json)."""
    made = load()
    return {case: (c["exit_code"], c["output"]) for case, c in made["cases"].items()}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def runs(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Ran]]]:
    """Every runner's cases, the three runners at once, each on a worker of its own (its --group); and the
    session worker's log."""
    root = tmp_path_factory.mktemp("fidelity")
    cluster = Cluster(redis_server.url, root / "cluster", namespace="fidelity")
    try:
        # Leases of production's length, not the fault tests' 4 s: three workers, a Spark Connect server and
        # spark-submits start at once here, and on 2 cores a worker starved for 2.4 s fenced itself mid-attempt;
        # the re-run then found the first attempt's table on the shared server (CI, 2026-11-27).
        cluster.start_master("--lease", "15s", "--heartbeat", "3s")
        for runner in RUNNERS:
            cluster.start_worker(runner, slots=SLOTS[runner], runner=runner, group=runner)
        cluster.wait_workers(*RUNNERS)
        with ThreadPoolExecutor(len(RUNNERS)) as pool:
            results = dict(zip(RUNNERS, pool.map(lambda runner: _run_all(cluster, root, runner), RUNNERS)))
        results["worker log"] = {"session": Ran(0, None, "", "", cluster.workers["session"].log())}
        yield results
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def test_spark_submit_itself_gives_what_the_programs_expect(recorded: dict[str, tuple[int, object]]) -> None:
    codes = {case: code for case, (code, _) in recorded.items()}
    outputs = {case: output for case, (_, output) in recorded.items()}
    assert codes == {case: code for case, (_, _, code) in CASES.items()}
    assert outputs["warehouse.py"] == {"count": 4, "events_dir": True, "orders_dir": True, "tables": ["events", "local_view"],
                                       "warehouse_is_here": True}
    assert outputs["clean_slate.py"]["tables"] == [] and outputs["clean_slate.py"]["databases"] == ["default"]
    assert outputs["streaming.py"] == {"checkpoint_here": True, "rows": 5, "sink_metadata_here": True}
    assert outputs["context_only.py"] == {"counts": {"a": 2, "b": 1}, "same_context": True}
    assert outputs["static_conf.py"] == {"global_database": "job_temp", "rows": 2, "mode": "on"}
    assert outputs["flags.py"]["argv"] == ["--out", *CASES["flags.py"][1]] and outputs["flags.py"]["input_lines"] > 0
    assert outputs["flags.py"]["exit_hook_in_program_dir"] is True
    assert outputs["clean_slate.py"]["ansi"] == "true" and outputs["clean_slate.py"]["checkpoint_dir"] is None
    assert outputs["clean_slate.py"]["root_logger"] == [0, 30, 0] and outputs["builder_conf.py"]["root_at_start"] == [0, 30]
    assert outputs["sizes.py"]["spark.driver.memory"] == "700m" and outputs["sizes.py"]["heap_as_asked"] is True
    assert outputs["leftovers.py"]["in_program_dir"] is True and outputs["leftovers.py"]["job_group"] == "finisher"
    assert outputs["process_state.py"]["at_start"] == {
        "alarm_pending": False, "alrm": "SIG_DFL", "excepthook_default": True, "fidelity_filter": False,
        "recursion_limit": 1000, "seeded": False, "socket_timeout": None, "umask_077": False, "usr1": "SIG_DFL"}
    assert outputs["listeners.py"] == {"at_start": {"StatsReportListener": 0, "StreamingQueryListenerBus": 0}, "rows": 3}
    assert [outputs[c]["session_key"] for c in ("hadoop_session.py", "hadoop_session.py#two")] == ["one", "two"]
    assert [outputs[c]["read_key"] for c in ("hadoop_session.py", "hadoop_session.py#two")] == ["one", "two"]


@pytest.mark.parametrize("runner", ["session", "submit"])
def test_each_runner_gives_what_spark_submit_gives(runs: dict[str, dict[str, Ran]],
                                                   recorded: dict[str, tuple[int, object]], runner: str) -> None:
    assert set(runs[runner]) == set(CASES if runner == "session" else SUBMIT_CASES)
    for case, ran in runs[runner].items():
        assert (case, ran.output) == (case, recorded[case][1]), ran.log[-3000:]
        assert (case, ran.code) == (case, recorded[case][0]), ran.log[-3000:]
    # What the program printed on either stream is in the attempt's log; its uncaught exception is the error.
    failed = runs[runner]["context_only.py"]
    assert "context_only: to stdout" in failed.log and "context_only: to stderr" in failed.log, failed.log[-3000:]
    assert "ValueError: the program fails on purpose" in failed.error, failed.error


def test_the_connect_runner_gives_what_spark_submit_gives_or_says_why_it_cannot(
        runs: dict[str, dict[str, Ran]], recorded: dict[str, tuple[int, object]]) -> None:
    ran = runs["connect"]
    assert set(ran) == set(CASES)
    for case in CASES:
        if program(case) in CONNECT_NEEDS_CONTEXT:
            assert (case, ran[case].code, CONNECT_REFUSAL in ran[case].error) == (case, 1, True), ran[case].log[-3000:]
    for case in ("builder_conf.py", "process_state.py", "process_state.py#again"):
        assert (case, ran[case].code, ran[case].output) == (case, *recorded[case]), ran[case].log[-3000:]
    # The static conf a Spark Connect session cannot take is said in the attempt's log; the program then
    # fails where it needs it.
    assert "sparkyard: warning: conf spark.sql.globalTempDatabase=job_temp cannot be set" in ran["static_conf.py"].log
    assert ran["static_conf.py"].code == 1
    # Relative paths given to Spark resolve in the program's directory, as under spark-submit: the client
    # makes them absolute before its plans leave for the worker's own server (worker/connect_plans.py).
    assert (ran["streaming.py"].code, ran["streaming.py"].output) == recorded["streaming.py"], ran["streaming.py"].log[-3000:]
    assert "sparkyard: warning:" not in ran["streaming.py"].log, ran["streaming.py"].log[-3000:]
    # The catalog is the server's, shared by every job on it: a program writing to it is told so in its log
    # (once), and that spark-submit's per-program catalog is the session and submit runners'.
    log = ran["warehouse.py"].log
    assert log.count(CONNECT_CATALOG_LINE) == 1 and "--runner session or --runner submit" in log, log[-3000:]
    assert "under the connect runner tables" not in ran["builder_conf.py"].log


def test_one_warm_process_ran_the_programs_but_those_needing_their_own_jvm_and_retired_after_leftovers(
        runs: dict[str, dict[str, Ran]]) -> None:
    processes = {case: ran.process for case, ran in runs["session"].items()}
    own_jvm = ("static_conf.py", "sizes.py")
    before = {processes[c] for c in CASES if c not in ("clean_slate.py#after-leftovers", *own_jvm)}
    assert len(before) == 1 and "warm driver" in next(iter(before)), processes
    assert all("fresh driver" in processes[c] for c in own_jvm), processes
    assert processes["clean_slate.py#after-leftovers"] not in before, processes
    # Hadoop settings given at runtime retire a warm driver on a cluster only (worker/runtime_hadoop.py): in
    # local mode the executors are the driver's JVM, whose FileSystem instances each attempt closes.
    for case in ("hadoop_session.py", "hadoop_session.py#two"):
        assert "Hadoop FileSystem instances" not in runs["session"][case].log, runs["session"][case].log[-3000:]
    retired = [line for line in runs["worker log"]["session"].log.splitlines() if " retires after task=" in line]
    assert len(retired) == 1, retired
    for why in ("added files to the SparkContext (part-2.txt)", "Hadoop configuration (fidelity.hadoop.key)",
                "JVM system properties (fidelity.system.property)", "threads running (fidelity-idle)"):
        assert why in retired[0], retired[0]
    clients = {ran.process for ran in runs["connect"].values()}
    assert len(clients) == 1 and "Spark Connect client" in next(iter(clients)), clients
