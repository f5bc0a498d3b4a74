"""``sparkyard submit``'s command line read as spark-submit's: replace the word ``spark-submit`` with
``sparkyard submit`` and the line works.

* Everything after a script (``app.py``, no ``:function``) is the application's, unchanged, as under
  spark-submit: ``sparkyard submit --conf k=v etl.py --date 2026-11-01 data/in.csv`` runs ``etl.py`` with
  ``sys.argv[1:] == ["--date", "2026-11-01", "data/in.csv"]``. Sparkyard's own options go before it.
  After a ``module:function`` entrypoint (no such thing under spark-submit) options are read as
  Sparkyard's, as before, and arguments are given with ``--arg``.
* spark-submit's options that Sparkyard has no field for become the Spark conf spark-submit would set:
  ``--jars`` (``spark.jars``), ``--packages`` (``spark.jars.packages``), ``--archives`` (``spark.archives``),
  ``--total-executor-cores`` (``spark.cores.max``). The submit runner hands them to spark-submit; a warm
  driver cannot take them and says so in the attempt's log (docs/runners.md).
* ``--master`` is the address of Sparkyard's master: a Spark master URL given there (``yarn``,
  ``local[*]``, ``spark://…``, ``k8s://…``) is refused with the reason; ``--deploy-mode`` is accepted and
  has no effect (a job's driver always runs on a worker), with a warning.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Callable

# spark-submit option → the Spark conf key it sets (spark-submit's own SparkSubmitArguments mapping).
CONF_ALIASES = {"--jars": "spark.jars", "--packages": "spark.jars.packages", "--archives": "spark.archives",
                "--total-executor-cores": "spark.cores.max"}
# Options whose values are local paths, which spark-submit resolves from the directory it runs in.
_LOCAL_PATHS = ("--jars", "--archives")
# spark-submit's own options: after a script they are the script's arguments under spark-submit too.
_SPARK_SUBMIT_OPTIONS = frozenset(
    "--master --deploy-mode --class --name --jars --packages --exclude-packages --repositories --py-files --files "
    "--archives --conf --properties-file --driver-memory --driver-java-options --driver-library-path "
    "--driver-class-path --executor-memory --proxy-user --help --verbose --version --driver-cores --supervise "
    "--kill --status --total-executor-cores --executor-cores --num-executors --principal --keytab --queue".split())
_SPARK_MASTER = re.compile(r"^(yarn|local(\[[^\]]*\])?|spark://.*|k8s://.*|mesos://.*)$")


# argparse lists the program and the (optional) arguments after it by their internal names when no program
# is given: "required: entrypoint, app_args". What the user is missing, said instead:
NO_PROGRAM = ("the following arguments are required: entrypoint, app_args",
              "give the program to run: path/to/app.py [its arguments] or module:function")


def add_arguments(parser: argparse.ArgumentParser, options: Callable[[argparse.ArgumentParser], None]) -> None:
    """The entrypoint, the application's arguments after it, and spark-submit's extra options; ``options``
    adds Sparkyard's own options (also used to read them after a ``module:function`` entrypoint)."""
    parser.add_argument("entrypoint", help="path/to/app.py (everything after it is the application's "
                                           "arguments, as under spark-submit) or module:function")
    parser.add_argument("app_args", nargs=argparse.REMAINDER, action=_AppArgs, help=argparse.SUPPRESS)
    # Of the verb's own class, so a bad option after a module:function says one line, as before it.
    trailing = type(parser)(prog=parser.prog, allow_abbrev=False, add_help=False)
    for target in (parser, trailing):
        options(target)
        for flag, key in CONF_ALIASES.items():
            target.add_argument(flag, dest=f"alias_{key}", action="append", metavar="N" if key == "spark.cores.max" else "LIST",
                                help=f"spark-submit's option: sets {key} (see docs/runners.md)")
        target.add_argument("--deploy-mode", dest="deploy_mode",
                            help="spark-submit's option, without effect: a job's driver always runs on a worker")
    parser.set_defaults(_trailing=trailing)


class _AppArgs(argparse.Action):
    """Everything after the entrypoint (the last thing parsed: every option before it has been read)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        _finish(parser, namespace, list(values) if isinstance(values, list) else [])


def _sparkyard_only(parser: argparse.ArgumentParser) -> frozenset[str]:
    """The options of ``sparkyard submit`` that spark-submit has not."""
    return frozenset(o for action in parser._actions for o in action.option_strings
                     if o.startswith("--") and o not in _SPARK_SUBMIT_OPTIONS)


def _finish(parser: argparse.ArgumentParser, args: argparse.Namespace, app_args: list[str]) -> None:
    """Read what followed the entrypoint, turn spark-submit's options into conf, and refuse a Spark master."""
    if ":" in os.path.basename(args.entrypoint):  # module:function or file.py:function
        args._trailing.parse_args(app_args, namespace=args)
    else:
        args.args = [*(args.args or []), *app_args]
        ours = [a for a in app_args if a.split("=", 1)[0] in _sparkyard_only(parser)]
        if ours:  # a newcomer's `sparkyard submit app.py --wait` submits without waiting
            print(f"sparkyard: note: {' '.join(ours)} after {os.path.basename(args.entrypoint)} "
                  f"{'is' if len(ours) == 1 else 'are'} the program's argument{'s' if len(ours) > 1 else ''}, as "
                  "under spark-submit; Sparkyard's own options go before the script", file=sys.stderr)
    master = getattr(args, "master", None) or ""
    if _SPARK_MASTER.match(master):
        parser.error(f"--master {master} is a Spark master, but here --master is the Sparkyard master's address: "
                     "the workers' engine (their --spark-master) decides where a job runs; drop it, or choose "
                     "workers with --group")
    if args.deploy_mode:
        print(f"sparkyard: warning: --deploy-mode {args.deploy_mode} has no effect: a job's driver always runs on "
              "a Sparkyard worker", file=sys.stderr)
    for flag, key in CONF_ALIASES.items():
        values = getattr(args, f"alias_{key}", None)
        if not values:
            continue
        items = [v for value in values for v in value.split(",") if v]
        if flag in _LOCAL_PATHS:
            items = [v if "://" in v or v.startswith("/") else os.path.abspath(v) for v in items]
        args.conf = [*(args.conf or []), f"{key}={','.join(items)}"]
