"""Runs the example jobs on an embedded local cluster, showing each command as a user would type it.

Started by deploy/quickstart.sh after the install. Uses a free loopback port so it never collides with
a master already running on 7070, and stops the cluster (workers drain, Redis flushes) at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
START_TIMEOUT_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sparkyard(*args: str, capture: bool = False) -> str:
    print(f"\n$ sparkyard {' '.join(shlex.quote(a) for a in args)}", flush=True)
    done = subprocess.run([str(BIN / "sparkyard"), *args], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE if capture else None)
    if done.returncode != 0:
        raise SystemExit(f"quickstart: `sparkyard {' '.join(args)}` failed with exit code {done.returncode}")
    return done.stdout or ""


def main() -> int:
    address = f"127.0.0.1:{free_port()}"
    os.environ["SPARKYARD_MASTER"] = address
    data_dir = ROOT / ".sparkyard" / "quickstart"
    print(f"$ sparkyard local --workers 2 --slots 2 --listen {address}   # Redis + master + 2 workers", flush=True)
    local = subprocess.Popen([str(BIN / "sparkyard"), "local", "--workers", "2", "--slots", "2", "--listen", address,
                              "--data-dir", str(data_dir)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert local.stdout is not None
        line = local.stdout.readline()
        if "ready" not in line:
            raise SystemExit(f"quickstart: the local cluster did not start; see {data_dir / 'logs'}")
        print(line.strip(), flush=True)
        sparkyard("workers")
        sparkyard("submit", "examples/wordcount.py:main", "--arg", "README.md", "--files", "README.md", "--wait")
        sparkyard("submit", "examples/backfill.py:main", "--inputs", "examples/data/day-*.csv",
                  "--parallelism", "3", "--wait")
        sparkyard("submit", "examples/flaky.py:main", "--retries", "2", "--backoff", "1s", "--wait")
        job = json.loads(sparkyard("submit", "examples/ticker.py:main", "--every", "2s", "--max-runs", "3",
                                   "--json", capture=True))
        print(f"submitted recurring job {job['id']}; waiting for its 3 runs", flush=True)
        deadline = time.monotonic() + 60
        while True:
            runs = json.loads(subprocess.run([str(BIN / "sparkyard"), "runs", job["id"], "--json"], cwd=ROOT,
                                             text=True, stdout=subprocess.PIPE, check=True).stdout)
            if len([r for r in runs if r["state"] == "SUCCEEDED"]) >= 3:
                break
            if time.monotonic() > deadline:
                raise SystemExit("quickstart: the recurring job did not complete 3 runs in 60s")
            time.sleep(0.5)  # watching a schedule from outside, with a deadline
        sparkyard("runs", job["id"])
        (created,) = json.loads(sparkyard("apply", "examples/pipeline/etl.py", "--json", capture=True))
        print(f"applied pipeline {created['name']} ({created['job_id']}); running it once now", flush=True)
        run = json.loads(sparkyard("trigger", created["job_id"], "--json", capture=True))
        sparkyard("wait", run["id"], "--timeout", "5m")
        sparkyard("apply", "examples/pipeline/etl.py")  # the same file again: nothing changes
        sparkyard("jobs")
        print("\nquickstart: all example jobs SUCCEEDED", flush=True)
        return 0
    finally:
        local.send_signal(signal.SIGTERM)
        local.wait(timeout=120)


if __name__ == "__main__":
    sys.exit(main())
