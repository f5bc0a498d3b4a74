"""What each verb of ``sparkyard`` does once its command line is parsed (common/cli/main.py parses it).

Apart from the parser because this is where the client, grpc, protobuf, pydantic-settings and rich come in:
``sparkyard --help`` and an argument error end before this module is imported, so they take only the
interpreter's and argparse's time.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

from sparkyard import errors, resources
from sparkyard.cli import flag_table, render
from sparkyard.cli.offline import cmd_certs, cmd_local
from sparkyard.client import Client, first_run_id
from sparkyard.config_source import ConfigError
from sparkyard.protojson import to_dict
from sparkyard.timeutil import rfc3339_ms
from sparkyard.v1 import sparkyard_pb2 as pb

if TYPE_CHECKING:
    from rich.console import Console

EXIT_TIMEOUT = 124
# No master could be reached (or none could serve the call): not the same as a run that failed (1), so that a
# script can tell "try again later" from "the job is broken". sysexits.h's EX_UNAVAILABLE.
EXIT_UNREACHABLE = 69
# What a submit reads of the job it made when it does not print it whole (its line, the next run's id, the
# runner's notice): a split's input list, thousands of paths, does not come back.
_SUBMIT_READS = ("id", "next_fire_at", "last_run_id", "spec.name", "spec.group",
                 *(f"spec.{f}" for f in resources.NOTICE_FIELDS))
# The connection options of the top parser that the verbs needing no master (local, certs) do not read.
_UNUSED_OFFLINE = ("master", "config", "tls_ca", "tls_cert", "tls_key")


def _unused_offline(args: argparse.Namespace) -> str:
    """The connection flags given (before the verb) to a verb that opens no client: said, not ignored."""
    return ", ".join(f"--{name.replace('_', '-')}" for name in _UNUSED_OFFLINE if getattr(args, name, None))


def cmd_submit(client: Client, args: argparse.Namespace, out: Callable[..., None]) -> int:
    from sparkyard.options import JobOptions  # the job options' parsers, bundles and cron: submit and update only

    spec, _ = JobOptions.from_namespace(args).to_spec(args.entrypoint)
    after = spec.trigger.after if spec.trigger.WhichOneof("kind") == "after" else None
    if after is not None and args.wait:
        raise errors.InvalidArgument("wait: a child job (--after) has no run yet to wait for; wait for one of its "
                                     "runs with `sparkyard wait RUN`")
    printed_whole = args.json and not args.wait
    job = client.submit_spec(spec, args.idempotency_key, read_mask=() if printed_whole else _SUBMIT_READS).job
    _warn_unhonoured(job)
    _note_unserved(client, job.spec.group)
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


def _note_unserved(client: Client, group: str) -> None:
    """One line when no worker serves the job's group now: its runs wait (silently, were it not said) until
    one connects, which a mistyped --group or a worker not started yet would otherwise leave unexplained."""
    workers = [w for w in client.workers() if not w.draining]
    if any(w.group == group for w in workers):
        return
    others = sorted({w.group for w in workers})
    now = f"workers connected serve {', '.join(map(repr, others))}" if others else "no worker is connected"
    print(f"sparkyard: note: no worker serves group {group!r} now ({now}); the job's runs wait until one does",
          file=sys.stderr)


def _wait(client: Client, run_id: str, timeout: str | None, args: argparse.Namespace) -> tuple[pb.Run, bool]:
    """Wait for a run; on a terminal (and without --json) with a bar of its tasks done out of all."""
    if args.json:
        return client.wait(run_id, timeout)
    from rich.console import Console

    bar_console = Console(stderr=True)
    if not bar_console.is_terminal:
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
    chunks = client.logs(args.task_id, attempt=args.attempt, follow=args.follow, retries=not args.attempt)
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
    @functools.cache
    def console() -> Console:  # made when first printed to: a command with --json needs none (nor rich)
        return render.console()

    def out(message: Any, human: Callable[[Console], None]) -> None:
        if args.json:
            if isinstance(message, list):
                render.print_json([to_dict(m) for m in message])
            else:
                render.print_json(to_dict(message))
        else:
            human(console())

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
            from sparkyard.options import JobOptions

            change, fields, _ = JobOptions.from_namespace(args).to_update(JobOptions.given(args), args.entrypoint)
            job = client.update_spec(args.job_id, change, fields)
            _warn_unhonoured(job)
            out(job, lambda c: c.print(f"updated job {job.id} to spec version {job.spec_version} "
                                       f"({render.field_words(fields)}); from its next firing on"))
        elif verb == "jobs":
            jobs = client.jobs(limit=args.limit, state=args.state, group=args.group, name=args.name,
                               pipelines=args.pipelines)
            out(jobs, lambda c: render.jobs_table(c, jobs))
        elif verb in ("job", "pause", "resume"):
            job = {"job": client.job, "pause": client.pause, "resume": client.resume}[verb](args.job_id)
            out(job, lambda c: render.jobs_table(c, [job]))
            if verb == "job" and job.spec.steps and not args.json:
                render.pipeline_graph(console(), job)
                render.runs_table(console(), client.runs(job.id, limit=5))
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
                    console().print(describe(change, args.dry_run), highlight=False, markup=False)
        elif verb == "run":
            run = client.run(args.run_id)
            out(run, lambda c: render.run_detail(c, run))
        elif verb == "wait":
            run, timed_out = _wait(client, args.run_id, args.timeout, args)
            out(run, lambda c: render.run_detail(c, run))
            if timed_out and not args.json:
                print(f"sparkyard wait: run {args.run_id} still {pb.RunState.Name(run.state).removeprefix('RUN_')} after {args.timeout}",
                      file=sys.stderr)
            return _wait_code(run, timed_out)
        elif verb == "cancel":
            cancelled = client.cancel(args.id, args.reason)
            if args.json:
                render.print_json({"cancelled": cancelled})
            else:
                console().print(f"cancelled {len(cancelled)}: {' '.join(cancelled)}")
        elif verb == "delete":
            cancelled = client.delete(args.job_id, force=args.force)
            if args.json:
                render.print_json({"deleted": args.job_id, "cancelled": cancelled})
            else:
                console().print(f"deleted {args.job_id}" + (f"; cancelled {' '.join(cancelled)}" if cancelled else ""))
        elif verb == "workers":
            workers = client.workers(include_dead=args.all)
            out(workers, lambda c: render.workers_table(c, workers))
        elif verb == "drain":
            client.drain(args.worker_id)
            if args.json:
                render.print_json({"draining": args.worker_id})
            else:
                console().print(f"worker {args.worker_id} is draining")
        elif verb == "status":
            status = client.status()
            out(status, lambda c: render.status_view(c, status))
        elif verb == "logs":
            return cmd_logs(client, args)
    return 0


# A job option's flag by the name the job options' errors give it (the Python client's keyword, e.g.
# input_globs): a command line's error names the flag its user typed (--inputs).
_JOB_FLAGS = {row["dest"]: flag for flag, _, row in flag_table.JOB_OPTIONS}


def _as_typed(verb: str, message: str) -> str:
    """``message`` with a leading job option's name said as its flag, for the verbs that take job options. The
    master names a field of the job's spec (``trigger.cron.expr``): its innermost part that is an option's
    name is the flag (``--cron``)."""
    name, sep, rest = message.partition(": ")
    if verb not in ("submit", "update") or not sep:
        return message
    flag = next((_JOB_FLAGS[part] for part in reversed(name.split(".")) if part in _JOB_FLAGS), None)
    return f"{flag}: {rest}" if flag else message


def run(args: argparse.Namespace) -> int:
    """Do what the parsed command line says; every error is one line on stderr and an exit code."""
    said = f"sparkyard {args.verb}"  # every error names the verb it came from
    try:
        return dispatch(args)
    except (errors.InvalidArgument, ConfigError) as exc:
        print(f"{said}: {_as_typed(args.verb, str(exc))}", file=sys.stderr)
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
