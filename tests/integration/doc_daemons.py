"""The long-running processes that documented lines start, for tests/integration/test_documented_commands.py:
a daemon run by bash exactly as its line is written (filled), kept until stopped by its pid; the TLS set-up of
docs/security.md made at test time (a CA, server and client certificates, tokens: nothing committed); a Spark
standalone cluster from deploy/spark-standalone.sh for the line of docs/clusters.md that joins one.
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from harness import ROOT, free_port, wait_for
from sparkyard.certs import make_dev_certs
from sparkyard.client import Client
from sparkyard.v1 import sparkyard_pb2 as pb

# The hosts docs/security.md's certificates name (a certificate always names 127.0.0.1 too: the test dials it).
TLS_HOSTS = ("master1.example.com", "master2.example.com", "10.0.0.5")
STANDALONE = ROOT / "deploy" / "spark-standalone.sh"


class Daemon:
    """A documented daemon line run by bash (``exec``: the pid is the daemon's), its output in ``log``;
    ``inside``: a command that execs the rest where the daemon is to run (``ip netns exec NAME``)."""

    def __init__(self, filled: str, cwd: Path, env: dict[str, str], log: Path, inside: Sequence[str] = ()) -> None:
        self.filled, self.log = filled, log
        cwd.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:
            self.process = subprocess.Popen([*inside, "bash", "-c", f"exec {filled}"], cwd=cwd, env=env,
                                            stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, ready: Callable[[], object], timeout: float, what: str) -> str:
        """'' once ``ready()`` holds, else why not (it exited first, or the deadline passed)."""
        try:
            wait_for(lambda: self.process.poll() is not None or ready(), timeout, what)
        except AssertionError as exc:
            return f"`{self.filled}`: {exc}:\n{self.output()[-3000:]}"
        if self.process.poll() is not None:
            return f"`{self.filled}` exited {self.process.returncode} before {what}:\n{self.output()[-3000:]}"
        return ""

    def wait_output(self, text: str, timeout: float = 90) -> str:
        return self.wait(lambda: text in self.output(), timeout, f"`{text}` in its output")

    def stop(self, timeout: float = 60, sig: int = signal.SIGTERM) -> str:
        """``sig`` by pid: '' when it exits 0, else what it did (killed after ``timeout``)."""
        if self.process.poll() is not None:
            return f"`{self.filled}` had exited {self.process.returncode}:\n{self.output()[-3000:]}"
        self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return f"`{self.filled}` did not exit within {timeout:.0f}s of {signal.Signals(sig).name}:\n{self.output()[-3000:]}"
        return "" if code == 0 else f"`{self.filled}` exited {code} on {signal.Signals(sig).name}:\n{self.output()[-3000:]}"


@dataclass(frozen=True)
class TlsFiles:
    """docs/security.md's set-up, made now: ``host`` holds the masters' ``etc/`` (the stand-in for
    /etc/sparkyard: tls/ with the certificates, admin.token, worker.token), ``client`` what step 3 has a
    worker's folder hold (ca.crt, client.crt, client.key, worker.token), ``home`` the admin token at
    ~/.sparkyard/admin.token as step 4 reads it."""

    host: Path
    client: Path
    home: Path

    @property
    def etc(self) -> Path:
        return self.host / "etc"

    @classmethod
    def make(cls, root: Path) -> TlsFiles:
        files = cls(root / "tls-host", root / "tls-client", root / "home")
        certs = make_dev_certs(files.etc / "tls", list(TLS_HOSTS))
        for role in ("admin", "worker"):
            token = files.etc / f"{role}.token"
            token.write_text(secrets.token_urlsafe(32) + "\n")
            token.chmod(0o600)
        files.client.mkdir(parents=True)
        for made in (certs.ca, certs.client_cert, certs.client_key, files.etc / "worker.token"):
            shutil.copy2(made, files.client / made.name)
        (files.home / ".sparkyard").mkdir(parents=True)
        shutil.copy2(files.etc / "admin.token", files.home / ".sparkyard" / "admin.token")
        return files

    def copy_etc(self, project: Path) -> None:
        """The project as a client host of docs/deploy.md step 7 (/etc/sparkyard's CA, client certificate,
        admin token) and of docs/security.md step 4 (ca.crt, client.crt, client.key beside it)."""
        shutil.copytree(self.etc, project / "etc", dirs_exist_ok=True)
        for name in ("ca.crt", "client.crt", "client.key"):
            shutil.copy2(self.client / name, project / name)

    def client_settings(self) -> dict[str, Any]:
        return {"tls_ca": str(self.client / "ca.crt"), "tls_cert": str(self.client / "client.crt"),
                "tls_key": str(self.client / "client.key"), "token_file": str(self.etc / "admin.token")}


class Standalone:
    """A Spark standalone master and one worker of deploy/spark-standalone.sh (one core: no executor is
    asked for here), stopped by the script, which stops exactly the daemons it started."""

    def __init__(self, data: Path, env: dict[str, str]) -> None:
        self.data, self.env = data, env
        started = self._script("--workers", "1", "--cores", "1", "start")
        if started.returncode != 0:
            self._script("stop")
            raise AssertionError(f"deploy/spark-standalone.sh start exited {started.returncode}:\n{started.stderr}")
        self.url = (data / "run" / "master.url").read_text().strip()
        self.webui = (data / "run" / "master.webui").read_text().strip()

    def _script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(STANDALONE), "--data-dir", str(self.data), *args], capture_output=True,
                              text=True, timeout=180, env=self.env)

    def status(self) -> dict[str, Any]:
        """The master's JSON status: its workers and applications."""
        with urllib.request.urlopen(f"{self.webui}/json/", timeout=10) as page:
            status: dict[str, Any] = json.loads(page.read())
            return status

    def stop(self) -> None:
        self._script("stop")


class TlsCluster:
    """docs/security.md's masters and worker, started from their documented lines: each master line as
    written for its host (the first line master1's, the second master2's; ``fill(text, addresses)`` puts
    the test's addresses for the masters' names), both on one Redis; then the worker line, which must register
    (a line that submits waits for its slot), and each master must be listed (``status``) at the address its
    line advertises. ``problems`` says, per documented line, what went wrong ('' for nothing); the daemons run
    until :meth:`stop`."""

    def __init__(self, files: TlsFiles, master_lines: list[str], worker_line: str,
                 fill: Callable[[str, list[str]], str], env: dict[str, str], redis_url: str, namespace: str,
                 logs: Path) -> None:
        self.files = files
        ports = [free_port() for _ in master_lines]
        self.addresses = [f"127.0.0.1:{port}" for port in ports]
        self.daemons: list[Daemon] = []
        self.problems = dict.fromkeys([*master_lines, worker_line], "")
        master_env = {**env, "SPARKYARD_REDIS_URL": redis_url, "SPARKYARD_NAMESPACE": namespace}
        for i, (line, port) in enumerate(zip(master_lines, ports)):
            filled = fill(line.replace("0.0.0.0:7070", f"0.0.0.0:{port}"), self.addresses)
            host = files.host / f"master{i + 1}"
            shutil.copytree(files.etc, host / "etc")  # its folder holds etc/ as its host holds /etc/sparkyard
            self.daemons.append(Daemon(filled, host, master_env, logs / f"tls-master{i + 1}.log"))
        for line, daemon in zip(master_lines, self.daemons):
            self.problems[line] = daemon.wait_output("listening on")
        if any(self.problems.values()):
            self.problems[worker_line] = "no TLS masters to join"
            return
        worker_env = {**env, "SPARKYARD_ID": "docs-tls-worker", "SPARKYARD_SLOTS": "1"}
        worker = Daemon(fill(worker_line, self.addresses), files.client, worker_env, logs / "tls-worker.log")
        self.daemons.append(worker)
        with Client(",".join(self.addresses), **files.client_settings()) as client:
            self.problems[worker_line] = worker.wait(lambda: any(w.id == "docs-tls-worker" and w.alive
                                                                 for w in client.workers()),
                                                     120, "the worker to register with the TLS masters")
            for line, address in zip(master_lines, self.addresses):  # each line's --advertise, its own master's
                try:
                    wait_for(lambda: address in {m.address for m in client.status().masters}, 60,
                             f"a master advertising {address}")
                except AssertionError:
                    seen = sorted(m.address for m in client.status().masters)
                    self.problems[line] = f"`{line}`: no master advertises its address ({address}); seen: {seen}"

    def stop(self) -> list[str]:
        """The worker first, then the masters, each by its pid: what did not exit 0 on SIGTERM."""
        return [problem for daemon in reversed(self.daemons) if (problem := daemon.stop())]


def run_standalone_worker(filled: str, standalone: Standalone, client: Client, env: dict[str, str],
                          worker_id: str, root: Path) -> str:
    """docs/clusters.md's worker on the standalone cluster: ready, its warm driver an application of that
    Spark master, then exit 0 on SIGTERM."""
    daemon = Daemon(filled, root / worker_id, {**env, "SPARKYARD_ID": worker_id, "SPARKYARD_SLOTS": "1"},
                    root / f"{worker_id}.log")
    try:
        problem = daemon.wait(lambda: any(w.id == worker_id and w.alive and w.readiness == pb.READINESS_READY
                                          for w in client.workers()), 180, "the worker to be ready")
        if not problem:
            status = standalone.status()
            alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
            if not alive or not status.get("activeapps"):
                problem = (f"`{filled}`: the Spark master {standalone.url} has {len(alive)} live workers and "
                           f"{len(status.get('activeapps', []))} applications (a warm driver is one)")
    finally:
        stopped = daemon.stop()
    return problem or stopped

