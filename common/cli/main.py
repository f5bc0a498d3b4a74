"""``sparkyard``: the command line of Sparkyard.

Every verb takes ``--json``; the master is ``--master HOST:PORT`` or ``SPARKYARD_MASTER`` (default
127.0.0.1:7070), the token ``--token``, ``--token-file`` or ``SPARKYARD_TOKEN``, and TLS ``--tls-ca``
(``--tls-cert``/``--tls-key`` for mutual TLS) or ``SPARKYARD_TLS_*``. Errors print one line on stderr and
exit non-zero (2 for bad input, 69 when no master could be reached, 1 otherwise); ``wait`` exits 0 when the
run SUCCEEDED, 1 when it ended otherwise, 124 when the wait timed out.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, NoReturn

from rich.console import Console

from sparkyard import errors, resources
from sparkyard.cli import render, submit_line
from sparkyard.cli.offline import cmd_certs, cmd_local
from sparkyard.channel import TLS_FLAGS
from sparkyard.client import Client, first_run_id
from sparkyard.config import DEFAULT_LISTEN, ClientConfig, ConfigError
from sparkyard.flags import flag_help
from sparkyard.options import JobOptions
from sparkyard.protojson import to_dict
from sparkyard.runners import DEFAULT_RUNNER, RUNNER_NAMES
from sparkyard.timeutil import rfc3339_ms
from sparkyard.v1 import sparkyard_pb2 as pb

EXIT_TIMEOUT = 124
# No master could be reached (or none could serve the call): not the same as a run that failed (1), so that a
# script can tell "try again later" from "the job is broken". sysexits.h's EX_UNAVAILABLE.
EXIT_UNREACHABLE = 69
JOB_REF = "a job id, or a job's name when one job has it"


# The connection options every verb takes: (flag, help).
_CONNECTION = (
    ("--master", flag_help(ClientConfig, "master")),
    ("--token", flag_help(ClientConfig, "token")),
    *TLS_FLAGS,
    ("--config", "TOML file whose [client] table sets these (or SPARKYARD_CONFIG)"),
)


# The connection options of the top parser that the verbs needing no master (local, certs) do not read.
_UNUSED_OFFLINE = ("master", "config", "tls_ca", "tls_cert", "tls_key")


def _common(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    """The options every verb that talks to a master takes; accepted before or after the verb."""
    for flag, text in _CONNECTION:
        p.add_argument(flag, default=default if default is argparse.SUPPRESS else None, help=text)
    _json(p, default)


def _json(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    p.add_argument("--json", action="store_true", default=default if default is argparse.SUPPRESS else False,
                   help="print JSON")


def _unused_offline(args: argparse.Namespace) -> str:
    """The connection flags given (before the verb) to a verb that opens no client: said, not ignored."""
    return ", ".join(f"--{name.replace('_', '-')}" for name in _UNUSED_OFFLINE if getattr(args, name, None))


class _Parser(argparse.ArgumentParser):
    """No abbreviations: the top parser would read a verb's ``--to`` as an ambiguous ``--token``/``--token-file``,
    and a flag added later must not change what an abbreviation in someone's script means."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(**kwargs)

    def error(self, message: str) -> NoReturn:
        """One line naming the verb (``sparkyard submit: …``), exit 2: not the usage of every option."""
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _submit_options(s: argparse.ArgumentParser) -> None:
    _common(s)
    JobOptions.add_arguments(s)
    s.add_argument("--idempotency-key", help="a retried submit with the same key returns the same job")
    s.add_argument("--wait", action="store_true", default=None, help="wait for the first run to end")
    s.add_argument("--wait-timeout", help="with --wait: give up after this long")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="sparkyard", description="Submit and watch PySpark jobs on Sparkyard.")
    _common(parser, default=None)
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")  # its verbs are _Parsers too

    s = sub.add_parser("submit", help="submit a job")
    submit_line.add_arguments(s, _submit_options)

    u = sub.add_parser("update", help="change a job from its next firing on (only the options given)")
    _common(u)
    u.add_argument("job_id", metavar="JOB", help=JOB_REF)
    u.add_argument("--entrypoint", default="", help="ship the job's code anew from this entrypoint (with "
                                                    "--py-files, --files, --bundle as given)")
    JobOptions.add_arguments(u)

    j = sub.add_parser("jobs", help="list jobs (newest first)")
    _common(j)
    j.add_argument("--state", choices=["active", "paused", "completed", "failed", "cancelled"], default="",
                   help="failed: completed jobs (they fire no more) whose last run failed")
    j.add_argument("--group", default="")
    j.add_argument("--name", default="", help="only the jobs with this name")
    j.add_argument("--limit", type=int, default=50)

    for verb, text in (("job", "show a job"), ("pause", "pause a job"), ("resume", "resume a job"),
                       ("trigger", "run a job now")):
        p = sub.add_parser(verb, help=text)
        _common(p)
        p.add_argument("job_id", metavar="JOB", help=JOB_REF)

    b = sub.add_parser("backfill", help="run a recurring job's past fire times in a range")
    _common(b)
    b.add_argument("job_id", metavar="JOB", help=JOB_REF)
    b.add_argument("--from", dest="start", required=True, metavar="TIME",
                   help="first fire time, inclusive (ISO 8601 with an offset, e.g. 2026-11-01T00:00:00Z)")
    b.add_argument("--to", dest="end", required=True, metavar="TIME",
                   help="last fire time, inclusive (not in the future)")
    b.add_argument("--max-concurrent", type=int, default=1, metavar="N",
                   help="most of the job's runs active at once while it goes on (default 1)")

    rr = sub.add_parser("rerun", help="run an ended run again as a new run (the original is kept)")
    _common(rr)
    rr.add_argument("run_id")
    rr.add_argument("--failed-only", action="store_true", help="only its failed and cancelled tasks")

    r = sub.add_parser("runs", help="list a job's runs (newest first)")
    _common(r)
    r.add_argument("job_id", metavar="JOB", help=JOB_REF)
    r.add_argument("--limit", type=int, default=20)

    ap = sub.add_parser("apply", help="make the master's pipelines match definition files (docs/pipelines.md)")
    _common(ap)
    ap.add_argument("paths", nargs="+", metavar="FILE", help="a Python file defining pipelines")
    ap.add_argument("--prune", action="store_true", help="delete pipelines that no file defines any more")
    ap.add_argument("--dry-run", action="store_true", help="print what would change; change nothing")

    r = sub.add_parser("run", help="show a run with its tasks and attempts (a pipeline run: its steps)")
    _common(r)
    r.add_argument("run_id")

    w = sub.add_parser("wait", help="wait for a run to end")
    _common(w)
    w.add_argument("run_id")
    w.add_argument("--timeout", help="give up after this long, e.g. 10m (exit 124)")

    c = sub.add_parser("cancel", help="cancel a job, run or task")
    _common(c)
    c.add_argument("id", help="a job, run or task id, or a job's name")
    c.add_argument("--reason", default="")

    d = sub.add_parser("delete", help="delete a job (its history is deleted in the background)")
    _common(d)
    d.add_argument("job_id", metavar="JOB", help=JOB_REF)
    d.add_argument("--force", action="store_true", help="cancel the job's active runs first (else refused)")

    w = sub.add_parser("workers", help="list workers and their slots")
    _common(w)
    w.add_argument("--all", action="store_true", help="include workers that are gone")

    dr = sub.add_parser("drain", help="make a worker finish its tasks (or hand them back) and exit")
    _common(dr)
    dr.add_argument("worker_id")

    st = sub.add_parser("status", help="the master's view of the cluster")
    _common(st)

    lg = sub.add_parser("logs", help="print a task attempt's log")
    _common(lg)
    lg.add_argument("task_id")
    lg.add_argument("--attempt", type=int, default=0, help="attempt number (default: latest)")
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the attempt ends")

    ct = sub.add_parser("certs", help="make a development CA and TLS certificates for masters, workers and clients")
    _json(ct)
    ct.add_argument("dir", help="directory to write ca.crt, server.crt/.key and client.crt/.key into")
    ct.add_argument("--host", action="append", default=[], metavar="NAME_OR_IP",
                    help="a name or address masters are reached at (repeatable; localhost and 127.0.0.1 always)")

    lc = sub.add_parser("local", help="run Redis, a master and workers here until Ctrl-C")
    _json(lc)  # it starts its own master, plaintext on loopback: no --master, --tls-* or --config
    lc.add_argument("--token", default=argparse.SUPPRESS,
                    help="a token the local master requires of clients and its workers send (default: none)")
    lc.add_argument("--token-file", default=argparse.SUPPRESS, help="file holding that token, kept out of `ps`")
    lc.add_argument("--workers", type=int, default=2, metavar="N", help="how many workers to start (default 2)")
    lc.add_argument("--slots", type=int, default=2, metavar="N", help="task slots of each worker (default 2)")
    lc.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                    help=f"the master's gRPC address (default {DEFAULT_LISTEN})")
    lc.add_argument("--http", default="", metavar="HOST:PORT",
                    help="serve the web console and /metrics here (default: none), e.g. 127.0.0.1:8080")
    lc.add_argument("--data-dir", default=".sparkyard/local", metavar="DIR",
                    help="Redis data, worker dirs and logs/ (default .sparkyard/local)")
    lc.add_argument("--runner", choices=RUNNER_NAMES, default=DEFAULT_RUNNER,
                    help=f"how workers run tasks (default {DEFAULT_RUNNER})")
    return parser


