"""A private test network: one Linux bridge and, per host, a network namespace joined to it by a veth pair.

Every object is named after the pid of the test process that owns it (``sy<pid>br`` the bridge,
``sy<pid>v<n>`` a host's veth end on the bridge, ``sy<pid>-<host>`` a namespace), so parallel runs do not
collide and a later run can recognise, and remove, what a killed run left behind (:func:`cleanup_stale`).

Addresses come from 198.18.0.0/15 (reserved for network benchmarks, RFC 2544): each run takes one free
/24, chosen from its pid; the bridge holds ``.1`` (the test process, "client host", reaches the hosts
through it) and the hosts ``.2`` up. A namespace has no default route, so the hosts reach only loopback
and each other.

Needs CAP_NET_ADMIN (and CAP_SYS_ADMIN for the namespaces and mounts): :func:`unavailable_reason` says
why not, in one line, so the tests can skip.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

PREFIX = "sy"
SUPERNET = ipaddress.IPv4Network("198.18.0.0/15")
BLOCKS = SUPERNET.num_addresses // 256  # /24 blocks in the supernet: 512
_NETNS_RE = re.compile(rf"^{PREFIX}(\d+)-[a-z0-9]+$")
_LINK_RE = re.compile(rf"^{PREFIX}(\d+)(br|v\d+)$")


class NetError(RuntimeError):
    """An ``ip``/``tc`` command failed (message: the command and its stderr)."""


class NetemUnsupported(NetError):
    """The kernel has no netem qdisc (CONFIG_NET_SCH_NETEM)."""


def run(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@functools.lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None if this process can build the test network, else why not (one line)."""
    for tool in ("ip", "unshare", "tc"):
        if shutil.which(tool) is None:
            return f"tests/cluster need the `{tool}` command (iproute2/util-linux), not found on PATH"
    if os.geteuid() != 0:
        return "tests/cluster need root (CAP_NET_ADMIN) to create network namespaces; run as root to include them"
    probe, link = f"{PREFIX}{os.getpid()}-probe", f"{PREFIX}{os.getpid()}v0"  # hosts' veths start at v1
    try:
        steps = [
            ("CAP_SYS_ADMIN and CAP_NET_ADMIN", "`ip netns add` failed", ["ip", "netns", "add", probe]),
            ("CAP_NET_ADMIN", "`ip link add … type veth` failed",
             ["ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", probe]),
            ("CAP_SYS_ADMIN", "a tmpfs mount in a new mount namespace failed",
             ["ip", "netns", "exec", probe, "unshare", "-m", "--propagation", "private",
              "mount", "-t", "tmpfs", "tmpfs", "/mnt"]),
        ]
        for capability, what, argv in steps:
            proc = run(*argv, check=False)
            if proc.returncode != 0:
                error = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
                return f"tests/cluster need {capability}: {what}: {error}"
    finally:
        run("ip", "link", "del", link, check=False)
        run("ip", "netns", "del", probe, check=False)
    return None


@functools.lru_cache(maxsize=1)
def netem_unavailable_reason() -> str | None:
    """None if ``tc qdisc ... netem`` works here, else why not (one line)."""
    link = f"{PREFIX}{os.getpid()}v0"  # hosts' veths start at v1
    made = run("ip", "link", "add", link, "type", "veth", "peer", "name", f"{link}p", check=False)
    if made.returncode != 0:
        return f"cannot make a veth to probe netem: {made.stderr.strip()}"
    try:
        probe = run("tc", "qdisc", "add", "dev", link, "root", "netem", "delay", "1ms", check=False)
        if probe.returncode != 0:
            return f"the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): {probe.stderr.strip()}"
    finally:
        run("ip", "link", "del", link, check=False)
    return None


def netns_names() -> list[str]:
    out = run("ip", "netns", "list").stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def link_names() -> list[str]:
    out = run("ip", "-o", "link", "show").stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@", 1)[0])
    return names


