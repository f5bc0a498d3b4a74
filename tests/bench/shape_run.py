"""The traced half of tests/bench/bench_shape.py: which product modules one ``submit --wait`` enters.

Starts ``sparkyard local --workers 1 --slots 1`` from a copy of the tree's product (shape_static.package_copy)
with shape_trace/sitecustomize.py in every Python process, waits until the worker's slot is warm, records
an idle window, runs the quickstart's first job (``sparkyard submit examples/wordcount.py:main --arg
README.md --wait``, from the tree's root) and stops the cluster with SIGTERM (every process exits
normally, so its tracer writes its last record). Redis commands are watched with MONITOR on the
embedded Redis for the Lua scripts called.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shape_static import package_copy, tree_path

BIN = Path(sys.executable).parent
TRACER_DIR = Path(__file__).resolve().parent / "shape_trace"
SUBMIT = ("submit", "examples/wordcount.py:main", "--arg", "README.md", "--wait")
READY_TIMEOUT_S = 600.0
STOP_TIMEOUT_S = 240.0
SCRIPT_HEADER = re.compile(r"--\s*sparkyard script (\w+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kind_of(cmdline: list[str]) -> str:
    """The role of a traced process, from its command line."""
    joined = " ".join(cmdline)
    for module, kind in (("sparkyard.master.main", "master"), ("sparkyard.worker.main", "worker"),
                         ("sparkyard.worker.driver", "driver"), ("pyspark", "spark-python")):
        if module in joined:
            return kind
    if len(cmdline) > 2 and Path(cmdline[1]).name == "sparkyard":
        return f"cli {cmdline[2]}"
    return Path(cmdline[0]).name if cmdline else "?"


@dataclass
class Monitor:
    """Redis MONITOR in a thread: (time, SHA or script text) of every EVALSHA / EVAL."""

    url: str
    calls: list[tuple[float, str]] = field(default_factory=list)
    client: Any = None  # held: a collected client closes the connection MONITOR streams on

    def start(self) -> None:
        import redis

        self.client = redis.Redis.from_url(self.url)
        monitor = self.client.monitor().__enter__()

        def watch() -> None:
            try:
                while True:
                    cmd = monitor.next_command()
                    words = cmd["command"].split(" ", 1)
                    if words[0].upper() == "EVALSHA" and len(words) > 1:
                        self.calls.append((float(cmd["time"]), words[1].split(" ", 1)[0]))
                    elif words[0].upper() == "EVAL" and len(words) > 1:
                        header = SCRIPT_HEADER.search(words[1])
                        self.calls.append((float(cmd["time"]), header.group(1) if header else "(inline EVAL)"))
            except Exception:  # the cluster stopped: Redis closed the connection
                return

        threading.Thread(target=watch, name="redis-monitor", daemon=True).start()


def redis_url(data_dir: Path) -> str:
    sockets = sorted(data_dir.rglob("redis.sock"))
    if sockets:
        return f"unix://{sockets[0]}"
    found = re.findall(r"url=(redis://\S+)", (data_dir / "logs" / "master.log").read_text(errors="replace"))
    if not found:
        raise SystemExit(f"bench_shape: no embedded Redis found under {data_dir}")
    return found[-1]


def wait_warm(env: dict[str, str], tree: Path, slots: int) -> None:
    """Until every worker says all its slots are warm (drivers up), polled without the tracer."""
    quiet = {k: v for k, v in env.items() if k != "SHAPE_TRACE_DIR"}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        out = subprocess.run([str(BIN / "sparkyard"), "workers", "--json"], cwd=tree, env=quiet, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        if out.returncode == 0:
            workers = json.loads(out.stdout)
            if workers and all(int(w.get("ready_slots", slots)) >= slots for w in workers):
                return
        time.sleep(1.0)  # watching a cluster warm up from outside, with a deadline
    raise SystemExit("bench_shape: the worker's slot did not get warm in time")


def run(tree: Path, work: Path, idle_s: float) -> dict[str, Any]:
    """Run the cluster and the submit; returns the windows, the traces and the Lua calls."""
    root = package_copy(tree, work / "pkg")
    traces = work / "traces"
    traces.mkdir()
    address = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "SHAPE_TRACE_DIR": str(traces), "SPARKYARD_MASTER": address,
           "PYTHONPATH": os.pathsep.join([str(TRACER_DIR), str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    data_dir = work / "d"
    local = subprocess.Popen([str(BIN / "sparkyard"), "local", "--workers", "1", "--slots", "1", "--listen", address,
                              "--data-dir", str(data_dir)], cwd=tree, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert local.stdout is not None
        line = local.stdout.readline()
        if "ready" not in line:
            raise SystemExit(f"bench_shape: the local cluster did not start; see {data_dir / 'logs'}")
        wait_warm(env, tree, 1)
        monitor = Monitor(redis_url(data_dir))
        monitor.start()
        time.sleep(2.0)  # let the readiness polls' own work settle before the idle window
        idle = (time.time(), time.time() + idle_s)
        time.sleep(idle_s + 0.2)  # a gap: no 50 ms bucket belongs to both windows
        began = time.time()
        done = subprocess.run([str(BIN / "sparkyard"), *SUBMIT], cwd=tree, env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        submit = (began, time.time())
        if done.returncode != 0:
            raise SystemExit(f"bench_shape: the submit failed ({done.returncode}):\n{done.stdout}")
        time.sleep(0.2)  # the stop's own work (signal handlers) falls in no bucket of the submit window
    finally:
        local.send_signal(signal.SIGTERM)
        try:
            local.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            local.kill()
    time.sleep(1.5)  # forked PySpark workers flush their record every second
    records = [json.loads(p.read_text()) for p in sorted(traces.glob("trace-*.json"))]
    return {"root": root, "idle": idle, "submit": submit, "submit_output": done.stdout, "records": records,
            "lua_calls": monitor.calls}


def _in_window(buckets: list[int], window: tuple[float, float]) -> bool:
    low, high = int(window[0] * 20), int(window[1] * 20)
    return any(low <= b <= high for b in buckets)


def modules_by_kind(records: list[dict[str, Any]], window: tuple[float, float]) -> dict[str, set[str]]:
    """Product modules (generated sparkyard.v1 aside) entered in the window, by process kind."""
    out: dict[str, set[str]] = {}
    for record in records:
        kind = kind_of(record["cmdline"])
        for name, entry in record["modules"].items():
            if not name.startswith("sparkyard.v1") and _in_window(entry["imported"] + entry["called"], window):
                out.setdefault(kind, set()).add(name)
    return out


def script_names(tree: Path, records: list[dict[str, Any]]) -> dict[str, str]:
    """SHA → Lua file name, from the scripts the master held: its rendered header, else the .lua file whose
    body the script contains (the longest, since every script contains lib.lua; the Lua libraries, lib*.lua, are
    no script's name)."""
    bodies = {p.stem: p.read_text().strip() for p in (tree / "common/scripts").glob("*.lua")
              if not p.stem.startswith("lib")}
    names: dict[str, str] = {}
    for record in records:
        for sha, text in record["scripts"].items():
            header = SCRIPT_HEADER.search(text)
            candidates = [n for n, body in bodies.items() if body and body in text]
            names[sha] = header.group(1) if header else max(candidates, key=lambda n: len(bodies[n]), default=sha)
    return names


def analyse(tree: Path, result: dict[str, Any]) -> dict[str, Any]:
    """Modules and Lua scripts of the submit window, of the idle window's last stretch as long as the
    submit, of the whole idle window, and the submit's minus the whole idle window's, kind by kind."""
    records = result["records"]
    began, ended = result["submit"]
    idle_start, idle_end = result["idle"]
    same = (max(idle_start, idle_end - (ended - began)), idle_end)
    entered = modules_by_kind(records, result["submit"])
    windows = {"idle_same_length": modules_by_kind(records, same), "idle_whole": modules_by_kind(records, result["idle"])}
    net = {k: mods - windows["idle_whole"].get(k, set()) for k, mods in entered.items()}
    names = script_names(tree, records)

    def lua(window: tuple[float, float]) -> set[str]:
        return {names.get(s, s) for t, s in result["lua_calls"] if window[0] <= t <= window[1]}

    def total(by_kind: dict[str, set[str]]) -> int:
        return len(set().union(*by_kind.values())) if by_kind else 0

    kinds = sorted({kind_of(r["cmdline"]) for r in records})
    outside = sorted({e["file"] for r in records for e in r["modules"].values()
                      if e["file"] and not tree_path(e["file"], result["root"])})
    return {
        "submit_seconds": round(ended - began, 1), "idle_seconds": round(idle_end - idle_start, 1),
        "processes": {k: sum(1 for r in records if kind_of(r["cmdline"]) == k) for k in kinds},
        "not_exited_normally": sorted(kind_of(r["cmdline"]) for r in records if not r["final"]),
        "drivers_traced": any(kind_of(r["cmdline"]) == "driver" for r in records),
        "modules_not_from_tree": outside,
        "entered": {k: sorted(v) for k, v in sorted(entered.items())},
        **{w: {k: sorted(v) for k, v in sorted(by_kind.items())} for w, by_kind in windows.items()},
        "net": {k: sorted(v) for k, v in sorted(net.items())},
        "entered_total": total(entered), "idle_same_length_total": total(windows["idle_same_length"]),
        "idle_whole_total": total(windows["idle_whole"]), "net_total": total(net),
        "lua_submit": sorted(lua(result["submit"])), "lua_idle_same_length": sorted(lua(same)),
        "lua_idle_whole": sorted(lua(result["idle"])), "lua_net": sorted(lua(result["submit"]) - lua(result["idle"])),
        "lua_named": bool(names),
    }
