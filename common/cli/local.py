"""``sparkyard local``: Redis, a master and N workers on this machine, in one command (for development).

The master owns an embedded Redis in ``<data-dir>/redis``; every process is a child of this command and
is stopped with it (SIGTERM: workers drain, the master stops its Redis). Processes log to
``<data-dir>/logs/*.log``. A worker that dies is started again under the same id (the master then
requeues at once the tasks it lost); if the master dies, everything stops.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from sparkyard.errors import SparkyardError, Unavailable

# How long the cluster may take to come up (a worker's session runner needs Spark, ~5–10 s).
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 60.0


@dataclass
class LocalCluster:
    workers: int = 2
    slots: int = 2
    listen: str = "127.0.0.1:7070"
    data_dir: Path = Path(".sparkyard/local")
    runner: str = "session"
    token: str = ""
    extra_master_args: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    address: str = ""
    restarts: int = 0

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        logs = self.data_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ}
        if self.token:
            env["SPARKYARD_TOKEN"] = self.token
        out = (logs / f"{name}.log").open("ab")
        proc = subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE if name == "master" else out,
                                stderr=out, stdin=subprocess.DEVNULL, env=env)
        self.processes.append(proc)
        return proc

    def start(self) -> str:
        """Start everything; returns the master's address once every worker is registered."""
        self.data_dir = self.data_dir.resolve()
        master = self._spawn("master", ["sparkyard.master.main", "--listen", self.listen, "--data-dir",
                                        str(self.data_dir), *self.extra_master_args])
        assert master.stdout is not None
        line = master.stdout.readline().decode()
        if "listening on" not in line:
            master.wait(timeout=30)
            tail = (self.data_dir / "logs" / "master.log").read_text(errors="replace")[-3000:]
            self.stop()
            raise SparkyardError(f"the master did not start (exit {master.returncode}):\n{tail}")
        self.address = line.split("listening on", 1)[1].split()[0]
        for i in range(1, self.workers + 1):
            self._start_worker(i)
        self._wait_ready()
        return self.address

    def _start_worker(self, i: int) -> subprocess.Popen[bytes]:
        return self._spawn(f"worker-{i}", [
            "sparkyard.worker.main", "--master", self.address, "--slots", str(self.slots), "--id", f"local-{i}",
            "--runner", self.runner, "--work-dir", str(self.data_dir / f"worker-{i}"),
        ])

    def supervise(self) -> bool:
        """Restart workers that died; False when the master has exited (the cluster is gone)."""
        if self.processes[0].poll() is not None:
            return False
        for i, proc in enumerate(list(self.processes[1:]), start=1):
            if proc.poll() is not None:
                print(f"sparkyard: worker local-{i} exited with code {proc.returncode}; starting it again",
                      file=sys.stderr, flush=True)
                self.processes[i] = self._start_worker(i)
                self.processes.pop()  # _spawn appended it; it now sits in its own place
                self.restarts += 1
        return True

    def _wait_ready(self) -> None:
        from sparkyard.client import Client

        deadline = time.monotonic() + START_TIMEOUT_S
        with Client(self.address, token=self.token or None) as client:
            while True:
                for proc in self.processes:
                    if proc.poll() is not None:
                        self.stop()
                        raise SparkyardError(f"a cluster process exited with code {proc.returncode}; "
                                             f"see {self.data_dir / 'logs'}")
                try:
                    if len([w for w in client.workers() if w.alive]) >= self.workers:
                        return
                except Unavailable:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise SparkyardError(f"workers did not register within {START_TIMEOUT_S:.0f}s; "
                                         f"see {self.data_dir / 'logs'}")
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
