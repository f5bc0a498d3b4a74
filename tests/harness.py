"""Test harness: real redis-server, master and worker processes on free loopback ports.

Every process is started here and stopped by its pid (never by name). Waiting is always for a condition
with a deadline (:func:`wait_for`), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, TypeVar

import grpc
import redis

from sparkyard.channel import open_channel
from sparkyard.client import Client
from sparkyard.config import ClientConfig
from sparkyard.master.embedded_redis import find_redis_server
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg
from sparkyard.worker.children import Children
from sparkyard.worker.class_archive import ClassArchive

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "tests" / "jobs"

# Short lease/heartbeat so fault tests finish quickly; the ratio matches production (lease = 5 heartbeats).
TEST_LEASE_S = 4.0
TEST_HEARTBEAT_S = 0.8
# Test workers' drivers start their JVM with the quick JIT only: a test's Spark work is tiny, and the
# suite starts dozens of drivers on 2 cores, where C2 compiling during start-up costs ~15-20 % of each.
TEST_DRIVER_CONF = "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# Test workers' JVMs start from one class archive (worker/class_archive.py), made once for the checkout before
# the first test worker starts (not in the background by each cluster's workers), so every driver of the
# suite starts from it. Its name is keyed, so a run with another Java, pyspark or JVM options makes another.
TEST_CLASS_ARCHIVE_DIR = ROOT / ".sparkyard" / "test-class-archive"
# TEST_CLASS_ARCHIVE=off in the environment: test workers start their JVMs without one (to measure the difference).
TEST_CLASS_ARCHIVE = "off" if os.environ.get("TEST_CLASS_ARCHIVE") == "off" else str(TEST_CLASS_ARCHIVE_DIR)


# free_port() picks from here up to the kernel's ephemeral range.
PORT_FLOOR = 20_000


def free_port() -> int:
    """A TCP port nothing is bound to now, for a server that must be told its port (redis-server, a master
    with a fixed address). Chosen below the kernel's ephemeral range: a socket bound to port 0 (a Spark JVM's,
    a master of another test listening on :0) and every outgoing connection take their ports from that range,
    so a port picked there could be taken before the server binds it (ci80: a JVM took a master's)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = random.randint(PORT_FLOOR, low - 1) if low - 1 > PORT_FLOOR else 0
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))  # taken on any address: refused
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError(f"no free port between {PORT_FLOOR} and {low - 1} after 200 tries")


@functools.cache
def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


class WaitAborted(AssertionError):
    """Raised by a wait_for condition to fail the wait at once (a process it depends on died)."""


def wait_for(condition: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``condition`` until it returns something truthy; fail the test with ``what`` at the deadline,
    or at once when the condition raises :class:`WaitAborted`."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = condition()
            if value:
                return value
        except WaitAborted:
            raise
        except Exception as exc:  # conditions may fail while a process is starting
            last_error = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}" +
                                 (f" (last error: {last_error!r})" if last_error else ""))
        time.sleep(interval)


@dataclass
class RedisServer:
    port: int
    process: subprocess.Popen[bytes]
    data_dir: Path
    args: list[str] = field(default_factory=list)  # the command line, to start it again the same way

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True)

    def stop(self) -> None:
        stop_process(self.process)

    def restart(self) -> None:
        """Start it again (after it was killed) on the same port, data dir and options: it reloads its AOF."""
        assert self.process.poll() is not None, "restart of a redis-server that still runs"
        self.process = _spawn_redis(self.args, self.data_dir)
        wait_for(lambda: self.client().ping(), 10, "the restarted redis-server to answer PING")


def _spawn_redis(args: list[str], data_dir: Path) -> subprocess.Popen[bytes]:
    with (data_dir / "redis.log").open("ab") as log:
        return subprocess.Popen([find_redis_server(), *args], stdout=log, stderr=subprocess.STDOUT)