def cmd_submit(client: Client, args: argparse.Namespace, out: Callable[..., None]) -> int:
    spec, _ = JobOptions.from_namespace(args).to_spec(args.entrypoint)
    after = spec.trigger.after if spec.trigger.WhichOneof("kind") == "after" else None
    if after is not None and args.wait:
        raise errors.InvalidArgument("wait: a child job (--after) has no run yet to wait for; wait for one of its "
                                     "runs with `sparkyard wait RUN`")
    job = client.submit_spec(spec, args.idempotency_key).job
    _warn_unhonoured(job)
    if after is not None:
        out(job, lambda c: c.print(f"submitted job {job.id} ({job.spec.name}); it fires when a run of job "
                                   f"{after.job_id} ends ({render.after_when(after.when)})"))
        return 0
    if not args.wait:
        out(job, lambda c: c.print(f"submitted job {job.id} ({job.spec.name}); next run {first_run_id(job)}"))
        return 0
    run, timed_out = _wait(client, first_run_id(job), args.wait_timeout, args)
    out(run, lambda c: render.run_detail(c, run))
    return _wait_code(run, timed_out)


def _warn_unhonoured(job: pb.Job) -> None:
    notice = resources.submit_notice(job.spec)
    if notice:
        print(f"sparkyard: warning: {notice}", file=sys.stderr)