def netns_pids(netns: str) -> list[int]:
    out = run("ip", "netns", "pids", netns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def kill_netns_processes(netns: str, timeout: float = 15) -> None:
    """SIGKILL every process still in ``netns`` (all of them were started by its owner) until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = netns_pids(netns)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            raise NetError(f"processes {pids} in netns {netns} survive SIGKILL")
        time.sleep(0.05)  # polling for the kernel to finish the kills (bounded by the deadline above)


def cleanup_stale() -> list[str]:
    """Remove the namespaces (with their processes), veths and bridges of test runs whose pid is gone."""
    removed = []
    for name in netns_names():
        m = _NETNS_RE.match(name)
        if m and not pid_alive(int(m.group(1))):
            kill_netns_processes(name)
            run("ip", "netns", "del", name, check=False)
            removed.append(name)
    # Veths first (a bridge's ports), then bridges.
    for name in sorted(link_names(), key=lambda n: n.endswith("br")):
        m = _LINK_RE.match(name)
        if m and not pid_alive(int(m.group(1))):
            run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed


def _used_blocks() -> set[int]:
    """Indexes of the /24 blocks of SUPERNET already holding an address of the root namespace."""
    out = run("ip", "-4", "-o", "addr", "show").stdout
    used: set[int] = set()
    for m in re.finditer(r"inet (\d+\.\d+\.\d+\.\d+)/(\d+)", out):
        net = ipaddress.ip_network(f"{m.group(1)}/{m.group(2)}", strict=False)
        if net.overlaps(SUPERNET):
            first = max(int(net.network_address), int(SUPERNET.network_address))
            last = min(int(net.broadcast_address), int(SUPERNET.broadcast_address))
            used.update(range((first - int(SUPERNET.network_address)) >> 8,
                              ((last - int(SUPERNET.network_address)) >> 8) + 1))
    return used


def choose_block(pid: int) -> ipaddress.IPv4Network:
    used = _used_blocks()
    for step in range(BLOCKS):
        index = (pid + step) % BLOCKS
        if index not in used:
            return ipaddress.IPv4Network(f"{SUPERNET.network_address + index * 256}/24")
    raise NetError("no free /24 left in 198.18.0.0/15")


@dataclass
class Host:
    """One simulated machine: a network namespace with ``eth0`` on the bridge (and ``lo``)."""

    name: str
    netns: str
    veth: str  # the root-namespace end, on the bridge: cutting it cuts the host off
    address: str

    def exec_argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, *argv]

    def link_down(self) -> None:
        run("ip", "link", "set", self.veth, "down")

    def link_up(self) -> None:
        run("ip", "link", "set", self.veth, "up")

    def block(self, address: str) -> None:
        """Drop everything this host sends to ``address`` (a blackhole route): with the same on the other host,
        the two are partitioned from each other while both still reach everyone else."""
        run("ip", "-n", self.netns, "route", "replace", "blackhole", f"{address}/32")

    def unblock(self, address: str) -> None:
        run("ip", "-n", self.netns, "route", "del", "blackhole", f"{address}/32", check=False)

    def netem(self, *spec: str, both_ways: bool = True) -> None:
        """``tc qdisc replace … root netem SPEC`` on the host's link (e.g. ``"delay", "200ms", "loss", "5%"``).

        Applied to the bridge end (traffic to the host) and, with ``both_ways``, to ``eth0`` in the host
        (traffic from it). Raises :class:`NetemUnsupported` if the kernel has no netem.
        """
        targets = [[], ["ip", "netns", "exec", self.netns]] if both_ways else [[]]
        for prefix, dev in zip(targets, [self.veth, "eth0"]):
            proc = run(*prefix, "tc", "qdisc", "replace", "dev", dev, "root", "netem", *spec, check=False)
            if proc.returncode != 0:
                cls = NetemUnsupported if "unknown" in proc.stderr.lower() else NetError
                raise cls(f"tc qdisc replace dev {dev} root netem {' '.join(spec)}: {proc.stderr.strip()}")

    def clear_netem(self) -> None:
        run("tc", "qdisc", "del", "dev", self.veth, "root", check=False)
        run("ip", "netns", "exec", self.netns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)


@dataclass
class Network:
    """The bridge and the hosts of one test; :meth:`close` removes all of it (idempotent)."""

    owner: int = field(default_factory=os.getpid)
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: ipaddress.IPv4Network | None = None
    _serial: int = 0
    _created: list[tuple[str, str]] = field(default_factory=list)  # ("netns"|"link", name), in creation order

    @property
    def tag(self) -> str:
        return f"{PREFIX}{self.owner}"

    @property
    def bridge(self) -> str:
        return f"{self.tag}br"

    @property
    def client_address(self) -> str:
        """The test process's own address on the test network (on the bridge, in the root namespace)."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def create(self) -> Network:
        cleanup_stale()
        if self.bridge in link_names():  # an earlier test of this same process did not close its network
            raise NetError(f"bridge {self.bridge} already exists: close the previous Network first")
        self.subnet = choose_block(self.owner)
        run("ip", "link", "add", self.bridge, "type", "bridge")
        self._created.append(("link", self.bridge))
        run("ip", "addr", "add", f"{self.client_address}/24", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        return self

    def add_host(self, name: str) -> Host:
        """A new namespace ``sy<pid>-<name>`` with the next address, its veth on the bridge, lo and eth0 up."""
        assert self.subnet is not None, "create() first"
        if not re.fullmatch(r"[a-z0-9]{1,20}", name) or name in self.hosts:
            raise ValueError(f"host name {name!r}: lowercase letters and digits, unique")
        self._serial += 1
        if self._serial > 250:
            raise NetError("at most 250 hosts in one test network")
        netns, veth = f"{self.tag}-{name}", f"{self.tag}v{self._serial}"
        address = str(self.subnet.network_address + 1 + self._serial)
        run("ip", "netns", "add", netns)
        self._created.append(("netns", netns))
        run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", netns)
        self._created.append(("link", veth))
        run("ip", "link", "set", veth, "master", self.bridge)
        run("ip", "link", "set", veth, "up")
        run("ip", "-n", netns, "link", "set", "lo", "up")
        run("ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        run("ip", "-n", netns, "link", "set", "eth0", "up")
        host = Host(name, netns, veth, address)
        self.hosts[name] = host
        return host

    def heal_all(self) -> None:
        """Undo every network and process fault a test may have left: every process in every host continued
        (SIGCONT), every link up, every blackhole route between the hosts removed."""
        hosts = list(self.hosts.values())
        for host in hosts:
            for pid in netns_pids(host.netns):
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            host.link_up()
            for other in hosts:
                if other is not host:
                    host.unblock(other.address)

    def close(self) -> list[str]:
        """Kill what still runs in the hosts, delete namespaces, veths and the bridge; returns the errors."""
        errors = []
        for kind, name in self._created:
            if kind == "netns":
                try:
                    kill_netns_processes(name)
                except NetError as exc:
                    errors.append(str(exc))
        for kind, name in reversed(self._created):
            if kind == "link" and name in link_names():
                proc = run("ip", "link", "del", name, check=False)
                if proc.returncode != 0 and name in link_names():
                    errors.append(f"ip link del {name}: {proc.stderr.strip()}")
            elif kind == "netns":
                proc = run("ip", "netns", "del", name, check=False)
                if proc.returncode != 0 and name in netns_names():
                    errors.append(f"ip netns del {name}: {proc.stderr.strip()}")
        self._created.clear()
        self.hosts.clear()
        return errors

    def leftovers(self) -> list[str]:
        """Objects of this network that still exist (empty after a clean :meth:`close`)."""
        mine = str(self.owner)
        return ([n for n in netns_names() if (m := _NETNS_RE.match(n)) and m.group(1) == mine]
                + [n for n in link_names() if (m := _LINK_RE.match(n)) and m.group(1) == mine])
