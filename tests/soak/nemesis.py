"""The nemesis: a fault every few seconds, drawn from a seeded RNG, each held for a while and then healed, so
that faults overlap (the leader paused while a worker is cut off and Redis fails over).

The **schedule** — when each fault starts, its kind, which role or host it hits, how long it lasts — is
drawn from the seed alone, before the soak starts, and printed: the same seed gives the same schedule.
Which process a role names (``leader``, ``standby``, the Redis ``primary``) is resolved when the fault
starts, from what the cluster says then. A fault whose target is already under another fault is not
injected (it is counted as ``busy``), so two faults never fight over one process.

Every fault runs in a thread of its own: inject, hold, heal. :meth:`Nemesis.heal_all` ends them all and
then makes sure every process is running and continued, every link up, every route open, every disk free.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from netcluster import NetCluster
from netns import netns_pids
from redis_ha import DATA_NODES, RedisHA

MASTERS = ("master", "m2")
WORKERS = ("w1", "w2", "w3")
PROCESS_TARGETS = ("leader", "standby", "worker", "driver", "redis")
# Kinds and their weights. ``skew`` needs libfaketime in the worker and is skipped without it (see kind_skips).
KINDS = {"kill": 3, "pause": 3, "link": 2, "partition-masters": 1, "partition-redis": 2, "disk-full": 1, "skew": 1}
FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
DISK_MB = 64
# How long a fault waits for a worker it restarted to be ready again before its hold begins.
READY_TIMEOUT_S = 120.0


def skew_env(offset: str) -> dict[str, str]:
    """The environment that runs a process with its wall clock ``offset`` (``+30s``, ``-30s``) off: libfaketime
    preloaded. Children inherit it (the worker starts its drivers, and they their JVMs, with its environment),
    so the whole host is skewed. Its monotonic clock is offset too (constant, so intervals are right):
    ``FAKETIME_DONT_FAKE_MONOTONIC=1`` would keep it real, but libfaketime 0.9.10 then answers Python's
    ``time.sleep`` (``clock_nanosleep`` on the monotonic clock) with EINVAL."""
    return {"LD_PRELOAD": str(FAKETIME_LIB), "FAKETIME": offset}


def remove_faketime_files(since: float, shm: Path = Path("/dev/shm")) -> list[str]:
    """libfaketime 0.9.10 makes a shared-memory file and a semaphore in /dev/shm for every process it is
    preloaded into (``faketime_shm_PID``, ``sem.faketime_sem_PID``) and leaves them when the process ends, by
    ``kill -9`` or not: a skewed worker leaves a pair for itself and each of its drivers and JVMs. Those made
    since ``since`` (the soak's start, epoch seconds) by processes no longer running are removed; the names
    removed are returned."""
    removed = []
    for path in sorted(shm.glob("*faketime_*")):
        match = re.fullmatch(r"(?:faketime_shm_|sem\.faketime_sem_)(\d+)", path.name)
        if match is None or Path(f"/proc/{match.group(1)}").exists():
            continue
        try:
            if path.stat().st_mtime < since:
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path.name)
    return removed


def kind_skips() -> dict[str, str]:
    """Fault kinds this machine cannot inject, with the reason (one line each)."""
    skips = {}
    if not FAKETIME_LIB.exists():
        skips["skew"] = (f"worker clock skew needs libfaketime ({FAKETIME_LIB} not found; Debian package "
                         "libfaketime)")
    if shutil.which("fallocate") is None:
        skips["disk-full"] = "a worker's disk full needs `fallocate` (util-linux), not found on PATH"
    return skips


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the soak's start
    kind: str
    target: str  # a role (leader, standby, redis: the primary), a worker, driver@WORKER, a pair "a|b", WORKER±30

    hold: float  # seconds until healed

    def __str__(self) -> str:
        return f"{self.at:7.1f}s  {self.kind:<17} {self.target:<15} {self.hold:4.1f}s"


def schedule(seed: int, seconds: float) -> list[Fault]:
    """The faults of a soak of ``seconds``: one every 2–6 s, each held 1–12 s (a kill: down 1–12 s, then
    restarted). Drawn from ``seed`` alone."""
    rng = random.Random(seed)
    kinds, weights = list(KINDS), list(KINDS.values())
    faults, at = [], rng.uniform(3, 6)
    while at < seconds:
        kind = rng.choices(kinds, weights)[0]
        if kind in ("kill", "pause"):
            target = rng.choice(PROCESS_TARGETS)
            if target == "worker":
                target = rng.choice(WORKERS)
            elif target == "driver":
                target = f"driver@{rng.choice(WORKERS)}"
        elif kind == "link":
            target = rng.choice([*MASTERS, *WORKERS, "redis"])
        elif kind == "partition-masters":
            target = "master|m2"
        elif kind == "partition-redis":
            target = f"{rng.choice(MASTERS)}|redis"
        else:  # disk-full, skew
            target = rng.choice(WORKERS)
        hold = round(rng.uniform(1, 12), 1)
        if kind == "skew":
            target = f"{target}{rng.choice(['+', '-'])}30"
        faults.append(Fault(round(at, 1), kind, target, hold))
        at += rng.uniform(2, 6)
    return faults


@dataclass
class Nemesis:
    net: NetCluster
    redis: RedisHA
    restart_worker: Callable[[str, dict[str, str]], None]  # (worker, extra environment)
    skips: dict[str, str]
    injected: Counter[str] = field(default_factory=Counter)  # "kind target-role" → count
    busy: Counter[str] = field(default_factory=Counter)  # not injected: the target was under another fault
    errors: list[str] = field(default_factory=list)
    _held: set[str] = field(default_factory=set)
    _skewed: set[str] = field(default_factory=set)  # workers running with a skewed clock now
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self, faults: list[Fault], started: float, log: Callable[[str], None]) -> None:
        """Start each fault at its time (``started``: time.monotonic() of the soak's start); returns when the
        last one has started."""
        for fault in faults:
            while not self._stop.is_set() and time.monotonic() - started < fault.at:
                self._stop.wait(min(0.2, fault.at - (time.monotonic() - started)))
            if self._stop.is_set():
                return
            if fault.kind in self.skips:
                self.injected[f"{fault.kind} (skipped)"] += 1
                continue
            thread = threading.Thread(target=self._one, args=(fault, log), name=f"fault-{fault.at}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _claim(self, *names: str) -> bool:
        with self._lock:
            if self._held & set(names):
                return False
            self._held |= set(names)
            return True

    def _release(self, *names: str) -> None:
        with self._lock:
            self._held -= set(names)

    def _resolve(self, target: str) -> str | None:
        """The host a role names now."""
        if target == "leader":
            return next((m for m in MASTERS if self.net.role(m) == "leader"), None)
        if target == "standby":
            return next((m for m in MASTERS if self.net.role(m) == "standby"), None)
        if target == "redis":
            return self.redis.primary()
        return re.sub(r"[+-]30$", "", target.removeprefix("driver@"))

    def _one(self, fault: Fault, log: Callable[[str], None]) -> None:
        pair = fault.target.split("|")
        if len(pair) == 2:
            names = [self._resolve(pair[0]) or pair[0], self._resolve(pair[1]) or pair[1]]
        else:
            name = self._resolve(fault.target)
            if name is None:
                self.busy[f"{fault.kind} {fault.target} (no such process now)"] += 1
                return
            names = [name]
        # A process is hit by one kill, pause or skew (a restart) at a time; a link, a pair, a disk by one fault
        # of their kind.
        claim = names if fault.kind in ("kill", "pause", "skew") else [f"{fault.kind}:{'|'.join(names)}"]
        if not self._claim(*claim):
            self.busy[f"{fault.kind} {fault.target}"] += 1
            return
        try:
            heal = self._inject(fault, names)
            if heal is None:
                self.busy[f"{fault.kind} {fault.target} (nothing to hit)"] += 1
                return
            self.injected[f"{fault.kind} {fault.target.split('@')[0]}"] += 1
            log(f"inject {fault.kind} {'|'.join(names)} ({fault.target}) for {fault.hold:g}s")
            self._stop.wait(fault.hold)
            heal()
            log(f"healed {fault.kind} {'|'.join(names)}")
        except Exception as exc:  # a fault that fails is reported, and the soak goes on
            self.errors.append(f"{fault}: {type(exc).__name__}: {exc}")
        finally:
            self._release(*claim)

    def _inject(self, fault: Fault, names: list[str]) -> Callable[[], None] | None:
        name = names[0]
        if fault.target.startswith("driver@"):  # kill or pause one of the worker's drivers
            pid = self._driver_pid(name)
            if pid is None:
                return None
            os.kill(pid, signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP)
            return (lambda: None) if fault.kind == "kill" else (lambda: _signal(pid, signal.SIGCONT))
        if fault.kind == "kill":
            self.net.kill(name) if name not in DATA_NODES else self._kill_redis(name)
            return lambda: self._restart(name)
        if fault.kind == "pause":
            proc = self.redis.nodes[name] if name in DATA_NODES else self.net.process(name)
            proc.signal(signal.SIGSTOP)
            return lambda: proc.signal(signal.SIGCONT)
        if fault.kind == "link":
            self.net.link_down(name)
            return lambda: self.net.link_up(name)
        if fault.kind in ("partition-masters", "partition-redis"):
            self.net.partition(names[0], names[1])
            return lambda: self.net.heal(names[0], names[1])
        if fault.kind == "disk-full":
            fill = self.work_dir(name) / "soak-fill"
            subprocess.run(["fallocate", "-l", f"{DISK_MB}M", str(fill)], capture_output=True)
            # fallocate fails on a full disk after taking what it could: fill the rest byte by byte.
            _fill_rest(fill)
            return lambda: fill.unlink(missing_ok=True)
        if fault.kind == "skew":
            self._restart_skewed(name, fault.target[-3:] + "s")
            return lambda: self._restart_skewed(name, "")
        raise AssertionError(f"no injection for {fault.kind}")

    def _restart_skewed(self, worker: str, offset: str) -> None:
        """Stop ``worker`` (SIGTERM: it drains, handing back what it runs) and start it again with its clock
        ``offset`` off (``''``: right again); returns once it is ready, or after READY_TIMEOUT_S (other
        faults may keep it from registering)."""
        self.net.stop_worker(worker)
        log_path = self.net.workers[worker].log_path
        start = log_path.stat().st_size if log_path.exists() else 0
        self.restart_worker(worker, skew_env(offset) if offset else {})
        if offset:
            self._skewed.add(worker)
        else:
            self._skewed.discard(worker)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            with log_path.open("rb") as f:
                f.seek(start)
                if b"readiness READY" in f.read():
                    return
            self._stop.wait(0.5)

    def _kill_redis(self, name: str) -> None:
        proc = self.redis.nodes[name]
        proc.signal(signal.SIGKILL)
        proc.process.wait(timeout=10)

    def _restart(self, name: str) -> None:
        if name in DATA_NODES:
            self.redis.restart(name)
        elif name in MASTERS:
            self.net.start_master(name=name)
        else:
            self.restart_worker(name, {})

    def work_dir(self, worker: str) -> Path:
        return self.net.root / worker / "work"

    def _driver_pid(self, worker: str) -> int | None:
        """The oldest child process of ``worker`` (a session driver or a spark-submit), if it has one."""
        parent = self.net.workers[worker].pid
        children = [pid for pid in netns_pids(self.net.host(worker).netns) if _ppid(pid) == parent]
        return min(children) if children else None

    def heal_all(self) -> None:
        """End every fault now, then put the cluster back whole: every server process running and continued,
        every link up and route open, every worker's disk free."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)
            if thread.is_alive():
                self.errors.append(f"{thread.name} did not heal within 120 s")
        self.net.network.heal_all()
        for worker in WORKERS:
            (self.work_dir(worker) / "soak-fill").unlink(missing_ok=True)
        for name, proc in list(self.redis.nodes.items()):
            if not proc.alive() and name in DATA_NODES:
                self.redis.restart(name)
        for name in MASTERS:
            if not self.net.masters[name].alive():
                self.net.start_master(name=name)
        for name in WORKERS:
            if name in self._skewed:  # its fault's thread did not heal it
                self.net.stop_worker(name)
                self._skewed.discard(name)
            if not self.net.workers[name].alive():
                self.restart_worker(name, {})


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _fill_rest(path: Path) -> None:
    try:
        with path.open("ab") as f:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
    except OSError:  # ENOSPC: the disk is full
        pass