def _wait(client: Client, run_id: str, timeout: str | None, args: argparse.Namespace) -> tuple[pb.Run, bool]:
    """Wait for a run; on a terminal (and without --json) with a bar of its tasks done out of all."""
    bar_console = Console(stderr=True)
    if args.json or not bar_console.is_terminal:
        return client.wait(run_id, timeout)
    with render.task_progress(bar_console, run_id) as show:
        run, timed_out = client.wait(run_id, timeout, on_progress=show)
        show(run)
    return run, timed_out


def _wait_code(run: pb.Run, timed_out: bool) -> int:
    if timed_out:
        return EXIT_TIMEOUT
    return 0 if run.state == pb.RUN_SUCCEEDED else 1


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    """The log as it is; with --json one object ``{"task", "attempt" (when given), "log"}``, or with -f one a
    line per chunk as it comes (the log's bytes as UTF-8, a bad byte replaced)."""
    chunks = client.logs(args.task_id, attempt=args.attempt, follow=args.follow)
    head: dict[str, Any] = {"task": args.task_id, **({"attempt": args.attempt} if args.attempt else {})}
    if args.json and not args.follow:
        render.print_json({**head, "log": b"".join(chunks).decode(errors="replace")})
        return 0
    stream = sys.stdout.buffer
    for chunk in chunks:
        if args.json:
            line = json.dumps({**head, "log": chunk.decode(errors="replace")})
            stream.write(line.encode() + b"\n")
        else:
            stream.write(chunk)
        stream.flush()
    return 0


