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

The load average is printed at the start and the end: on a shared machine the figures move with it. With
``--against REV`` every row is also timed with the CLI of another commit, its ``common/`` (the ``sparkyard``
package) taken from git onto ``PYTHONPATH``, the two run alternately so that a change of load falls on both
alike; the master and the workers are this tree's.

    .venv/bin/python tests/bench/bench_cli_start.py --against main --tasks 0
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


def _once(argv: Sequence[str], env: dict[str, str], code: int, cwd: Path | None) -> float:
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    taken = time.perf_counter() - began
    if done.returncode != code:
        raise SystemExit(f"bench: {' '.join(argv)} exited {done.returncode}, not {code}: "
                         f"{done.stderr.decode(errors='replace').strip()}")
    return taken


def _figures(taken: list[float]) -> str:
    return f"{statistics.median(taken) * 1000:.0f} | {min(taken) * 1000:.0f}"


class Rows:
    """Prints one table row per command: median and best ms of ``repeat`` fresh processes; with ``against``
    (the environment of another commit's CLI) that CLI's figures first, the runs of the two alternated."""

    def __init__(self, env: dict[str, str], repeat: int, against: dict[str, str] | None) -> None:
        self.env, self.repeat, self.against = env, repeat, against
        head = "| command | median ms | best ms |"
        if against is not None:
            head = "| command | against: median ms | against: best ms | this: median ms | this: best ms |"
        print(head + "\n|" + "---|" * head.count(" | ") + "---|", flush=True)

    def row(self, what: str, argv: Sequence[str], code: int = 0, cwd: Path | None = None) -> None:
        mine: list[float] = []
        theirs: list[float] = []
        for i in range(self.repeat):  # which goes first alternates too
            if self.against is not None and i % 2:
                theirs.append(_once(argv, self.against, code, cwd))
            mine.append(_once(argv, self.env, code, cwd))
            if self.against is not None and not i % 2:
                theirs.append(_once(argv, self.against, code, cwd))
        print(f"| {what} | " + (f"{_figures(theirs)} | " if theirs else "") + f"{_figures(mine)} |", flush=True)


def against_env(rev: str, env: dict[str, str], into: Path) -> dict[str, str]:
    """The environment that runs ``rev``'s CLI: its common/ as the sparkyard package, first on PYTHONPATH."""
    archive = subprocess.run(["git", "-C", str(HERE.parents[1]), "archive", rev, "common"], capture_output=True,
                             check=True).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "common").rename(into / "sparkyard")
    return {**env, "PYTHONPATH": str(into)}


def verbs(rows: Rows, cli: str, app: Path, address: str, env: dict[str, str]) -> None:
    """The verbs that need a run to look at, on one run of a one-task job (workers are running)."""
    at = ["--master", address]
    submit = [cli, "submit", "noop.py:main", "--wait", "--json", *at]
    rows.row("`sparkyard submit noop.py:main --wait --json` (one task)", submit, cwd=app)
    run = json.loads(subprocess.run(submit, cwd=app, env=env, capture_output=True, check=True).stdout)
    rows.row("`sparkyard wait RUN` (ended)", [cli, "wait", run["id"], *at])
    rows.row("`sparkyard run RUN`", [cli, "run", run["id"], *at])
    rows.row("`sparkyard job JOB`", [cli, "job", run["job_id"], *at])
    rows.row("`sparkyard runs JOB`", [cli, "runs", run["job_id"], *at])


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
    parser.add_argument("--against", metavar="REV", help="also time the CLI of this commit, alternately")
    args = parser.parse_args()
    print(f"load average at the start: {_load()}\n")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        redis = start_redis(Path(tmp) / "redis", appendonly=False)
        cluster = Cluster(redis.url, Path(tmp) / "cluster", driver_conf="")
        env = cluster._env()
        py, cli = sys.executable, str(BIN / "sparkyard")
        try:
            if args.against:
                print(f"against: {args.against}\n")
            rows = Rows(env, args.repeat,
                        against_env(args.against, env, Path(tmp) / "against") if args.against else None)
            rows.row("`python -c pass`", [py, "-c", "pass"])
            rows.row("`python -c 'import grpc'`", [py, "-c", "import grpc"])
            rows.row("`python -c 'import sparkyard.cli.main'`", [py, "-c", "import sparkyard.cli.main"])
            rows.row("`sparkyard --help`", [cli, "--help"])
            rows.row("`sparkyard submit` (argument error, exit 2)", [cli, "submit"], code=2)
            refused = f"127.0.0.1:{free_port()}"
            rows.row("`sparkyard status`, nothing listening (exit 69)", [cli, "status", "--master", refused], code=69)
            address = cluster.start_master()
            rows.row("`sparkyard jobs`, a running master", [cli, "jobs", "--master", address])
            rows.row("`sparkyard status`, a running master", [cli, "status", "--master", address])
            rows.row("`sparkyard workers`", [cli, "workers", "--master", address])
            app = throughput_paths.make_app(Path(tmp) / "app", args.tasks)
            rows.row("`sparkyard submit noop.py:main` (no wait)", [cli, "submit", "noop.py:main", "--master", address],
                     cwd=app)
            pool = WorkerPool([address], 2, 2)
            try:
                verbs(rows, cli, app, address, env)
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