def start_redis(data_dir: Path, appendonly: bool = True, *, port: int = 0, extra: tuple[str, ...] = ()) -> RedisServer:
    """A redis-server on a free (or the given) loopback port; ``extra`` options follow the defaults here
    (``("--appendfsync", "always")``, ``("--replicaof", host, port)``)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(data_dir),
            "--appendonly", "yes" if appendonly else "no", "--save", "", "--maxmemory-policy", "noeviction", *extra]
    server = RedisServer(port, _spawn_redis(args, data_dir), data_dir, args)
    wait_for(lambda: server.client().ping(), 10, "redis-server to answer PING")
    return server


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    stop_processes([proc], sig, timeout)


def stop_processes(procs: list[subprocess.Popen[Any]], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Signal every process first, then wait for each (killed once ``timeout`` has passed): a worker's
    graceful stop (drain, its drivers' JVMs) takes seconds, and stopping the workers one after the other
    added those seconds up."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        proc.send_signal(sig)
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


@dataclass
class Cluster:
    """A master and workers as real processes, sharing one Redis."""

    redis_url: str
    root: Path
    namespace: str = "sy"
    token: str = ""
    client_settings: dict[str, str] = field(default_factory=dict)  # Client keyword arguments: TLS files
    profile_dir: str = ""  # set: the processes named in profile_processes write cProfile stats <dir>/<name>.prof
    profile_processes: tuple[str, ...] = ("master",)
    driver_conf: str = TEST_DRIVER_CONF  # benchmarks set "" to measure the default configuration
    class_archive_dir: str = TEST_CLASS_ARCHIVE  # the workers' --class-archive-dir
    master: Proc | None = None
    address: str = ""
    workers: dict[str, Proc] = field(default_factory=dict)
    http: dict[str, str] = field(default_factory=dict)  # process name → HOST:PORT of its /metrics, where served
    _clients: list[Client] = field(default_factory=list)

    def _env(self, name: str = "") -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKYARD_")}
        env["PYTHONUNBUFFERED"] = "1"
        if self.token:
            env["SPARKYARD_TOKEN"] = self.token
        if self.profile_dir and name in self.profile_processes:
            env["SPARKYARD_PROFILE"] = str(Path(self.profile_dir) / f"{name}.prof")
        return env

    def start_master(self, *extra: str, port: int = 0) -> str:
        return self.await_master(self.spawn_master(*extra, port=port))

    def spawn_master(self, *extra: str, port: int = 0) -> subprocess.Popen[bytes]:
        """Start a master process without waiting for it (:meth:`await_master` does), so a test can start
        several at the same moment."""
        self.root.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "sparkyard.master.main", "--listen", f"127.0.0.1:{port}",
                "--redis-url", self.redis_url, "--namespace", self.namespace,
                "--lease", str(TEST_LEASE_S), "--heartbeat", str(TEST_HEARTBEAT_S), "--reaper-interval", "0.5",
                "--data-dir", str(self.root / "master-data"), *extra]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=(self.root / "master.log").open("ab"),
                                env=self._env("master"))
        self.master = Proc("master", proc, self.root / "master.log")  # stopped in teardown even if it never listens
        return proc

    def await_master(self, proc: subprocess.Popen[bytes]) -> str:
        """Wait for a spawned master's ``listening on`` line; its address."""
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        log_path = self.root / "master.log"
        if "listening on" not in line:
            proc.wait(timeout=10)
            raise AssertionError(f"master did not start: {line}\n{log_path.read_text()[-3000:]}")
        self.address = line.split("listening on", 1)[1].split()[0]
        return self.address

    def start_worker(self, worker_id: str, *, slots: int = 2, runner: str = "session", group: str = "",
                     extra: tuple[str, ...] = ()) -> Proc:
        log_path = self.root / f"{worker_id}.log"
        args = [sys.executable, "-m", "sparkyard.worker.main", "--master", self.address, "--slots", str(slots),
                "--id", worker_id, "--runner", runner, "--work-dir", str(self.root / worker_id),
                "--spark-master", "local[1]", "--drain-timeout", "5", *extra]
        args += worker_jvm_args(self.driver_conf, self.class_archive_dir)
        if group:
            args += ["--group", group]
        proc = subprocess.Popen(args, stdout=log_path.open("ab"), stderr=subprocess.STDOUT, env=self._env(worker_id))
        worker = Proc(worker_id, proc, log_path)
        self.workers[worker_id] = worker
        return worker

    def start_with_worker(self, worker_id: str, slots: int, runner: str = "session") -> Client:
        """A master and one registered worker; returns a client of the master."""
        self.start_master()
        self.start_worker(worker_id, slots=slots, runner=runner)
        self.wait_workers(worker_id)
        return self.client()

    def client(self) -> Client:
        client = Client(self.address, token=self.token or None, **self.client_settings)
        self._clients.append(client)
        return client

    def channel(self) -> grpc.Channel:
        """A raw channel to the master, secured as the test's clients are (for calls a Client does not make)."""
        return open_channel(self.address, ClientConfig(**self.client_settings))

    def wait_workers(self, *worker_ids: str, timeout: float = 180) -> None:
        """Wait until the workers are registered and ready to run tasks (their runner is warm)."""
        client = self.client()
        wanted = set(worker_ids or self.workers)

        def ready() -> bool:
            alive = {w.id for w in client.workers() if w.alive and w.readiness == pb.READINESS_READY}
            for wid in wanted:
                if self.workers[wid].process.poll() is not None:
                    raise AssertionError(f"worker {wid} exited:\n{self.workers[wid].log()[-3000:]}")
            return wanted <= alive

        wait_for(ready, timeout, f"workers {sorted(wanted)} to register and be ready")

    def kill_worker(self, worker_id: str, sig: int = signal.SIGKILL) -> None:
        proc = self.workers[worker_id].process
        proc.send_signal(sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=10)

    def stop_master(self, sig: int = signal.SIGTERM) -> None:
        if self.master is not None:
            stop_process(self.master.process, sig)

    def stop(self) -> None:
        for client in self._clients:
            client.close()
        self._clients.clear()
        stop_processes([worker.process for worker in self.workers.values()], signal.SIGINT, timeout=20)
        if self.master is not None:
            stop_process(self.master.process)

    def logs(self) -> str:
        parts = [f"==== {p.name} ====\n{p.log()[-4000:]}" for p in [*self.workers.values(), self.master] if p]
        return "\n".join(parts)


