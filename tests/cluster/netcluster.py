"""Redis, masters and workers as separate hosts of a private test network (:mod:`netns`).

* Redis and each master run in a network namespace of their own and listen on their host address, not on
  loopback. So masters serve mutual TLS with certificates from ``sparkyard certs`` (made once the network's
  addresses are known: every address of its /24 is in the server certificate) and role tokens from files:
  workers use the worker token, the test's clients and CLI calls the admin token.
* Each worker runs in its own network namespace **and** its own mount namespace, with an empty tmpfs
  mounted over the client's submit directory: like a worker on another machine, it cannot read the files
  the client submits from. ``tests/cluster/hostsite`` is on its PYTHONPATH (the code "installed" on it).
* The test process is the client host: it reaches the others through the bridge.

Every process is started with ``ip netns exec`` (which, like ``unshare`` and ``sh -c 'exec …'``, execs),
so the pid held here is the server's own; it is stopped by that pid, and whatever else is left in a
host's namespace (a JVM) is killed when the network is closed. Waits are conditions with deadlines.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

import redis

from harness import WaitAborted, wait_for
from netns import Host, Network, NetError, netns_pids
from sparkyard.certs import DevCerts, make_dev_certs
from sparkyard.client import Client
from sparkyard.master.embedded_redis import find_redis_server
from sparkyard.v1 import sparkyard_pb2 as pb

T = TypeVar("T")
HOST_SITE = Path(__file__).resolve().parent / "hostsite"
REDIS_PORT = 6379
MASTER_PORT = 7070
# As tests/harness.py: short leases so fault tests finish quickly (lease = 5 heartbeats, as in production).
TEST_LEASE_S = 4.0
TEST_HEARTBEAT_S = 0.8
PROXY_VARS = ("http_proxy", "https_proxy", "grpc_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")
LOG_TAIL = 6000


def wait_until(condition: Callable[[], T], timeout: float, what: str, watch: tuple[HostProcess, ...] = (),
               interval: float = 0.05) -> T:
    """harness.wait_for, failing at once if a process in ``watch`` exits meanwhile (with the end of its log)."""

    def watched() -> T:
        for proc in watch:
            if proc.process.poll() is not None:
                raise WaitAborted(f"{proc.name} exited with {proc.process.returncode} while waiting for {what}:"
                                  f"\n{proc.log()[-3000:]}")
        return condition()

    return wait_for(watched, timeout, what, interval)


def _ns_inode(pid: int | str, kind: str) -> int:
    return os.stat(f"/proc/{pid}/ns/{kind}").st_ino


@dataclass
class HostProcess:
    """A server process on a host: the pid is the server's own (every launcher on the way execs)."""

    name: str
    host: Host
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        if self.alive():
            self.process.send_signal(sig)


@dataclass
class CliCall:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str


