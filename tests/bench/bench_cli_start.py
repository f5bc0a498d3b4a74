"""How fast the CLI starts, and what ``submit --wait --json`` of a big split run fetches beside what it prints.

    .venv/bin/python tests/bench/bench_cli_start.py [--repeat 10] [--tasks 2000]

Every figure is the median (and best) wall time of ``--repeat`` runs of a fresh process, from its start to
its exit, in the order printed:

* floors: the interpreter alone (``python -c pass``), ``import grpc`` (what any command that talks to a
  master must load), and ``import sparkyard.cli.main`` (what every command loads before it parses);
* ``sparkyard --help``, an argument error (``sparkyard submit`` without its entrypoint: exit 2), ``sparkyard
  status`` against a port where nothing listens (exit 69), and ``sparkyard jobs`` and ``sparkyard status``
  against a running master (a fresh redis-server and a master of the default configuration, no jobs);
* then the other verbs users run most, against the same master: ``sparkyard workers``, ``sparkyard submit
  noop.py:main`` (no workers yet: it is stored and fires, nothing more); then, with two protocol-level workers
  × 2 slots (tests/bench/protocol_worker.py: they finish each task at once, no Spark), ``sparkyard submit
  noop.py:main --wait --json`` (one task, start to the run ended), and on one such run ``sparkyard wait RUN``,
  ``sparkyard run RUN``, ``sparkyard job JOB`` and ``sparkyard runs JOB`` (tables: they import rich);
* with ``--tasks N`` (0 skips it): ``sparkyard submit noop.py:main --inputs 'in/*' --parallelism N --wait
  --json`` over N input files on the same workers, run through tests/bench/cli_fetched.py: its wall time,
  the bytes it printed and, per gRPC method, the bytes of the replies it fetched.

The load average is printed at the start and the end: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Cluster, free_port, start_redis  # noqa: E402
from protocol_worker import WorkerPool  # noqa: E402
import throughput_paths  # noqa: E402

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent


def _load() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(argv: Sequence[str], env: dict[str, str], repeat: int, code: int = 0,
          cwd: Path | None = None) -> tuple[float, float]:
    """(median, best) wall seconds of ``argv`` run ``repeat`` times (in ``cwd``); each must exit ``code``."""
    taken = []
    for _ in range(repeat):
        began = time.perf_counter()
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        taken.append(time.perf_counter() - began)
        if done.returncode != code:
            raise SystemExit(f"bench: {' '.join(argv)} exited {done.returncode}, not {code}: "
                             f"{done.stderr.decode(errors='replace').strip()}")
    return statistics.median(taken), min(taken)


def _row(what: str, figures: tuple[float, float]) -> None:
    print(f"| {what} | {figures[0] * 1000:.0f} | {figures[1] * 1000:.0f} |", flush=True)


def verbs(cli: str, app: Path, address: str, env: dict[str, str], repeat: int) -> None:
    """The verbs that need a run to look at, on one run of a one-task job (workers are running)."""
    at = ["--master", address]
    submit = [cli, "submit", "noop.py:main", "--wait", "--json", *at]
    _row("`sparkyard submit noop.py:main --wait --json` (one task)", timed(submit, env, repeat, cwd=app))
    run = json.loads(subprocess.run(submit, cwd=app, env=env, capture_output=True, check=True).stdout)
    _row("`sparkyard wait RUN` (ended)", timed([cli, "wait", run["id"], *at], env, repeat))
    _row("`sparkyard run RUN`", timed([cli, "run", run["id"], *at], env, repeat))
    _row("`sparkyard job JOB`", timed([cli, "job", run["job_id"], *at], env, repeat))
    _row("`sparkyard runs JOB`", timed([cli, "runs", run["job_id"], *at], env, repeat))


def wait_json(app: Path, address: str, tasks: int, env: dict[str, str]) -> None:
    """The big split run through the CLI, with what it fetched per method beside what it printed."""
    argv = [sys.executable, str(HERE / "cli_fetched.py"), "submit", "noop.py:main", "--inputs", "in/*",
            "--parallelism", str(tasks), "--wait", "--json", "--master", address]
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=app, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - began
    lines = done.stderr.decode(errors="replace").splitlines()
    if done.returncode != 0:
        raise SystemExit(f"bench: the CLI submit exited {done.returncode}: {' '.join(lines[-3:])}")
    fetched = json.loads(next(line for line in lines if line.startswith("fetched: ")).removeprefix("fetched: "))
    run = json.loads(done.stdout)
    print(f"\n`sparkyard submit noop.py:main --inputs 'in/*' --parallelism {tasks} --wait --json`: "
          f"{wall:.2f} s start → exit, run {run['state']} with {len(run.get('tasks', []))} tasks, "
          f"printed {len(done.stdout):,} bytes (JSON)\n")
    print("| method | calls | reply bytes (protobuf) |\n|---|---|---|")
    for method, seen in fetched.items():
        print(f"| {method} | {seen['calls']} | {seen['bytes']:,} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument("--tasks", type=int, default=2000, help="tasks of the --wait --json run (0: none)")
    args = parser.parse_args()
    print(f"load average at the start: {_load()}\n")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        redis = start_redis(Path(tmp) / "redis", appendonly=False)
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        env = cluster._env()
        py, cli, n = sys.executable, str(BIN / "sparkyard"), args.repeat
        try:
            print("| command | median ms | best ms |\n|---|---|---|")
            _row("`python -c pass`", timed([py, "-c", "pass"], env, n))
            _row("`python -c 'import grpc'`", timed([py, "-c", "import grpc"], env, n))
            _row("`python -c 'import sparkyard.cli.main'`", timed([py, "-c", "import sparkyard.cli.main"], env, n))
            _row("`sparkyard --help`", timed([cli, "--help"], env, n))
            _row("`sparkyard submit` (argument error, exit 2)", timed([cli, "submit"], env, n, code=2))
            refused = f"127.0.0.1:{free_port()}"
            _row("`sparkyard status`, nothing listening (exit 69)",
                 timed([cli, "status", "--master", refused], env, n, code=69))
            address = cluster.start_master()
            _row("`sparkyard jobs`, a running master", timed([cli, "jobs", "--master", address], env, n))
            _row("`sparkyard status`, a running master", timed([cli, "status", "--master", address], env, n))
            _row("`sparkyard workers`", timed([cli, "workers", "--master", address], env, n))
            app = throughput_paths.make_app(Path(tmp) / "app", args.tasks)
            _row("`sparkyard submit noop.py:main` (no wait)",
                 timed([cli, "submit", "noop.py:main", "--master", address], env, n, cwd=app))
            pool = WorkerPool([address], 2, 2)
            try:
                verbs(cli, app, address, env, n)
                if args.tasks:
                    wait_json(app, address, args.tasks, env)
            finally:
                pool.close()
        finally:
            cluster.stop()
            redis.stop()
    print(f"\nload average at the end: {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