def worker_jvm_args(driver_conf: str = TEST_DRIVER_CONF, class_archive_dir: str = TEST_CLASS_ARCHIVE) -> list[str]:
    """A test worker's flags for its drivers' JVMs: ``driver_conf`` and the class archive (the suite's own made
    now unless it exists: a worker given no directory would make another of the same JVMs in its default one)."""
    args = ["--conf", driver_conf] if driver_conf else []
    if _archive_ready(driver_conf, class_archive_dir):
        args += ["--class-archive-dir", class_archive_dir]
    return args


def worker_jvm_env(driver_conf: str = TEST_DRIVER_CONF, class_archive_dir: str = TEST_CLASS_ARCHIVE) -> dict[str, str]:
    """The same for workers a test starts from a command line it does not write (a documented line, ``sparkyard
    local``): the environment that gives them. The JVM options go in ``JAVA_TOOL_OPTIONS``, not in a
    ``SPARKYARD_CONF`` that a line's own ``--conf`` would replace; the archive's name is made of the same
    options either way, so their drivers map the suite's archive instead of making one of their own."""
    env = {"JAVA_TOOL_OPTIONS": driver_conf.split("=", 1)[1]} if driver_conf else {}
    if _archive_ready(driver_conf, class_archive_dir):
        env["SPARKYARD_CLASS_ARCHIVE_DIR"] = class_archive_dir
    return env