@dataclass
class NetCluster:
    """Hosts of one test: ``redis``, ``master`` (more masters possible) and workers named by their id."""

    root: Path  # logs and the hosts' own directories (visible to the test, not under submit_dir)
    submit_dir: Path  # the client's directory: hidden from every worker by a tmpfs
    token: str = field(default_factory=lambda: secrets.token_hex(16))  # admin
    worker_token: str = field(default_factory=lambda: secrets.token_hex(16))
    lease_s: float = TEST_LEASE_S
    heartbeat_s: float = TEST_HEARTBEAT_S
    namespace: str = "sy"
    network: Network = field(default_factory=Network)
    redis: HostProcess | None = None
    masters: dict[str, HostProcess] = field(default_factory=dict)
    workers: dict[str, HostProcess] = field(default_factory=dict)
    cli_calls: list[CliCall] = field(default_factory=list)
    master_args: dict[str, tuple[str, ...]] = field(default_factory=dict)  # each master's extra arguments
    worker_args: tuple[str, ...] = ()  # every worker's extra arguments (before a start's own)
    redis_url: str = ""  # what masters are given (default: redis:// of the ``redis`` host; a sentinel URL for HA)
    _clients: list[Client] = field(default_factory=list)
    _stopped: list[HostProcess] = field(default_factory=list)  # earlier processes of restarted hosts, for logs
    certs: DevCerts | None = None

    # ---- set-up ------------------------------------------------------------------------------------

    def create_network(self) -> None:
        """The network, then the certificates and token files of its hosts (in ``root/secrets``)."""
        self.network.create()
        assert self.network.subnet is not None
        secrets_dir = self.root / "secrets"
        hosts = [str(address) for address in self.network.subnet.hosts()]
        self.certs = make_dev_certs(secrets_dir, hosts)
        for name, token in (("admin", self.token), ("worker", self.worker_token)):
            path = secrets_dir / f"{name}.token"
            path.write_text(token)
            path.chmod(0o600)

    def token_file(self, role: str) -> str:
        return str(self.root / "secrets" / f"{role}.token")

    def tls(self) -> dict[str, str]:
        """The client side of mutual TLS: Client keyword arguments."""
        assert self.certs is not None, "create_network() first"
        return {"tls_ca": str(self.certs.ca), "tls_cert": str(self.certs.client_cert),
                "tls_key": str(self.certs.client_key)}

    def tls_flags(self) -> list[str]:
        return [arg for name, value in self.tls().items() for arg in (f"--{name.replace('_', '-')}", value)]

    def start(self, workers: tuple[str, ...] = ("w1", "w2"), *, slots: int = 1, runner: str = "session",
              master_args: tuple[str, ...] = (), ready_timeout: float = 180) -> NetCluster:
        """The network, Redis, one master and ``workers``; returns once every worker is ready."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.submit_dir.mkdir(parents=True, exist_ok=True)
        self.create_network()
        self.start_redis()
        self.start_master(*master_args)
        for worker_id in workers:
            self.start_worker(worker_id, slots=slots, runner=runner)
        self.wait_workers(*workers, timeout=ready_timeout)
        return self

    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("SPARKYARD_") and k not in PROXY_VARS and k != "PYTHONPATH"}
        env["PYTHONUNBUFFERED"] = "1"
        env.update(extra)
        return env

    def spawn(self, name: str, host: Host, argv: list[str], env: dict[str, str] | None = None) -> HostProcess:
        """``argv`` on ``host``, logging to ``root/NAME.log`` (appended to across restarts)."""
        return self._spawn(name, host, argv, env if env is not None else self._env())

    def _spawn(self, name: str, host: Host, argv: list[str], env: dict[str, str]) -> HostProcess:
        log_path = self.root / f"{name}.log"
        with log_path.open("ab") as log:
            log.write(f"==== {time.strftime('%H:%M:%S')} start on {host.netns} ({host.address}): "
                      f"{' '.join(argv)}\n".encode())
            log.flush()
            process = subprocess.Popen(host.exec_argv(*argv), stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return HostProcess(name, host, process, log_path)

    def add_host(self, name: str) -> Host:
        """Host ``name`` on the network (made on first use)."""
        return self._host(name)

    def _host(self, name: str) -> Host:
        return self.network.hosts.get(name) or self.network.add_host(name)

    def start_redis(self) -> str:
        host = self._host("redis")
        data = self.root / "redis"
        data.mkdir(parents=True, exist_ok=True)
        self.redis = proc = self._spawn("redis", host, [
            find_redis_server(), "--bind", host.address, "--port", str(REDIS_PORT), "--protected-mode", "no",
            "--dir", str(data), "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
        ], self._env())

        def pong() -> bool:
            with redis.Redis(host=host.address, port=REDIS_PORT, socket_timeout=1, socket_connect_timeout=1) as r:
                return bool(r.ping())

        wait_until(pong, 30, f"redis-server on {host.address}:{REDIS_PORT} to answer PING", watch=(proc,))
        return self.redis_address

    @property
    def redis_address(self) -> str:
        assert self.redis is not None
        return f"{self.redis.host.address}:{REDIS_PORT}"

    def start_master(self, *extra: str, name: str = "master") -> str:
        """A master on host ``name`` listening on its host address (port 7070): mutual TLS, role tokens. A
        restart with no ``extra`` gets the arguments of the master's first start."""
        assert self.certs is not None, "create_network() first"
        extra = extra or self.master_args.get(name, ())
        self.master_args[name] = extra
        host = self._host(name)
        address = f"{host.address}:{MASTER_PORT}"
        old = self.masters.get(name)
        if old is not None:
            assert not old.alive(), f"{name} still runs"
            self._stopped.append(old)
        proc = self._spawn(name, host, [
            sys.executable, "-m", "sparkyard.master.main", "--listen", address,
            "--token-file", self.token_file("admin"), "--worker-token-file", self.token_file("worker"),
            "--tls-cert", str(self.certs.server_cert), "--tls-key", str(self.certs.server_key),
            "--tls-client-ca", str(self.certs.ca),
            "--redis-url", self.redis_url or f"redis://{self.redis_address}/0", "--namespace", self.namespace,
            "--lease", str(self.lease_s), "--heartbeat", str(self.heartbeat_s), "--reaper-interval", "0.5",
            "--data-dir", str(self.root / name / "data"), *extra,
        ], self._env())
        self.masters[name] = proc
        wait_until(lambda: f"listening on {address}" in proc.log(), 60, f"{name} to listen on {address}",
                   watch=(proc,))
        return address

    @property
    def address(self) -> str:
        """The first master's HOST:PORT on the test network."""
        return self.master_address("master")

    def master_address(self, name: str = "master") -> str:
        return f"{self.masters[name].host.address}:{MASTER_PORT}"

    def start_worker(self, worker_id: str, *, slots: int = 1, runner: str = "session", extra: tuple[str, ...] = (),
                     masters: tuple[str, ...] = (), env: dict[str, str] | None = None) -> HostProcess:
        """A worker on host ``worker_id`` (created on first use; a restart reuses it), in a mount namespace of
        its own where ``submit_dir`` is an empty tmpfs. ``masters``: names of the masters it knows (default
        all of them, in start order); ``env`` is added to its environment."""
        host = self._host(worker_id)
        old = self.workers.get(worker_id)
        if old is not None:
            assert not old.alive(), f"worker {worker_id} still runs"
            self._stopped.append(old)
        master_list = ",".join(self.master_address(m) for m in (masters or tuple(self.masters)))
        work = self.root / worker_id
        work.mkdir(parents=True, exist_ok=True)
        worker = [
            sys.executable, "-m", "sparkyard.worker.main", "--master", master_list,
            "--token-file", self.token_file("worker"), *self.tls_flags(),
            "--slots", str(slots), "--id", worker_id, "--runner", runner, "--work-dir", str(work / "work"),
            "--spark-master", "local[1]", "--drain-timeout", "5", *self.worker_args, *extra,
        ]
        # The JVM resolves the host name; in a namespace with no DNS, bind Spark to loopback instead.
        spark_env = {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost", **(env or {})}
        proc = self._spawn(worker_id, host, self.hidden_argv(*worker),
                           self._env(PYTHONPATH=str(HOST_SITE), **spark_env))
        self.workers[worker_id] = proc
        own_mnt = _ns_inode("self", "mnt")

        def execed() -> bool:
            cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
            return b"sparkyard.worker.main" in cmdline and _ns_inode(proc.pid, "mnt") != own_mnt

        wait_until(execed, 30, f"worker {worker_id}'s launcher to exec the worker (pid {proc.pid})", watch=(proc,))
        assert _ns_inode(proc.pid, "net") != _ns_inode("self", "net")
        assert not os.path.ismount(self.submit_dir), "the worker's tmpfs leaked into the client's mount namespace"
        return proc

    def hidden_argv(self, *argv: str) -> list[str]:
        """``argv`` run in a mount namespace of its own where ``submit_dir`` is an empty tmpfs (``unshare`` and
        ``sh`` exec, so a process started so has the pid of ``argv`` itself)."""
        return ["unshare", "--mount", "--propagation", "private",
                "sh", "-c", 'mount -t tmpfs -o size=1m,mode=0755 sparkyard-hidden "$0" && exec "$@"',
                str(self.submit_dir), *argv]

    def wait_workers(self, *worker_ids: str, timeout: float = 180) -> None:
        """Until the workers are registered, alive and ready (their drivers warm), as the leading master sees
        them (asked through every master: one that cannot name the leader just now does not decide it)."""
        wanted = set(worker_ids or self.workers)

        def ready() -> bool:
            up = {w.id for w in client.workers() if w.alive and w.readiness == pb.READINESS_READY}
            return wanted <= up

        with self.failover_client() as client:
            wait_until(ready, timeout, f"workers {sorted(wanted)} to register and be ready",
                       watch=tuple(self.workers[w] for w in wanted))

    # ---- the client host ---------------------------------------------------------------------------

    def client(self, address: str | None = None) -> Client:
        client = Client(address or self.address, token=self.token, **self.tls())
        self._clients.append(client)
        return client

    def failover_client(self, timeout: float = 5) -> Client:
        """A client given every master (it follows whichever leads); its calls time out after ``timeout`` (the
        default is 30 s), so a call to a paused leader soon moves on to the next master. The caller closes it."""
        return Client(",".join(self.master_address(m) for m in self.masters), token=self.token, timeout=timeout,
                      **self.tls())

    def role(self, name: str) -> str:
        """Master ``name``'s role as it answers it (``leader``, ``standby``), or ``unreachable``."""
        try:
            with Client(self.master_address(name), token=self.token, timeout=2, **self.tls()) as c:
                return c.status().role
        except Exception:
            return "unreachable"

    def leader(self, timeout: float = 60) -> str:
        """The name of the master that leads, once one does."""
        name = wait_until(lambda: next((m for m in self.masters if self.role(m) == "leader"), None), timeout,
                          "a master to lead")
        assert name is not None
        return name

    def cli(self, *args: str, cwd: Path | None = None, timeout: float = 240,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``sparkyard ARGS`` on the client host, in ``cwd`` (default the submit directory), with
        SPARKYARD_MASTER, SPARKYARD_TOKEN (admin) and SPARKYARD_TLS_* set."""
        script = Path(sys.executable).with_name("sparkyard")
        argv = [str(script), *args] if script.exists() else [sys.executable, "-m", "sparkyard.cli.main", *args]
        tls = {f"SPARKYARD_{name.upper()}": value for name, value in self.tls().items()}
        full_env = self._env(**{"SPARKYARD_MASTER": self.address, "SPARKYARD_TOKEN": self.token, **tls,
                                **(env or {})})
        proc = subprocess.run(argv, cwd=cwd or self.submit_dir, env=full_env, capture_output=True, text=True,
                              timeout=timeout)
        self.cli_calls.append(CliCall(argv, proc.returncode, proc.stdout, proc.stderr))
        return proc

    # ---- faults ------------------------------------------------------------------------------------

    def process(self, name: str) -> HostProcess:
        if self.redis is not None and name == "redis":
            return self.redis
        return self.workers.get(name) or self.masters[name]

    def host(self, name: str) -> Host:
        return self.network.hosts[name]

    def stop_process(self, name: str, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        """Send ``sig`` (a stopped process is continued first) and wait for the exit; SIGKILL at the deadline."""
        proc = self.process(name)
        proc.signal(signal.SIGCONT)
        proc.signal(sig)
        try:
            return proc.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.signal(signal.SIGKILL)
            return proc.process.wait(timeout=10)

    def stop_worker(self, worker_id: str, timeout: float = 20) -> int:
        """SIGTERM (the worker drains for at most its --drain-timeout) and wait for the exit."""
        return self.stop_process(worker_id, signal.SIGTERM, timeout)

    def forget_worker(self, worker_id: str) -> None:
        """A stopped worker is no longer one of the network's (its log stays among the stopped processes')."""
        proc = self.workers.pop(worker_id)
        assert not proc.alive(), f"worker {worker_id} still runs"
        self._stopped.append(proc)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the process of host ``name``; for SIGKILL, wait until it is gone."""
        proc = self.process(name)
        proc.signal(sig)
        if sig == signal.SIGKILL:
            proc.process.wait(timeout=10)

    def freeze(self, name: str, whole_host: bool = False) -> None:
        """SIGSTOP the host's server process, or with ``whole_host`` every process in its namespace (its drivers
        and JVMs too, as a frozen VM would be)."""
        self._signal_host(name, signal.SIGSTOP, whole_host)

    def thaw(self, name: str, whole_host: bool = False) -> None:
        self._signal_host(name, signal.SIGCONT, whole_host)

    def _signal_host(self, name: str, sig: int, whole_host: bool) -> None:
        if not whole_host:
            self.process(name).signal(sig)
            return
        for pid in netns_pids(self.host(name).netns):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def link_down(self, name: str) -> None:
        """Cut host ``name`` off the network (its veth on the bridge goes down); processes keep running."""
        self.host(name).link_down()

    def link_up(self, name: str) -> None:
        self.host(name).link_up()

    def partition(self, name: str, *others: str) -> None:
        """Cut host ``name`` off from each of ``others`` (both ways; blackhole routes): open connections between
        them hang, as in a real partition, while each still reaches every other host and the client."""
        for other in others:
            self.host(name).block(self.host(other).address)
            self.host(other).block(self.host(name).address)

    def heal(self, name: str, *others: str) -> None:
        for other in others:
            self.host(name).unblock(self.host(other).address)
            self.host(other).unblock(self.host(name).address)

    def netem(self, name: str, *spec: str, both_ways: bool = True) -> None:
        """``tc … netem SPEC`` on host ``name``'s link, e.g. ``netem("w1", "delay", "200ms", "loss", "10%")``."""
        self.host(name).netem(*spec, both_ways=both_ways)

    def clear_netem(self, name: str) -> None:
        self.host(name).clear_netem()

    # ---- reports and teardown ----------------------------------------------------------------------

    def logs(self) -> str:
        """The end of every process's log, the workers' driver logs and the CLI calls, for a failure report."""
        procs = [*self._stopped, *([self.redis] if self.redis else []), *self.masters.values(), *self.workers.values()]
        parts = []
        for proc in procs:
            state = "running" if proc.alive() else f"exit {proc.process.returncode}"
            parts.append(f"==== {proc.name} (pid {proc.pid}, {proc.host.netns} {proc.host.address}, {state}) "
                         f"{proc.log_path} ====\n{proc.log()[-LOG_TAIL:]}")
        for worker_id in self.workers:
            for path in sorted((self.root / worker_id / "work" / "drivers").glob("*.log")):
                parts.append(f"==== {worker_id} {path.name} ====\n{path.read_text(errors='replace')[-2000:]}")
        for call in self.cli_calls:
            parts.append(f"==== cli {' '.join(call.argv[1:])}: exit {call.returncode} ====\n"
                         f"{call.stdout[-2000:]}\n-- stderr --\n{call.stderr[-2000:]}")
        return "\n".join(parts)

    def stop(self) -> list[str]:
        """Stop every process (SIGTERM, SIGKILL after 10 s), then remove the network; returns what went wrong."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        stop_all([*self.workers.values(), *self.masters.values(), *([self.redis] if self.redis else [])])
        try:
            errors = self.network.close()
        except NetError as exc:
            errors = [str(exc)]
        leftovers = self.network.leftovers()
        if leftovers:
            errors.append(f"left behind: {leftovers}")
        return errors


def stop_all(procs: list[HostProcess], timeout: float = 10) -> list[HostProcess]:
    """SIGCONT and SIGTERM to each (by pid), then wait; those still running at ``timeout`` get SIGKILL and are
    returned."""
    for proc in procs:
        proc.signal(signal.SIGCONT)
        proc.signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    killed = []
    for proc in procs:
        try:
            proc.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            killed.append(proc)
            proc.signal(signal.SIGKILL)
            proc.process.wait(timeout=10)
    return killed


def results(run: pb.Run) -> list[Any]:
    """The tasks' results of a finished run (JSON-decoded), in task order."""
    return [json.loads(t.result_json) if t.result_json else None for t in run.tasks]
