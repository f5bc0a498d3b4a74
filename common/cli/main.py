"""``sparkyard``: the command line of Sparkyard.

Every verb takes ``--json``; the master is ``--master HOST:PORT`` or ``SPARKYARD_MASTER`` (default
127.0.0.1:7070), the token ``--token``, ``--token-file`` or ``SPARKYARD_TOKEN``, and TLS ``--tls-ca``
(``--tls-cert``/``--tls-key`` for mutual TLS) or ``SPARKYARD_TLS_*``. Errors print one line on stderr and
exit non-zero (2 for bad input, 69 when no master could be reached, 1 otherwise); ``wait`` exits 0 when the
run SUCCEEDED, 1 when it ended otherwise, 124 when the wait timed out.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

# Only plain data and argparse here: the client, grpc, protobuf, pydantic and rich are imported once the line
# is parsed (sparkyard.cli.commands), so --help and an argument error do not wait for them.
from sparkyard.cli import flag_table, submit_line
from sparkyard.flags import add_rows

JOB_REF = "a job id, or a job's name when one job has it"


# The connection options every verb takes: (flag, help).
_CONNECTION = (
    *flag_table.CONNECTION,
    ("--config", "TOML file whose [client] table sets these (or SPARKYARD_CONFIG)"),
)


def _common(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    """The options every verb that talks to a master takes; accepted before or after the verb."""
    for flag, text in _CONNECTION:
        p.add_argument(flag, default=default if default is argparse.SUPPRESS else None, help=text)
    _json(p, default)


def _json(p: argparse.ArgumentParser, default: Any = argparse.SUPPRESS) -> None:
    p.add_argument("--json", action="store_true", default=default if default is argparse.SUPPRESS else False,
                   help="print JSON")


class _Parser(argparse.ArgumentParser):
    """No abbreviations: the top parser would read a verb's ``--to`` as an ambiguous ``--token``/``--token-file``,
    and a flag added later must not change what an abbreviation in someone's script means."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(**kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        return super().parse_known_args(submit_line.dash_values(self, list(sys.argv[1:] if args is None else args)),
                                        namespace)

    def error(self, message: str) -> NoReturn:
        """One line naming the verb (``sparkyard submit: …``), exit 2: not the usage of every option."""
        if message == submit_line.NO_PROGRAM[0]:
            message = submit_line.NO_PROGRAM[1]
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _at_least_one(text: str) -> int:
    """A count of workers: a local cluster with none could run nothing, yet would say it is ready."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not at least 1")
    return value


def _submit_options(s: argparse.ArgumentParser) -> None:
    _common(s)
    add_rows(s, flag_table.JOB_OPTIONS)
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
    add_rows(u, flag_table.JOB_OPTIONS)

    j = sub.add_parser("jobs", help="list jobs (newest first)")
    _common(j)
    j.add_argument("--state", choices=["active", "paused", "completed", "failed", "cancelled"], default="",
                   help="failed: completed jobs (they fire no more) whose last run failed")
    j.add_argument("--group", default="")
    j.add_argument("--name", default="", help="only the jobs with this name")
    j.add_argument("--pipelines", action="store_true", help="only pipelines")
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
    lg.add_argument("-f", "--follow", action="store_true", help="keep printing until the task ends (its retries "
                    "included); with --attempt, until that attempt ends")

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
    lc.add_argument("--workers", type=_at_least_one, default=2, metavar="N",
                    help="how many workers to start (default 2)")
    lc.add_argument("--slots", type=int, default=2, metavar="N", help="task slots of each worker (default 2)")
    lc.add_argument("--listen", default=flag_table.DEFAULT_LISTEN, metavar="HOST:PORT",
                    help=f"the master's gRPC address (default {flag_table.DEFAULT_LISTEN})")
    lc.add_argument("--http", default="", metavar="HOST:PORT",
                    help="serve the web console and /metrics here (default: none), e.g. 127.0.0.1:8080")
    lc.add_argument("--data-dir", default=".sparkyard/local", metavar="DIR",
                    help="Redis data, worker dirs and logs/ (default .sparkyard/local)")
    lc.add_argument("--runner", choices=flag_table.RUNNER_NAMES, default=flag_table.DEFAULT_RUNNER,
                    help=f"how workers run tasks (default {flag_table.DEFAULT_RUNNER})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args, unknown = build_parser().parse_known_args(argv)
    if unknown:  # said by the verb they were given to, not by the top parser's usage
        print(f"sparkyard {args.verb}: unrecognized arguments: {' '.join(unknown)} (see sparkyard {args.verb} --help)",
              file=sys.stderr)
        return 2
    # gRPC's core logs some INFO lines to stderr unasked (a GOAWAY from a master that stops, as `local` stops
    # its own): the command's stderr is for its own one-line errors. GRPC_VERBOSITY set by the user wins.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    try:
        from sparkyard.cli.commands import run
    except KeyboardInterrupt:  # Ctrl-C while the client's modules load
        return 130
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