def _archive_ready(driver_conf: str, class_archive_dir: str) -> bool:
    """Whether workers get ``class_archive_dir``; the suite's own archive is made first unless it exists."""
    if class_archive_dir == str(TEST_CLASS_ARCHIVE_DIR):
        shared_class_archive(driver_conf)
    return bool(class_archive_dir)


@functools.lru_cache(maxsize=None)
def shared_class_archive(driver_conf: str) -> Path | None:
    """The test workers' class archive for ``driver_conf`` (``k=v``), made now unless it exists; another test
    process making it at the same time is waited for. None when it cannot be made (workers start without)."""
    conf = dict([driver_conf.split("=", 1)]) if driver_conf else {}
    work = TEST_CLASS_ARCHIVE_DIR / f"maker-{os.getpid()}"
    archive = ClassArchive(TEST_CLASS_ARCHIVE_DIR, conf, Children(work))
    path = archive.path
    if path is None or path.is_file():
        return path

    async def make() -> None:
        archive.make_soon()
        if archive._making is not None:
            await archive._making

    with ThreadPoolExecutor(1) as pool:  # its own event loop, whatever the calling test runs in
        pool.submit(asyncio.run, make()).result()
    shutil.rmtree(work, ignore_errors=True)
    if not archive.rejected:
        wait_for(path.is_file, 600, f"the class archive {path} another test process is making")
    return path if path.is_file() else None


@contextmanager
def cluster_with_worker(redis_url: str, root: Path, worker_id: str, slots: int, *, namespace: str,
                        runner: str = "session") -> Iterator[tuple[Cluster, Client]]:
    """A master and one ready worker (for a module's tests): the cluster's logs are printed when starting
    it or a test fails, and every process is stopped at the end."""
    cluster = Cluster(redis_url, root, namespace=namespace)
    try:
        yield cluster, cluster.start_with_worker(worker_id, slots, runner)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


def fired_after(client: Client, job_id: str, moment: float) -> list[pb.Run]:
    """Runs of a job fired after ``moment`` (epoch seconds)."""
    return [r for r in client.runs(job_id, limit=1000) if r.fired_at.ToMilliseconds() > moment * 1000]


def no_duplicate_firings(client: Client, job_id: str) -> list[int]:
    """Assert that no scheduled time of a job fired twice; the gaps between its scheduled times (ms)."""
    times = sorted(r.scheduled_at.ToMilliseconds() for r in client.runs(job_id, limit=1000))
    assert len(times) == len(set(times)), f"a scheduled time fired twice: {times}"
    return [b - a for a, b in zip(times, times[1:])]


class FakeWorker:
    """The worker protocol driven by hand, to produce what a real worker would not (stale results)."""

    def __init__(self, channel: grpc.Channel, worker_id: str, slots: int = 1) -> None:
        self._outbox: queue.Queue[pb.WorkerMessage | None] = queue.Queue()
        self._outbox.put(pb.WorkerMessage(register=pb.Register(worker_id=worker_id, slots=slots)))
        self._channel = channel
        self._stream = pbg.WorkerServiceStub(self._channel).Connect(iter(self._outbox.get, None))
        self.registered = self.expect("registered").registered

    def expect(self, kind: str) -> pb.MasterMessage:
        """The next message of ``kind`` (others, like heartbeat acks, are skipped)."""
        for message in self._stream:
            if message.WhichOneof("kind") == kind:
                return message
        raise AssertionError(f"stream ended before a {kind} message")

    def result(self, task: pb.TaskAssignment, value: object) -> None:
        self._outbox.put(pb.WorkerMessage(reports=pb.Reports(results=[pb.TaskResult(
            task_id=task.task_id, fencing_token=task.fencing_token, outcome=pb.ATTEMPT_SUCCEEDED,
            result_json=json.dumps(value))])))

    def close(self) -> None:
        self._outbox.put(None)
        self._channel.close()
