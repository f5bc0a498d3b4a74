"""README.md's ``sparkyard local`` line, for tests/integration/test_documented_commands.py.

Where this process can make network namespaces (tests/cluster/netns.py ``unavailable_reason``: root with
CAP_NET_ADMIN), the line runs exactly as written, in a namespace of its own with only loopback, up: there the
addresses it takes (local's default ``--listen 127.0.0.1:7070``, the README's ``--http 127.0.0.1:8080``) are
always free, whatever this host runs. The checks that dial it run in that namespace too (``ip netns exec``
of doc_local_probe.py). The namespace is ``sy<pid>-doclocal`` (netns.py's naming, so ``cleanup_stale`` removes
one a killed run left behind) and is deleted, with anything still in it, also when a check fails.

Elsewhere the line runs with its addresses replaced by free ports of this host's loopback (``--http`` on a
free port, a free ``--listen`` added): 127.0.0.1:7070 is the address the docs give the test's own master.

Either way it must say it is ready, serve its console (200) and have its workers registered; then Ctrl-C
(SIGINT, by pid) must stop it with exit 0 and every process it started (in the namespace: nothing is left in it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import psutil

from doc_daemons import Daemon
from harness import free_port, wait_for
from netns import PREFIX, kill_netns_processes, netns_pids, run as ip, unavailable_reason

PROBE = Path(__file__).with_name("doc_local_probe.py")
LOCAL_LISTEN = "127.0.0.1:7070"  # `sparkyard local`'s default --listen
README_HTTP = "127.0.0.1:8080"  # the README's --http


def run_local(command: str, env: dict[str, str], root: Path) -> tuple[str, str]:
    """(how the line ran, in one line; '' when it did as documented, else what it did)."""
    reason = unavailable_reason()
    if reason is None:
        netns = f"{PREFIX}{os.getpid()}-doclocal"
        return f"`{command}` as written, in network namespace {netns}", _in_namespace(command, env, root, netns)
    filled = command.replace(README_HTTP, f"127.0.0.1:{free_port()}")
    filled += "" if "--listen" in filled else f" --listen 127.0.0.1:{free_port()}"
    return f"`{filled}` on free ports ({reason})", _run(filled, env, root, ())


def _in_namespace(command: str, env: dict[str, str], root: Path, netns: str) -> str:
    ip("ip", "netns", "add", netns)
    try:
        ip("ip", "-n", netns, "link", "set", "lo", "up")
        problem = _run(command, env, root, ("ip", "netns", "exec", netns))
        if not problem:
            try:
                wait_for(lambda: not netns_pids(netns), 30, f"every process in {netns} to exit")
            except AssertionError:
                problem = f"`{command}` left processes {netns_pids(netns)} running in its namespace {netns}"
        return problem
    finally:
        kill_netns_processes(netns)
        ip("ip", "netns", "del", netns, check=False)


def _run(filled: str, env: dict[str, str], root: Path, inside: Sequence[str]) -> str:
    """``filled`` (run ``inside`` a namespace, or here) until it says it is ready, then the checks, then Ctrl-C
    by pid: it must exit 0 and every process it started must be gone."""
    http = re.search(r"--http (\S+)", filled)
    listen = re.search(r"--listen (\S+)", filled)
    assert http, filled
    daemon = Daemon(filled, root / "local", env, root / "local.log", inside)
    children: list[psutil.Process] = []
    try:
        problem = daemon.wait_output("local cluster ready", 360)  # past local's own 300 s start limit
        if not problem:
            children = psutil.Process(daemon.process.pid).children(recursive=True)
            workers = re.search(r"--workers (\d+)", filled)
            problem = _check(filled, inside, http.group(1), listen.group(1) if listen else LOCAL_LISTEN,
                             int(workers.group(1)) if workers else 2, env)
    finally:
        stopped = daemon.stop(timeout=90, sig=signal.SIGINT)
    _, left = psutil.wait_procs(children, timeout=30)
    left_over = f"`{filled}` left running: {[p.pid for p in left]}" if left else ""
    for process in left:
        process.kill()
    return problem or stopped or left_over


def _check(filled: str, inside: Sequence[str], http: str, master: str, workers: int, env: dict[str, str]) -> str:
    """'' when its console answers 200 and ``workers`` workers are registered, as seen where it listens."""
    probe = subprocess.run([*inside, sys.executable, str(PROBE), f"http://{http}/", master], capture_output=True,
                           text=True, timeout=120, env=env)
    if probe.returncode != 0:
        return f"`{filled}`: the probe of {http} and {master} exited {probe.returncode}:\n{probe.stderr[-3000:]}"
    seen = json.loads(probe.stdout)
    if seen["console"] != 200:
        return f"`{filled}`: its console at {http} answered {seen['console']}"
    if len(seen["workers"]) != workers:
        return f"`{filled}`: workers {seen['workers']} once it said it was ready"
    return ""
