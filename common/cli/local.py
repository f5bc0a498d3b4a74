"""``sparkyard local``: Redis, a master and N workers on this machine, in one command (for development).

The master owns an embedded Redis in ``<data-dir>/redis``; every process is a child of this command and
is stopped with it (SIGTERM: workers drain, the master stops its Redis). It talks plaintext on loopback
(``SPARKYARD_TLS_*`` of the environment are not passed on). Processes log to
``<data-dir>/logs/*.log``. A worker that dies is started again under the same id (the master then
requeues at once the tasks it lost); if the master dies, everything stops. A worker that keeps dying
soon after it starts (a broken Spark or Java setup) is restarted with an exponential backoff, so it
does not spin a JVM start every half second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sparkyard.config import DEFAULT_LISTEN
from sparkyard.errors import SparkyardError, Unavailable
from sparkyard.runners import DEFAULT_RUNNER
from sparkyard.v1 import sparkyard_pb2 as pb

# How long the cluster may take to come up: "ready" waits for every worker's warm drivers (Spark, ~5–10 s
# each on a quiet machine, over a minute for four on a loaded 2-core one).
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0
# A worker that exits within STABLE_S of its start waits before its restart: RESTART_BASE_S, doubling
# with each such exit in a row up to RESTART_MAX_S. After a run of STABLE_S or more it restarts at once.
STABLE_S = 60.0
RESTART_BASE_S = 1.0
RESTART_MAX_S = 60.0
# The local cluster talks plaintext on loopback: TLS settings of the caller's environment (meant for a
# remote cluster) are not passed on to its processes.
PLAINTEXT_DROPS = ("SPARKYARD_TLS_",)


def still_warming(workers: Sequence[pb.WorkerInfo], wanted: int) -> str:
    """What keeps the cluster from being ready, in one line ('' when nothing does): a registered worker whose
    drivers are still warming offers no slot, so a job submitted on "ready" would only wait in the queue."""
    alive = [w for w in workers if w.alive]
    if len(alive) < wanted:
        return f"{len(alive)} of {wanted} workers registered"
    return "; ".join(
        f"{w.id} {pb.Readiness.Name(w.readiness).removeprefix('READINESS_')}"
        f"{': ' + w.readiness_reason if w.readiness_reason else ''} ({w.ready_slots} of {w.slots} slots ready)"
        for w in sorted(alive, key=lambda w: w.id)
        if w.readiness not in (pb.READINESS_READY, pb.READINESS_UNSPECIFIED))


class StartInterrupted(BaseException):
    """SIGINT or SIGTERM while the cluster starts (a BaseException: no ``except Exception`` eats it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@dataclass
class LocalCluster:
    workers: int = 2
    slots: int = 2
    listen: str = DEFAULT_LISTEN
    data_dir: Path = Path(".sparkyard/local")
    runner: str = DEFAULT_RUNNER
    token: str = ""
    http: str = ""  # HOST:PORT of the master's console and /metrics ('' for none)
    extra_master_args: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    address: str = ""
    restarts: int = 0
    monotonic: Callable[[], float] = time.monotonic
    _started_at: dict[int, float] = field(default_factory=dict)  # worker number → when it was started
    _quick_exits: dict[int, int] = field(default_factory=dict)  # exits in a row within STABLE_S of a start
    _restart_at: dict[int, float] = field(default_factory=dict)  # dead workers waiting for their restart
    _spawning: bool = False
    _held_signal: int = 0

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(PLAINTEXT_DROPS)}
        if self.token:
            env["SPARKYARD_TOKEN"] = self.token
        out = (logs / f"{name}.log").open("ab")
        # A Ctrl-C arriving between the start of a process and its place in the list would leave it running
        # after stop(): interrupt() holds it until the process is listed.
        self._spawning = True
        try:
            proc = subprocess.Popen([sys.executable, "-m", *args],
                                    stdout=subprocess.PIPE if name == "master" else out,
                                    stderr=out, stdin=subprocess.DEVNULL, env=env)
            self.processes.append(proc)
        finally:
            self._spawning = False
        if self._held_signal:
            raise StartInterrupted(self._held_signal)
        return proc

    def interrupt(self, signum: int) -> None:
        """Leave :meth:`start` at once (for a SIGINT/SIGTERM handler): raises StartInterrupted now, or as
        soon as the process being started is listed, so that :meth:`stop` stops it too."""
        if self._spawning:
            self._held_signal = signum
            return
        raise StartInterrupted(signum)

    @property
    def logs(self) -> Path:
        """Where the processes log (absolute, so a message naming it is right from any directory)."""
        return self.data_dir.resolve() / "logs"

    def start(self) -> str:
        """Start everything; returns the master's address once every worker is registered and ready."""
        self.start_master()
        for i in range(1, self.workers + 1):
            self._start_worker(i)
        self._wait_ready()
        return self.address

    def start_master(self) -> str:
        """Start the master (and its embedded Redis); returns its address once it listens."""
        self.data_dir = self.data_dir.resolve()
        http = ["--http", self.http] if self.http else []
        master = self._spawn("master", ["sparkyard.master.main", "--listen", self.listen, "--data-dir",
                                        str(self.data_dir), *http, *self.extra_master_args])
        assert master.stdout is not None
        line = master.stdout.readline().decode()
        if "listening on" not in line:
            master.wait(timeout=30)
            tail = (self.logs / "master.log").read_text(errors="replace")[-3000:]
            self.stop()
            raise SparkyardError(f"the master did not start (exit {master.returncode}):\n{tail}")
        self.address = line.split("listening on", 1)[1].split()[0]
        return self.address

    def _start_worker(self, i: int) -> subprocess.Popen[bytes]:
        self._started_at[i] = self.monotonic()
        return self._spawn(f"worker-{i}", [
            "sparkyard.worker.main", "--master", self.address, "--slots", str(self.slots), "--id", f"local-{i}",
            "--runner", self.runner, "--work-dir", str(self.data_dir / f"worker-{i}"),
        ])

    def supervise(self) -> bool:
        """Restart workers that died; False when the master has exited (the cluster is gone)."""
        if self.processes[0].poll() is not None:
            return False
        now = self.monotonic()
        for i, proc in enumerate(list(self.processes[1:]), start=1):
            if proc.poll() is None:
                continue
            if i not in self._restart_at:
                delay = self._restart_delay(i, now)
                self._restart_at[i] = now + delay
                when = "again" if delay == 0 else f"again in {delay:g}s (it keeps exiting soon after its start)"
                print(f"sparkyard local: worker local-{i} exited with code {proc.returncode}; starting it {when}",
                      file=sys.stderr, flush=True)
            if now >= self._restart_at[i]:
                del self._restart_at[i]
                self.processes[i] = self._start_worker(i)
                self.processes.pop()  # _spawn appended it; it now sits in its own place
                self.restarts += 1
        return True

    def _restart_delay(self, i: int, now: float) -> float:
        if now - self._started_at.get(i, now) >= STABLE_S:
            self._quick_exits[i] = 0
            return 0.0
        exits = self._quick_exits.get(i, 0) + 1
        self._quick_exits[i] = exits
        return min(RESTART_MAX_S, RESTART_BASE_S * 2 ** (exits - 1))

    def _wait_ready(self) -> None:
        from sparkyard.client import Client

        deadline = time.monotonic() + START_TIMEOUT_S
        waiting = "the master does not answer"
        with Client(self.address, token=self.token or None, tls_ca="", tls_cert="", tls_key="") as client:
            while True:
                for proc in self.processes:
                    if proc.poll() is not None:
                        self.stop()
                        raise SparkyardError(f"a cluster process exited with code {proc.returncode}; "
                                             f"see {self.logs}")
                try:
                    waiting = still_warming(client.workers(), self.workers)
                    if not waiting:
                        return
                except Unavailable:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise SparkyardError(f"the cluster was not ready within {START_TIMEOUT_S:.0f}s ({waiting}); "
                                         f"see {self.logs}")
                time.sleep(0.2)  # polling the cluster's state from outside, with a deadline

    def stop(self) -> None:
        """SIGTERM workers (they drain), then the master (it stops its Redis); SIGKILL what lingers."""
        workers, master = self.processes[1:], self.processes[:1]
        for group in (workers, master):
            for proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for proc in group:
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.processes.clear()
