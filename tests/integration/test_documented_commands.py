"""Every command line in README.md and docs/*.md runs (issue 25): the ``sparkyard``, ``sparkyard-master`` and
``sparkyard-worker`` lines of their code blocks are extracted from the Markdown and run as written — by bash,
in a project directory holding the files they name, against a cluster of this test — with the placeholders
filled. A line fails the test with its file and line number when it exits otherwise than documented (0,
unless its comment says ``exits N``). The lines that cannot run here are listed in ``NOT_RUN`` with the
reason; every other line is run, and ``NOT_RUN`` may only name lines the docs still hold.

Filling: ``JOB``, ``ID`` and ``PIPELINE`` are a fresh job (a cron job, so ``backfill`` takes it) or pipeline for
each line; ``RUN`` and ``TASK`` an ended run of such a job (in docs/pipelines.md a pipeline run) and its first
task; ``WORKER`` a worker started for the line; ``PORT`` a free port. ``[…]`` is an optional part: it is run
included. ``a | b | c`` and ``a / b`` list verbs: each runs on its own. The master address the docs use
(``127.0.0.1:7070``) is this test's master's, and ``/opt/sparkyard`` (the install directory of docs/deploy.md)
is this checkout, ``/etc/sparkyard`` the project's ``etc`` (no line writes outside the project). A daemon's line (``sparkyard-master``, ``sparkyard-worker``) passes when the process starts
(listens, registers) and exits 0 on SIGTERM.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

from harness import ROOT, Cluster, free_port, wait_for
from sparkyard.client import first_run_id
from sparkyard.v1 import sparkyard_pb2 as pb

T = TypeVar("T")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(os.environ.get("VIRTUAL_ENV", ROOT / ".venv")) / "bin"
# A command of ours at the start of a line of a code block: the CLI, a daemon, or the CLI by its path.
# (A diagram's "sparkyard CLI" or an error's "sparkyard: …" is none: a verb or an option follows, or nothing.)
COMMAND = re.compile(r"^(?:\$ )?(?:\S*/)?(?:\$S|sparkyard(?:-master|-worker)?)(?=\s+[a-z./$-]|$)")
PLACEHOLDERS = ("PIPELINE", "WORKER", "TASK", "JOB", "RUN", "ID", "PORT")

# (doc file, the command as extracted, without its comment) → why it does not run here. Nothing else is skipped.
NOT_RUN = {
    ("README.md", "sparkyard local --workers 2 --slots 2 --http 127.0.0.1:8080"):
        "a second cluster of four warm drivers (~60 s on 2 cores); `sparkyard local` with --http is started by "
        "tests/integration/test_local_start.py",
    ("docs/clusters.md", "sparkyard-worker --master 10.0.0.1:7070 --spark-master spark://10.0.0.5:PORT "
                         "--conf spark.executor.memory=2g --conf spark.dynamicAllocation.maxExecutors=4"):
        "a worker on a Spark standalone cluster of other hosts: tests/cluster/test_standalone.py and "
        "tests/integration/test_spark_standalone_port.py run workers on one",
    ("docs/security.md", "sparkyard-master --listen 0.0.0.0:7070 --advertise master1.example.com:7070 "
                         "--tls-cert /etc/sparkyard/tls/server.crt --tls-key /etc/sparkyard/tls/server.key "
                         "--tls-client-ca /etc/sparkyard/tls/ca.crt --token-file /etc/sparkyard/admin.token "
                         "--worker-token-file /etc/sparkyard/worker.token"):
        "binds port 7070 on every interface with the certificates and tokens of the set-up steps; a mutual-TLS "
        "master with tokens is run by tests/integration/test_security.py",
    ("docs/security.md", "sparkyard-worker --master master1.example.com:7070,master2.example.com:7070 --tls-ca "
                         "ca.crt --tls-cert client.crt --tls-key client.key --token-file worker.token"):
        "dials the TLS masters of the set-up (master1/master2.example.com); tests/integration/test_security.py "
        "runs a worker with --tls-ca, --tls-cert, --tls-key and a worker token",
}
# Where the docs name a host's paths, the test's stand-ins (the CLI by its path is this checkout's).
# /etc/sparkyard (docs/security.md's configuration folder) is the project's etc/: nothing is written outside it.
PATHS = {"/opt/sparkyard/.venv/bin/sparkyard": "sparkyard", "/opt/sparkyard/": f"{ROOT}/", "/etc/sparkyard": "etc"}

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


@dataclass(frozen=True)
class Line:
    doc: str  # relative to the repository
    number: int
    text: str  # the command, continuation lines joined, comment kept

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.number}"

    @property
    def command(self) -> str:
        """The command without its comment (a '#' outside quotes that starts a word)."""
        return _split_comment(self.text)[0]

    @property
    def expected(self) -> int:
        found = re.search(r"\bexits (\d+)\b", _split_comment(self.text)[1])
        return int(found.group(1)) if found else 0


def _split_comment(text: str) -> tuple[str, str]:
    quote = ""
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or text[i - 1].isspace()):
            return text[:i].rstrip(), text[i + 1:].strip()
    return text.rstrip(), ""


def documented_lines() -> list[Line]:
    """Every command line of ours in the code blocks of README.md and docs/*.md."""
    lines = []
    for path in DOCS:
        doc = str(path.relative_to(ROOT))
        in_block, pending, start = False, "", 0
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            if raw.strip().startswith("```"):
                in_block = not in_block
                continue
            if not in_block:
                continue
            text = raw.strip()
            if pending:
                pending += " " + text
            elif COMMAND.match(text):
                pending, start = text, number
            else:
                continue
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            lines.append(Line(doc, start, re.sub(r"\s+", " ", pending.removeprefix("$ "))))
            pending = ""
    return lines


def expand(line: Line) -> list[str]:
    """The commands one documented line stands for: its verbs listed with | or / run one by one."""
    command = re.sub(r"\[([^\]]*)\]", r"\1", line.command)  # an optional part, included
    if command.startswith("$S "):
        command = "sparkyard " + command[3:]
    for path, stand_in in PATHS.items():
        command = command.replace(path, stand_in)
    parts = [p.strip() for p in re.split(r" \| | / ", command)]
    first = parts[0].split()[0]
    return [p if p.split()[0] == first else f"{first} {p}" for p in parts]


class Workspace:
    """The project the documented lines run in, the cluster they talk to, and the placeholders' values."""

    def __init__(self, cluster: Cluster, root: Path) -> None:
        self.cluster, self.root, self.client = cluster, root, cluster.client()
        self.project = root / "project"
        self._daemons = itertools.count(1)
        self.started: list[str] = []  # workers started for WORKER
        self._made: dict[str, object] = {}  # placeholder values lines share
        self._lock = threading.Lock()
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
        with self._lock:
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

    # ---- running ----------------------------------------------------------------------------------------

    def fill(self, line: Line, command: str) -> str:
        values = self.values(line, command)
        for name in PLACEHOLDERS:
            if name in values:
                command = re.sub(rf"\b{name}\b", values[name], command)
        return command.replace("127.0.0.1:7070", self.cluster.address)

    def run(self, line: Line, command: str) -> str:
        """'' when the command did as documented, else what it did."""
        filled = self.fill(line, command)
        if re.search(r"(?<![\w.])/etc/", filled):
            return f"`{filled}` would write outside the project"
        if shlex.split(filled)[0] in ("sparkyard-master", "sparkyard-worker"):
            return self.run_daemon(filled)
        if " certs " in f" {filled} ":  # each makes its set of certificates where none is yet
            shutil.rmtree(self.project / "tls", ignore_errors=True)
            shutil.rmtree(self.project / "etc", ignore_errors=True)
        done = subprocess.run(["bash", "-c", filled], cwd=self.project, env=self.env(), capture_output=True,
                              text=True, timeout=180)
        if done.returncode == line.expected:
            return ""
        return f"`{filled}` exited {done.returncode}, documented {line.expected}:\n{done.stdout}{done.stderr}"

    def run_daemon(self, filled: str) -> str:
        """Start a daemon as written (a master listens on a free port: SPARKYARD_LISTEN), wait until it serves,
        then SIGTERM: it must exit 0."""
        number = next(self._daemons)
        log = self.root / f"daemon-{number}.log"
        env = self.env()
        master = filled.startswith("sparkyard-master")
        if master:
            env["SPARKYARD_LISTEN"] = f"127.0.0.1:{free_port()}"
            ready = "listening on"
        else:
            env["SPARKYARD_ID"] = f"docs-w{number}"
            ready = "registered with master"
        cwd = self.root / f"daemon-{number}"
        cwd.mkdir()
        with log.open("wb") as out:
            proc = subprocess.Popen(["bash", "-c", f"exec {filled}"], cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: ready in log.read_text() or proc.poll() is not None, 90, f"`{filled}` to start")
            if proc.poll() is not None:
                return f"`{filled}` exited {proc.returncode} before it served:\n{log.read_text()[-3000:]}"
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        return "" if code == 0 else f"`{filled}` exited {code} on SIGTERM:\n{log.read_text()[-3000:]}"

    def cleanup(self, before: set[str]) -> None:
        for job in self.client.jobs():
            if job.id not in before:
                self.client.delete(job.id, force=True)
        for worker_id in self.started:
            proc = self.cluster.workers.pop(worker_id).process
            if proc.poll() is None:
                proc.kill()
                proc.wait()


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


def test_every_documented_command_line_runs(workspace: Workspace) -> None:
    """Three at a time (most of a line's time is a CLI process starting, or a run to wait for), but the lines
    that share the project's state one after the other, last: ``certs`` (the tls folder) and ``apply``
    (``--prune`` deletes the pipelines the others were given)."""
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

    with ThreadPoolExecutor(3) as pool:
        problems = list(pool.map(run, [c for c in commands if not shared(c[1])]))
    problems += [run(c) for c in commands if shared(c[1])]
    failures = [p for p in problems if p]
    assert not failures, f"{len(failures)} of {len(commands)} documented commands failed:\n" + "\n".join(failures)
