"""``sparkyard``: the command line of Sparkyard.

Every verb takes ``--json``; the master is ``--master HOST:PORT`` or ``SPARKYARD_MASTER`` (default
127.0.0.1:7070) and the token ``--token`` or ``SPARKYARD_TOKEN``. Errors print one line on stderr and
exit non-zero (2 for bad input, 1 otherwise); ``wait`` exits 0 when the run SUCCEEDED, 1 when it ended
otherwise, 124 when the wait timed out.
"""

from __future__ import annotations

import argparse
import glob
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console

from sparkyard import errors
from sparkyard.cli import render
from sparkyard.client import Client, first_run_id
from sparkyard.config import ConfigError
from sparkyard.spec import parse_input
from sparkyard.v1 import sparkyard_pb2 as pb

EXIT_TIMEOUT = 124


def _common(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    """The options every verb takes; accepted before or after the verb."""
    p.add_argument("--master", default=default if default is argparse.SUPPRESS else None,
                   help="HOST:PORT of the master (or SPARKYARD_MASTER; default 127.0.0.1:7070)")
    p.add_argument("--token", default=default if default is argparse.SUPPRESS else None,
                   help="the master's token (or SPARKYARD_TOKEN)")
    p.add_argument("--config", default=default if default is argparse.SUPPRESS else None,
                   help="TOML file whose [client] table sets master and token (or SPARKYARD_CONFIG)")
    p.add_argument("--json", action="store_true", default=default if default is argparse.SUPPRESS else False,
                   help="print JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkyard", description="Submit and watch PySpark jobs on Sparkyard.")
    _common(parser, default=None)
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    s = sub.add_parser("submit", help="submit a job")
    _common(s)
    s.add_argument("entrypoint", help="path/to/job.py[:function] or package.module:function")
    s.add_argument("--arg", action="append", default=[], help="argument for the job (repeatable)")
    s.add_argument("--name", default="")
    s.add_argument("--group", default="", help="node group (default 'default')")
    s.add_argument("--priority", type=int, default=0, help="-1000..1000, higher first (default 0)")
    s.add_argument("--runner", choices=["submit", "session"], default="", help="default: the worker's runner")
    s.add_argument("--conf", action="append", default=[], metavar="K=V", help="Spark conf (repeatable)")
    s.add_argument("--env", action="append", default=[], metavar="K=V", help="environment variable (repeatable)")
    s.add_argument("--py-files", action="append", default=[],
                   help=".py/.zip/.egg files put on the task's sys.path, shipped with the job (repeatable or comma-separated)")
    s.add_argument("--files", action="append", default=[],
                   help="data files shipped with the job, at their path relative to here (repeatable or comma-separated)")
    s.add_argument("--bundle", metavar="DIR", help="ship this project directory (minus .sparkyardignore); "
                   "it becomes the task's working directory and is on sys.path")
    s.add_argument("--cwd", help="the task's working directory on the worker (default: see docs/runners.md)")
    s.add_argument("--task-memory", help="memory limit of each attempt, e.g. 2g (default: the worker's)")
    s.add_argument("--no-ship", action="store_true",
                   help="do not upload the entrypoint: it must be readable at its absolute path on the workers")
    s.add_argument("--retries", type=int, default=0, help="retries after a failed attempt (default 0)")
    s.add_argument("--backoff", help="delay before the first retry, doubling after (default 5s)")
    s.add_argument("--max-backoff", help="largest retry delay (default 10m)")
    s.add_argument("--timeout", help="per-attempt timeout, e.g. 30m (default none)")
    when = s.add_mutually_exclusive_group()
    when.add_argument("--delay", help="fire once after this delay, e.g. 10s")
    when.add_argument("--at", help="fire once at this ISO 8601 time, e.g. 2026-11-22T03:00:00Z")
    when.add_argument("--cron", help="cron expression: 5 fields, or 6 with seconds first")
    when.add_argument("--every", help="fire at a fixed rate, e.g. 10s")
    s.add_argument("--tz", default="", help="time zone of --cron (IANA name; default UTC)")
    s.add_argument("--fixed-delay", action="store_true", help="with --every: count from the end of the previous run")
    s.add_argument("--start-at", help="recurring jobs: no firing before this time")
    s.add_argument("--end-at", help="recurring jobs: no firing after this time")
    s.add_argument("--max-runs", type=int, default=0, help="recurring jobs: stop after this many runs")
    s.add_argument("--misfire", choices=["skip", "fire-once", "catch-up"], default="",
                   help="what to do with firings missed while the master was down or the job paused (default fire-once)")
    s.add_argument("--catch-up-limit", type=int, default=0, help="with --misfire catch-up: most missed runs replayed")
    s.add_argument("--overlap", choices=["allow", "forbid", "replace"], default="",
                   help="a firing while the previous run is active: allow (default), forbid (skip), replace (cancel it)")
    s.add_argument("--input", action="append", default=[], metavar="[MARK=]VALUE",
                   help="an input to split over tasks (repeatable); MARK is its resource mark")
    s.add_argument("--inputs", action="append", default=[], metavar="GLOB", help="inputs matching a glob (repeatable)")
    s.add_argument("--parallelism", type=int, default=0, help="number of tasks (default: one per input)")
    s.add_argument("--max-bytes-per-sec", type=int, default=0)
    s.add_argument("--max-records-per-sec", type=int, default=0)
    s.add_argument("--task-bytes-per-sec", type=int, default=0)
    s.add_argument("--task-records-per-sec", type=int, default=0)
    s.add_argument("--max-concurrent", type=int, default=0, help="at most this many tasks of a run at once")
    s.add_argument("--routing", choices=["least-loaded", "round-robin", "random", "consistent-hash", "previous-worker"],
                   default="", help="worker choice (default: previous worker if idle, else least-loaded)")
    s.add_argument("--routing-key", default="", help="key for --routing consistent-hash")
    s.add_argument("--label", action="append", default=[], metavar="K=V")
    s.add_argument("--idempotency-key", help="a retried submit with the same key returns the same job")
    s.add_argument("--wait", action="store_true", help="wait for the first run to end")
    s.add_argument("--wait-timeout", help="with --wait: give up after this long")

    j = sub.add_parser("jobs", help="list jobs (newest first)")
    _common(j)
    j.add_argument("--state", choices=["active", "paused", "completed", "cancelled"], default="")
    j.add_argument("--group", default="")
    j.add_argument("--limit", type=int, default=50)

    for verb, text in (("job", "show a job"), ("pause", "pause a job"), ("resume", "resume a job"),
                       ("trigger", "run a job now")):
        p = sub.add_parser(verb, help=text)
        _common(p)
        p.add_argument("job_id")

    r = sub.add_parser("runs", help="list a job's runs (newest first)")
    _common(r)
    r.add_argument("job_id")
    r.add_argument("--limit", type=int, default=20)

    r = sub.add_parser("run", help="show a run with its tasks and attempts")
    _common(r)
    r.add_argument("run_id")

    w = sub.add_parser("wait", help="wait for a run to end")
    _common(w)
    w.add_argument("run_id")
    w.add_argument("--timeout", help="give up after this long, e.g. 10m (exit 124)")

    c = sub.add_parser("cancel", help="cancel a job, run or task")
    _common(c)
    c.add_argument("id")
    c.add_argument("--reason", default="")

    w = sub.add_parser("workers", help="list workers and their slots")
    _common(w)
    w.add_argument("--all", action="store_true", help="include workers that are gone")

    st = sub.add_parser("status", help="the master's view of the cluster")
    _common(st)

    lg = sub.add_parser("logs", help="print a task attempt's log")
    _common(lg)
    lg.add_argument("task_id")
    lg.add_argument("--attempt", type=int, default=0, help="attempt number (default: latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the attempt ends")

    lc = sub.add_parser("local", help="run Redis, a master and workers here until Ctrl-C")
    _common(lc)
    lc.add_argument("--workers", type=int, default=2)
    lc.add_argument("--slots", type=int, default=2)
    lc.add_argument("--listen", default="127.0.0.1:7070")
    lc.add_argument("--data-dir", default=".sparkyard/local")
    lc.add_argument("--runner", choices=["submit", "session"], default="session")
    return parser


def _inputs(args: argparse.Namespace) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for text in args.input:
        try:
            parsed = parse_input(text)
        except ValueError as exc:
            raise errors.InvalidArgument(str(exc)) from None
        out.append((parsed.value, parsed.mark))
    for pattern in args.inputs:
        matches = sorted(glob.glob(pattern, recursive=True))
        if not matches:
            raise errors.InvalidArgument(f"inputs: no file matches {pattern!r}")
        out += [(str(Path(m).resolve()), "") for m in matches]
    return out


def cmd_submit(client: Client, args: argparse.Namespace, out: Callable[..., None]) -> int:
    job = client.submit(
        args.entrypoint, idempotency_key=args.idempotency_key, args=args.arg, name=args.name, group=args.group,
        priority=args.priority, runner=args.runner, conf=args.conf, env=args.env, py_files=args.py_files,
        retries=args.retries, backoff=args.backoff, max_backoff=args.max_backoff, timeout=args.timeout,
        delay=args.delay, at=args.at, cron=args.cron or "", tz=args.tz, every=args.every,
        fixed_delay=args.fixed_delay, start_at=args.start_at, end_at=args.end_at, max_runs=args.max_runs,
        misfire=args.misfire, catch_up_limit=args.catch_up_limit, overlap=args.overlap, inputs=_inputs(args),
        parallelism=args.parallelism, max_bytes_per_sec=args.max_bytes_per_sec,
        max_records_per_sec=args.max_records_per_sec, task_bytes_per_sec=args.task_bytes_per_sec,
        task_records_per_sec=args.task_records_per_sec, max_concurrent=args.max_concurrent, routing=args.routing,
        routing_key=args.routing_key, labels=dict(kv.split("=", 1) for kv in args.label if "=" in kv),
        files=args.files, bundle=args.bundle, cwd=args.cwd, task_memory=args.task_memory, ship=not args.no_ship,
    )
    if not args.wait:
        out(job, lambda c: c.print(f"submitted job {job.id} ({job.spec.name}); next run {first_run_id(job)}"))
        return 0
    run, timed_out = client.wait(first_run_id(job), args.wait_timeout)
    out(run, lambda c: render.run_detail(c, run))
    return _wait_code(run, timed_out)


def _wait_code(run: pb.Run, timed_out: bool) -> int:
    if timed_out:
        return EXIT_TIMEOUT
    return 0 if run.state == pb.RUN_SUCCEEDED else 1


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    stream = sys.stdout.buffer
    for chunk in client.logs(args.task_id, attempt=args.attempt, follow=args.follow):
        stream.write(chunk)
        stream.flush()
    return 0


def cmd_local(args: argparse.Namespace) -> int:
    from sparkyard.cli.local import LocalCluster

    cluster = LocalCluster(workers=args.workers, slots=args.slots, listen=args.listen, data_dir=Path(args.data_dir),
                           runner=args.runner, token=args.token or "")
    stop = {"now": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    address = cluster.start()
    if args.json:
        render.print_json({"master": address, "workers": args.workers, "slots": args.slots,
                           "data_dir": str(cluster.data_dir), "pids": [p.pid for p in cluster.processes]})
    else:
        print(f"local cluster ready: master {address}, {args.workers} workers x {args.slots} slots "
              f"(logs in {cluster.data_dir / 'logs'}); Ctrl-C stops it", flush=True)
    try:
        while not stop["now"]:
            if not cluster.supervise():
                print("sparkyard: the master exited; stopping the cluster", file=sys.stderr)
                break
            time.sleep(0.5)  # waiting for Ctrl-C / SIGTERM
    finally:
        cluster.stop()
    return 0


def dispatch(args: argparse.Namespace) -> int:
    console = render.console()

    def out(message: Any, human: Callable[[Console], None]) -> None:
        if args.json:
            if isinstance(message, list):
                render.print_json([render.to_dict(m) for m in message])
            else:
                render.print_json(render.to_dict(message))
        else:
            human(console)

    if args.verb == "local":
        return cmd_local(args)
    with Client(args.master, token=args.token, config_file=args.config) as client:
        verb = args.verb
        if verb == "submit":
            return cmd_submit(client, args, out)
        if verb == "jobs":
            jobs = client.jobs(limit=args.limit, state=args.state, group=args.group)
            out(jobs, lambda c: render.jobs_table(c, jobs))
        elif verb in ("job", "pause", "resume"):
            job = {"job": client.job, "pause": client.pause, "resume": client.resume}[verb](args.job_id)
            out(job, lambda c: render.jobs_table(c, [job]))
        elif verb == "trigger":
            run = client.trigger(args.job_id)
            out(run, lambda c: render.runs_table(c, [run]))
        elif verb == "runs":
            runs = client.runs(args.job_id, limit=args.limit, with_tasks=args.json)
            out(runs, lambda c: render.runs_table(c, runs))
        elif verb == "run":
            run = client.run(args.run_id)
            out(run, lambda c: render.run_detail(c, run))
        elif verb == "wait":
            run, timed_out = client.wait(args.run_id, args.timeout)
            out(run, lambda c: render.run_detail(c, run))
            if timed_out and not args.json:
                print(f"sparkyard: run {args.run_id} still {pb.RunState.Name(run.state)} after {args.timeout}",
                      file=sys.stderr)
            return _wait_code(run, timed_out)
        elif verb == "cancel":
            cancelled = client.cancel(args.id, args.reason)
            if args.json:
                render.print_json({"cancelled": cancelled})
            else:
                console.print(f"cancelled {len(cancelled)}: {' '.join(cancelled)}")
        elif verb == "workers":
            workers = client.workers(include_dead=args.all)
            out(workers, lambda c: render.workers_table(c, workers))
        elif verb == "status":
            status = client.status()
            out(status, lambda c: c.print(render.to_dict(status)))
        elif verb == "logs":
            return cmd_logs(client, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return dispatch(args)
    except (errors.InvalidArgument, ConfigError) as exc:
        print(f"sparkyard: {exc}", file=sys.stderr)
        return 2
    except errors.SparkyardError as exc:
        print(f"sparkyard: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        if os.environ.get("SPARKYARD_DEBUG"):
            raise
        print(f"sparkyard: internal error: {type(exc).__name__}: {exc} (SPARKYARD_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
