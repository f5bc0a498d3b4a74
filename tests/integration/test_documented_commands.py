"""Every command line in README.md and docs/*.md runs (issue 25): the ``sparkyard``, ``sparkyard-master`` and
``sparkyard-worker`` lines of their code blocks are extracted from the Markdown and run as written — by bash,
in a project directory holding the files they name, against a cluster of this test — with the placeholders
filled. A line fails the test with its file and line number when it exits otherwise than documented (0,
unless its comment says ``exits N``). The lines that cannot run here are listed in ``NOT_RUN`` with the
reason (none now); every other line is run, and ``NOT_RUN`` may only name lines the docs still hold. An
``export`` line of a code block is run before the command lines that follow it in the block, as a shell would.

Filling: ``JOB``, ``ID`` and ``PIPELINE`` are a fresh job (a cron job, so ``backfill`` takes it) or pipeline for
each line; ``RUN`` and ``TASK`` an ended run of such a job (in docs/pipelines.md a pipeline run) and its first
task; ``WORKER`` a worker started for the line; ``PORT`` a free port. ``[…]`` is an optional part: it is run
included. ``a | b | c`` and ``a / b`` list verbs: each runs on its own. The master address the docs use
(``127.0.0.1:7070``) is this test's master's, and ``/opt/sparkyard`` (the install directory of docs/deploy.md)
is this checkout, ``/etc/sparkyard`` the project's ``etc`` (no line writes outside the project). A daemon's line (``sparkyard-master``, ``sparkyard-worker``) passes when the process starts
(listens, registers) and exits 0 on SIGTERM. Where the docs name other hosts:

* docs/security.md's TLS set-up is made at test time (tests/integration/doc_daemons.py: a CA, server and
  client certificates, tokens). Its master lines run as documented for their hosts, the first as master1's,
  the second as master2's (each its own ``--advertise``, at which ``status`` must list it), on one Redis and
  on free ports (``0.0.0.0:7070`` keeps 0.0.0.0, which the master allows only with TLS and a token); the
  worker line dials both, from a folder holding ca.crt, client.crt, client.key and worker.token, and must
  register.
  ``master1.example.com:7070`` and ``master-a.example.com:7070`` (docs/deploy.md, whose masters run from
  systemd units, no command line) are the first master, ``master2``/``master-b`` the second: the client
  lines under their ``export``s (security.md step 4, deploy.md step 7, which submits a job that must
  succeed) run against these masters, over mutual TLS with the admin token. They and the worker are
  stopped last, and must exit 0.
* docs/clusters.md's worker joins a Spark standalone master and worker started here with
  deploy/spark-standalone.sh (``spark://10.0.0.5:PORT``; ``10.0.0.1:7070`` is this test's master); it must be
  ``ready``, its driver an application of that master.
* README.md's ``sparkyard local`` line (tests/integration/doc_local.py) runs exactly as written where this
  process can make network namespaces (root, CAP_NET_ADMIN): in a namespace of its own with only loopback,
  where 127.0.0.1:7070 (local's default ``--listen``) and the README's 127.0.0.1:8080 are free, and is checked
  from inside it. Elsewhere it gets a free ``--listen`` (its default is the address the docs give this
  test's master) and a free ``--http``. The test prints which of the two ran. Either way it must print that
  it is ready, serve the console and have its workers registered; Ctrl-C (SIGINT, by pid) must stop it with
  exit 0 and every process it started.

Workers started by a daemon line have one slot unless the line says, and serve a group no job here uses (the TLS
worker the default group of its own masters).
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from doc_daemons import Daemon, Standalone, TlsCluster, TlsFiles, run_standalone_worker
from doc_lines import Line, documented_lines, expand, stand_ins
from doc_local import run_local
from harness import ROOT, Cluster, free_port, wait_for, worker_jvm_env
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

T = TypeVar("T")
BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
PLACEHOLDERS = ("PIPELINE", "WORKER", "TASK", "JOB", "RUN", "ID", "PORT")
# (doc file, the command as extracted, without its comment) → why it does not run here. Nothing else is skipped.
NOT_RUN: dict[tuple[str, str], str] = {}
# The master's address as the docs give it (README and most pages; docs/clusters.md's host A).
MASTER_ADDRESSES = ("127.0.0.1:7070", "10.0.0.1:7070")
# The TLS masters of docs/security.md and docs/deploy.md: (first, second).
TLS_MASTERS = (re.compile(r"\bmaster(?:1|-a)\.example\.com:7070\b"), re.compile(r"\bmaster(?:2|-b)\.example\.com:7070\b"))
STANDALONE_MASTER = "spark://10.0.0.5:PORT"
DAEMON_GROUP = "docs-daemons"  # the group of the workers daemon lines start: no job here uses it

# README.md's pipeline; {jobs} is the steps' folder relative to the file, {join} the last step's entrypoint.
PIPELINES = '''\
from sparkyard import Pipeline

etl = Pipeline("{name}", cron="0 3 * * *")
extract = etl.step("extract", "{jobs}/extract.py:main", args=["--date", "{{ds}}"])
orders = etl.step("orders", "{jobs}/orders.py:main", after=[extract], retries=2)
customers = etl.step("customers", "{jobs}/customers.py:main", after=[extract])
etl.step("join", "{jobs}/{join}", after=[orders, customers])
'''
JOB_CODE = {"fail": "def main(spark, ctx):\n    raise RuntimeError('documented to fail')\n",
            "sleep": "import time\n\n\ndef main(spark, ctx):\n    time.sleep(120)\n"}


class Workspace:
    """The project the documented lines run in, the cluster they talk to, and the placeholders' values."""

    def __init__(self, cluster: Cluster, root: Path) -> None:
        self.cluster, self.root, self.client = cluster, root, cluster.client()
        self.project = root / "project"
        self._daemons = itertools.count(1)
        self.started: list[str] = []  # workers started for WORKER
        self._made: dict[str, object] = {}  # placeholder values lines share
        self._lock = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self._names = itertools.count(1)
        self._make_project()

    def _make_project(self) -> None:
        p = self.project
        for folder in ("jobs", "data", "pipelines", "tls"):
            (p / folder).mkdir(parents=True)
        (p / "README.md").write_text((ROOT / "README.md").read_text())
        (p / "examples").symlink_to(ROOT / "examples")
        for name in ("etl", "backfill", "copy", "load", "extract", "orders", "customers", "join"):
            (p / "jobs" / f"{name}.py").write_text("def main(spark, ctx):\n    return len(ctx.input_values)\n")
        for name in ("etl.py", "job.py"):  # programs written for spark-submit
            (p / name).write_text("import sys\n\nimport util\n\nprint('args', sys.argv[1:])\n")
        (p / "util.py").write_text("VALUE = 1\n")
        with zipfile.ZipFile(p / "deps.zip", "w") as deps:
            deps.writestr("deps_mod.py", "VALUE = 2\n")
        for data in ("day-1.parquet", "day-2.parquet", "a.csv", "b.csv", "sales.csv", "input.csv"):
            (p / "data" / data).write_text("x\n")
        for name, code in JOB_CODE.items():
            (p / "jobs" / f"{name}.py").write_text(code)
        (p / "pipelines.py").write_text(PIPELINES.format(name="nightly-etl", jobs="jobs", join="join.py:main"))
        (p / "pipelines" / "nightly.py").write_text(PIPELINES.format(name="nightly-etl", jobs="../jobs",
                                                                     join="join.py:main"))

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKYARD_")}
        env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
        env["SPARKYARD_MASTER"] = self.cluster.address
        env["PYTHONUNBUFFERED"] = "1"
        return env

    # ---- placeholder values -----------------------------------------------------------------------------

    def job(self) -> str:
        job = self.client.submit(str(self.project / "jobs" / "etl.py") + ":main", cron="0 3 * * *",
                                 name=f"docs-job-{next(self._names)}", base_dir=str(self.project))
        return job.id

    def pipeline(self, last: str = "join") -> str:
        """A pipeline applied now, its last step's code ``jobs/<last>.py``."""
        name = f"docs-pipeline-{next(self._names)}"
        path = self.project / f"{name}.py"  # its steps' entrypoints are relative to the file
        path.write_text(PIPELINES.format(name=name, jobs="jobs", join=f"{last}.py:main"))
        done = subprocess.run(["sparkyard", "apply", str(path)], cwd=self.project, env=self.env(),
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return name

    def a_run(self, pipeline: bool, code: str) -> tuple[str, str]:
        """(run id, its first task's id) of a run of ``jobs/<code>.py``: ended (SUCCEEDED, or FAILED for
        "fail"), or running ("sleep")."""
        if pipeline:
            run_id = self.client.trigger(self.pipeline(code)).id
        else:
            job = self.client.submit(str(self.project / "jobs" / f"{code}.py") + ":main", base_dir=str(self.project))
            run_id = first_run_id(job)
        if code == "sleep":
            run = wait_for(lambda: (r := self.client.run(run_id)).state == pb.RUN_RUNNING and r, 120, "a run")
        else:
            run, timed_out = self.client.wait(run_id, timeout=120)
            assert not timed_out and run.state == (pb.RUN_FAILED if code == "fail" else pb.RUN_SUCCEEDED), run
        task = run.tasks[0].id if run.tasks else self.client.run(run.steps[0].run_id).tasks[0].id
        return run_id, task

    def values(self, line: Line, command: str) -> dict[str, str]:
        """A fresh job for every line, and a fresh pipeline or run for a line that changes it; lines that only
        read or trigger share one (made once: a pipeline run takes seconds)."""
        wanted = {p for p in PLACEHOLDERS if re.search(rf"\b{p}\b", command)}
        changes = re.search(r"\b(delete|pause|resume|cancel)\b", command) is not None
        pipeline = line.doc == "docs/pipelines.md"
        values: dict[str, str] = {}
        if "PORT" in wanted:
            values["PORT"] = str(free_port())
        if "JOB" in wanted or "ID" in wanted:
            values["JOB"] = values["ID"] = self.job()
        if "PIPELINE" in wanted:
            values["PIPELINE"] = self.pipeline() if changes else self._shared("pipeline", self.pipeline)
        if "RUN" in wanted or "TASK" in wanted:
            # What the verb is for: a run to cancel runs, a run to rerun --failed-only failed; others ended.
            code = "sleep" if " cancel RUN" in command else "fail" if "--failed-only" in command else "etl"
            made = (self.a_run(pipeline, code) if changes else
                    self._shared(f"run {pipeline} {code}", lambda: self.a_run(pipeline, code)))
            values["RUN"], values["TASK"] = made
        if "WORKER" in wanted:
            values["WORKER"] = self.start_worker()
        return values

    def _shared(self, key: str, make: Callable[[], T]) -> T:
        """Made once, by the first line that needs it (one lock per value: a cluster starting for one line
        does not hold up the lines that want another value)."""
        with self._lock:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._made:
                self._made[key] = make()
            return self._made[key]  # type: ignore[return-value]

    def start_worker(self) -> str:
        """A worker to drain: the submit runner (no JVM to warm), in a group no job here uses."""
        worker_id = f"docs-w{next(self._daemons)}"
        self.cluster.start_worker(worker_id, slots=1, runner="submit", group="docs-drain")
        self.started.append(worker_id)  # taken out of the shared cluster's workers again by cleanup
        self.cluster.wait_workers(worker_id, timeout=60)
        return worker_id

    # ---- the hosts the docs name --------------------------------------------------------------------------

    def tls(self) -> TlsCluster:
        """docs/security.md's masters and worker, started from their lines (once, by the first line that
        needs them); the project gets the client files of security.md step 4 and deploy.md step 7."""
        commands = [expand(line)[0] for line in documented_lines() if _tls_daemon(line.command)]
        masters = [command for command in commands if _tls_daemon(command) == "master"]
        workers = [command for command in commands if _tls_daemon(command) == "worker"]
        assert len(masters) == len(TLS_MASTERS) and len(workers) == 1, (
            f"docs/security.md gives {len(masters)} TLS master lines and {len(workers)} worker lines: "
            f"expected one per master ({len(TLS_MASTERS)}) and one worker line")
        files = TlsFiles.make(self.root)
        files.copy_etc(self.project)
        return TlsCluster(files, masters, workers[0], _fill_tls, self.daemon_env(), self.cluster.redis_url,
                          f"docstls{os.getpid()}", self.root)

    def standalone(self) -> Standalone:
        return Standalone(self.root / "spark", self.daemon_env())

    def addresses(self, text: str) -> str:
        """The docs' addresses of masters and Spark masters as this test's."""
        for address in MASTER_ADDRESSES:
            text = text.replace(address, self.cluster.address)
        if any(pattern.search(text) for pattern in TLS_MASTERS):
            text = _fill_tls(text, self._shared("tls", self.tls).addresses)
        if STANDALONE_MASTER in text:
            text = text.replace(STANDALONE_MASTER, self._shared("standalone", self.standalone).url)
        return text

    def daemon_env(self, worker_id: str = "") -> dict[str, str]:
        # Every JVM a daemon line starts (drivers, a Spark standalone cluster) as the suite's workers start theirs
        # (the quick JIT, the suite's class archive): they do tiny work, on a loaded 2-core machine.
        env = {**self.env(), **worker_jvm_env()}
        if worker_id:
            env.update(SPARKYARD_ID=worker_id, SPARKYARD_GROUP=DAEMON_GROUP, SPARKYARD_SLOTS="1")
        return env

    # ---- running ----------------------------------------------------------------------------------------

    def fill(self, line: Line, command: str) -> str:
        command = self.addresses(command)
        values = self.values(line, command)
        for name in PLACEHOLDERS:
            if name in values:
                command = re.sub(rf"\b{name}\b", values[name], command)
        return command

    def run(self, line: Line, command: str) -> str:
        """'' when the command did as documented, else what it did."""
        if _tls_daemon(command):
            return self._shared("tls", self.tls).problems[command]
        if command.startswith("sparkyard local"):
            how, problem = run_local(command, self.daemon_env(), self.root)
            print(f"{line.where} ran {how}", flush=True)
            return problem
        filled, setup = self.fill(line, command), self.addresses(stand_ins(line.setup))
        script = f"{setup}; {filled}" if setup else filled
        if re.search(r"(?<![\w.])/etc/", script):
            return f"`{script}` would write outside the project"
        if shlex.split(filled)[0] in ("sparkyard-master", "sparkyard-worker"):
            return self.run_daemon(filled)
        if " certs " in f" {filled} ":  # each makes its set of certificates where none is yet
            shutil.rmtree(self.project / "tls", ignore_errors=True)
            shutil.rmtree(self.project / "etc", ignore_errors=True)
        env = self.env()
        if setup:  # step 4 of docs/security.md reads the admin token from ~/.sparkyard
            env["HOME"] = str(self._shared("tls", self.tls).files.home)
        done = subprocess.run(["bash", "-c", script], cwd=self.project, env=env, capture_output=True,
                              text=True, timeout=180)
        if done.returncode == line.expected:
            return ""
        return f"`{script}` exited {done.returncode}, documented {line.expected}:\n{done.stdout}{done.stderr}"

    def run_daemon(self, filled: str) -> str:
        """Start a daemon as written (a master listens on a free port: SPARKYARD_LISTEN), wait until it serves,
        then SIGTERM: it must exit 0. A worker on a Spark standalone master must be ready on it."""
        number = next(self._daemons)
        if filled.startswith("sparkyard-worker") and "spark://" in filled:
            return run_standalone_worker(filled, self._shared("standalone", self.standalone), self.client,
                                         self.daemon_env(f"docs-w{number}"), f"docs-w{number}", self.root)
        if filled.startswith("sparkyard-master"):
            env, ready = {**self.daemon_env(), "SPARKYARD_LISTEN": f"127.0.0.1:{free_port()}"}, "listening on"
        else:
            env, ready = self.daemon_env(f"docs-w{number}"), "registered with master"
        daemon = Daemon(filled, self.root / f"daemon-{number}", env, self.root / f"daemon-{number}.log")
        try:
            problem = daemon.wait_output(ready)
        finally:
            stopped = daemon.stop()
        return problem or stopped

    def stop_daemons(self) -> list[str]:
        """What of the TLS masters and worker did not exit 0 on SIGTERM (stopped once)."""
        tls = self._made.pop("tls", None)
        return tls.stop() if isinstance(tls, TlsCluster) else []

    def cleanup(self, before: set[str]) -> None:
        self.stop_daemons()
        standalone = self._made.pop("standalone", None)
        if isinstance(standalone, Standalone):
            standalone.stop()
        for job in self.client.jobs():
            if job.id not in before:
                self.client.delete(job.id, force=True)
        for worker_id in self.started:
            proc = self.cluster.workers.pop(worker_id).process
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _tls_daemon(command: str) -> str:
    """"master" or "worker" for docs/security.md's TLS daemons' lines, else ''."""
    if command.startswith("sparkyard-master") and "--tls-cert" in command:
        return "master"
    return "worker" if command.startswith("sparkyard-worker") and "--tls-ca" in command else ""


def _fill_tls(text: str, addresses: list[str]) -> str:
    for pattern, address in zip(TLS_MASTERS, addresses):
        text = pattern.sub(address, text)
    return text


@pytest.fixture
def workspace(shared_cluster: Cluster, tmp_path: Path) -> Iterator[Workspace]:
    """The project the lines run in, on the shared cluster; the jobs and workers the lines made are gone after
    (``apply --prune`` may also delete pipelines earlier tests left there)."""
    workspace = Workspace(shared_cluster, tmp_path)
    before = {job.id for job in workspace.client.jobs()}
    try:
        yield workspace
    finally:
        workspace.cleanup(before)


def test_not_run_names_only_documented_lines() -> None:
    documented = {(line.doc, line.command) for line in documented_lines()}
    stale = [key for key in NOT_RUN if key not in documented]
    assert not stale, f"NOT_RUN names lines the docs no longer hold: {stale}"


def test_the_extraction_finds_the_lines_a_reader_sees() -> None:
    lines = documented_lines()
    where = {line.where: line for line in lines}
    assert len(lines) > 40 and {line.doc for line in lines} >= {"README.md", "docs/pipelines.md", "docs/shipping.md"}
    backfill = next(line for line in lines if line.command.startswith("sparkyard backfill JOB"))
    assert backfill.expected == 0 and backfill.where in where
    verbs = next(line for line in lines if line.command.startswith("sparkyard jobs | job ID"))
    assert expand(verbs)[:3] == ["sparkyard jobs", "sparkyard job ID", "sparkyard runs JOB"]
    continued = next(line for line in lines if line.command.startswith("sparkyard-master --listen 0.0.0.0"))
    assert continued.command.endswith("--worker-token-file /etc/sparkyard/worker.token")
    assert not any(line.text.startswith("sparkyard:") for line in lines)  # an error message shown is no command


@pytest.mark.timeout(600)  # 64 commands, three clusters started beside them: past the default 300 s on a loaded machine
def test_every_documented_command_line_runs(workspace: Workspace) -> None:
    """Three at a time (most of a line's time is a CLI process starting, or a run to wait for), beside the
    lines that start or wait for a cluster (each in a thread from the start), but the lines that share the
    project's state one after the other, last: ``certs`` (the tls folder) and ``apply`` (``--prune`` deletes
    the pipelines the others were given).

    README.md's ``sparkyard local`` line runs as written, in a network namespace of its own, where this
    process can make one (root with CAP_NET_ADMIN); elsewhere on free ports in place of 127.0.0.1:7070 and
    :8080. Its output line ``README.md:N ran …`` says which of the two ran, and why not the first."""
    commands = [(line, command) for line in documented_lines() if (line.doc, line.command) not in NOT_RUN
                for command in expand(line)]

    def shared(command: str) -> bool:
        return bool(re.search(r"\bsparkyard (certs|apply)\b", command))

    def run(item: tuple[Line, str]) -> str:
        line, command = item
        began = time.monotonic()
        problem = workspace.run(line, command)
        print(f"{time.monotonic() - began:5.1f}s {line.where} {command}", flush=True)
        return f"{line.where}: {problem}" if problem else ""

    def slow(item: tuple[Line, str]) -> bool:
        """A line that starts a cluster or waits for one: each in a thread of its own, from the start."""
        line, command = item
        return (command.startswith("sparkyard local") or bool(_tls_daemon(command)) or STANDALONE_MASTER in command
                or any(pattern.search(line.setup + command) for pattern in TLS_MASTERS))

    waiting = [c for c in commands if slow(c)]
    with ThreadPoolExecutor(len(waiting)) as slow_pool, ThreadPoolExecutor(3) as pool:
        started = slow_pool.map(run, waiting)
        problems = list(pool.map(run, [c for c in commands if not shared(c[1]) and not slow(c)]))
        problems += list(started)
    problems += [run(c) for c in commands if shared(c[1])]
    problems += [f"docs/security.md: {problem}" for problem in workspace.stop_daemons()]
    failures = [p for p in problems if p]
    assert not failures, f"{len(failures)} of {len(commands)} documented commands failed:\n" + "\n".join(failures)