def dispatch(args: argparse.Namespace) -> int:
    console = render.console()

    def out(message: Any, human: Callable[[Console], None]) -> None:
        if args.json:
            if isinstance(message, list):
                render.print_json([to_dict(m) for m in message])
            else:
                render.print_json(to_dict(message))
        else:
            human(console)

    if args.verb in ("local", "certs"):
        if unused := _unused_offline(args):
            raise errors.InvalidArgument(f"{unused}: not used by {args.verb} (it talks to no master)")
        return cmd_local(args) if args.verb == "local" else cmd_certs(args)
    with Client(args.master, token=args.token, config_file=args.config, token_file=args.token_file,
                tls_ca=args.tls_ca, tls_cert=args.tls_cert, tls_key=args.tls_key) as client:
        verb = args.verb
        if verb == "submit":
            return cmd_submit(client, args, out)
        if verb == "update":
            change, fields, _ = JobOptions.from_namespace(args).to_update(JobOptions.given(args), args.entrypoint)
            job = client.update_spec(args.job_id, change, fields)
            _warn_unhonoured(job)
            out(job, lambda c: c.print(f"updated job {job.id} to spec version {job.spec_version} "
                                       f"({render.field_words(fields)}); from its next firing on"))
        elif verb == "jobs":
            jobs = client.jobs(limit=args.limit, state=args.state, group=args.group, name=args.name)
            out(jobs, lambda c: render.jobs_table(c, jobs))
        elif verb in ("job", "pause", "resume"):
            job = {"job": client.job, "pause": client.pause, "resume": client.resume}[verb](args.job_id)
            out(job, lambda c: render.jobs_table(c, [job]))
            if verb == "job" and job.spec.steps and not args.json:
                render.pipeline_graph(console, job)
                render.runs_table(console, client.runs(job.id, limit=5))
        elif verb == "trigger":
            run = client.trigger(args.job_id)
            out(run, lambda c: render.runs_table(c, [run]))
        elif verb == "backfill":
            plan = client.backfill(args.job_id, args.start, args.end, max_concurrent=args.max_concurrent)
            first, last = rfc3339_ms(plan.first.ToMilliseconds()), rfc3339_ms(plan.last.ToMilliseconds())
            out(plan, lambda c: c.print(
                f"backfill of job {args.job_id}: {plan.planned} fire times from {first} to {last} ({plan.added} new); "
                f"{plan.pending} still to run, at most {args.max_concurrent} at once (sparkyard runs {args.job_id})"))
        elif verb == "rerun":
            rerun = client.rerun(args.run_id, failed_only=args.failed_only)
            what = (f"{sum(s.state != pb.STEP_SUCCEEDED for s in rerun.steps)} of {len(rerun.steps)} steps"
                    if rerun.steps else render.plural(rerun.task_count, "task"))
            out(rerun, lambda c: c.print(f"run {rerun.id} reruns {args.run_id} with {what}"))
        elif verb == "runs":
            runs = client.runs(args.job_id, limit=args.limit, with_tasks=args.json)
            out(runs, lambda c: render.runs_table(c, runs))
        elif verb == "apply":
            from sparkyard.cli.apply import apply as apply_files, describe  # only here: a submit loads no pipelines
            changes = apply_files(client, args.paths, prune=args.prune, dry_run=args.dry_run)
            if args.json:
                render.print_json([c.to_dict() for c in changes])
            else:
                for change in changes:
                    console.print(describe(change, args.dry_run), highlight=False, markup=False)
        elif verb == "run":
            run = client.run(args.run_id)
            out(run, lambda c: render.run_detail(c, run))
        elif verb == "wait":
            run, timed_out = _wait(client, args.run_id, args.timeout, args)
            out(run, lambda c: render.run_detail(c, run))
            if timed_out and not args.json:
                print(f"sparkyard wait: run {args.run_id} still {pb.RunState.Name(run.state)} after {args.timeout}",
                      file=sys.stderr)
            return _wait_code(run, timed_out)
        elif verb == "cancel":
            cancelled = client.cancel(args.id, args.reason)
            if args.json:
                render.print_json({"cancelled": cancelled})
            else:
                console.print(f"cancelled {len(cancelled)}: {' '.join(cancelled)}")
        elif verb == "delete":
            cancelled = client.delete(args.job_id, force=args.force)
            if args.json:
                render.print_json({"deleted": args.job_id, "cancelled": cancelled})
            else:
                console.print(f"deleted {args.job_id}" + (f"; cancelled {' '.join(cancelled)}" if cancelled else ""))
        elif verb == "workers":
            workers = client.workers(include_dead=args.all)
            out(workers, lambda c: render.workers_table(c, workers))
        elif verb == "drain":
            client.drain(args.worker_id)
            if args.json:
                render.print_json({"draining": args.worker_id})
            else:
                console.print(f"worker {args.worker_id} is draining")
        elif verb == "status":
            status = client.status()
            out(status, lambda c: c.print(to_dict(status)))
        elif verb == "logs":
            return cmd_logs(client, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # said by the verb they were given to, not by the top parser's usage
        print(f"sparkyard {args.verb}: unrecognized arguments: {' '.join(unknown)} (see sparkyard {args.verb} --help)",
              file=sys.stderr)
        return 2
    said = f"sparkyard {args.verb}"  # every error names the verb it came from
    try:
        return dispatch(args)
    except (errors.InvalidArgument, ConfigError) as exc:
        print(f"{said}: {exc}", file=sys.stderr)
        return 2
    except errors.Unavailable as exc:
        print(f"{said}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except errors.SparkyardError as exc:
        print(f"{said}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        if os.environ.get("SPARKYARD_DEBUG"):
            raise
        print(f"{said}: internal error: {type(exc).__name__}: {exc} (SPARKYARD_DEBUG=1 shows the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
