"""``sparkyard submit``'s command line read as spark-submit's: replace the word ``spark-submit`` with
``sparkyard submit`` and the line works.

* Everything after a script (``app.py``, no ``:function``) is the application's, unchanged, as under
  spark-submit: ``sparkyard submit --conf k=v etl.py --date 2026-11-01 data/in.csv`` runs ``etl.py`` with
  ``sys.argv[1:] == ["--date", "2026-11-01", "data/in.csv"]``. Sparkyard's own options go before it.
  After a ``module:function`` entrypoint (no such thing under spark-submit) options are read as
  Sparkyard's, as before, and arguments are given with ``--arg``.
* spark-submit's options that Sparkyard has no field for become the Spark conf spark-submit would set
  (:data:`CONF_LISTS`, :data:`CONF_VALUES`: ``--jars`` is ``spark.jars``, ``--driver-java-options``
  ``spark.driver.extraJavaOptions``…), and ``--properties-file`` adds the file's ``spark.*`` keys under the
  job's ``--conf``, as spark-submit reads it. The submit runner hands them to spark-submit; a warm driver
  cannot take core conf and runs the attempt on a fresh driver, said in the attempt's log (docs/runners.md).
* ``--master`` is the address of Sparkyard's master: a Spark master URL given there (``yarn``,
  ``local[*]``, ``spark://…``, ``k8s://…``) is refused with the reason; ``--deploy-mode`` and
  ``--supervise`` are accepted and have no effect, with a warning; ``--verbose`` prints the Spark conf the
  job will carry; the options that have no meaning for a scheduled Python job (``--class``,
  ``--proxy-user``, ``--kill``, ``--status``, ``--version``) are refused, each with its reason.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Callable

# spark-submit option → the Spark conf key it sets (spark-submit's own SparkSubmitArguments mapping): comma
# lists (given twice, the lists are joined) and single values (given twice, the last one counts).
CONF_LISTS = {"--jars": "spark.jars", "--packages": "spark.jars.packages", "--archives": "spark.archives",
              "--exclude-packages": "spark.jars.excludes", "--repositories": "spark.jars.repositories"}
CONF_VALUES = {"--total-executor-cores": "spark.cores.max", "--driver-cores": "spark.driver.cores",
               "--driver-java-options": "spark.driver.extraJavaOptions",
               "--driver-class-path": "spark.driver.extraClassPath",
               "--driver-library-path": "spark.driver.extraLibraryPath", "--queue": "spark.yarn.queue",
               "--principal": "spark.kerberos.principal", "--keytab": "spark.kerberos.keytab"}
# Options whose values are local paths, which spark-submit resolves from the directory it runs in (a
# class or library path holds several, separated as the JVM separates them).
_LOCAL_PATHS = {"--jars": "", "--archives": "", "--driver-class-path": os.pathsep,
                "--driver-library-path": os.pathsep, "--keytab": ""}
# Options whose value starts with a dash (JVM options).
_DASH_VALUES = frozenset({"--driver-java-options"})
# spark-submit's options that mean nothing for a scheduled Python job: refused, each with why.
_REFUSED = {
    "--class": "runs a JVM application's main class; Sparkyard runs Python programs (path/to/app.py or "
               "module:function)",
    "--proxy-user": "would run the job as another user; a job runs as its worker's user",
    "--kill": "kills a driver of a standalone cluster; cancel a Sparkyard run with: sparkyard cancel RUN",
    "--status": "asks a standalone cluster for a driver's state; ask Sparkyard with: sparkyard run RUN",
    "--version": "prints the local Spark's version; a job runs on its workers' own Spark",
}
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
        for flag, key in {**CONF_LISTS, **CONF_VALUES}.items():
            target.add_argument(flag, dest=f"alias_{key}", action="append", metavar="V",
                                help=f"spark-submit's option: sets {key} (see docs/runners.md)")
        target.add_argument("--properties-file", dest="properties_file", metavar="FILE",
                            help="spark-submit's option: the file's spark.* keys, under the job's --conf")
        target.add_argument("--deploy-mode", dest="deploy_mode",
                            help="spark-submit's option, without effect: a job's driver always runs on a worker")
        target.add_argument("--supervise", action="store_true",
                            help="spark-submit's option, without effect: give --retries to re-run a failed task")
        target.add_argument("--verbose", action="store_true", help="print the Spark conf the job will carry")
        for flag, why in _REFUSED.items():
            target.add_argument(flag, nargs="?", action=_Refused, help=argparse.SUPPRESS)
    parser.set_defaults(_trailing=trailing)


def dash_values(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``args`` with ``--driver-java-options -Dk=v`` given as ``--driver-java-options=-Dk=v``, up to the first
    positional (the verb, or the program: what follows it is the program's, unchanged). argparse would read a
    value that starts with a dash as an option of its own; spark-submit lines give JVM options so."""
    out, i = list(args), 0
    while i < len(out) and out[i].startswith("-") and out[i] != "--":
        flag = out[i].split("=", 1)[0]
        action = parser._option_string_actions.get(flag)
        if "=" in out[i] or action is None or action.nargs == 0:
            i += 1
        elif flag in _DASH_VALUES and i + 1 < len(out):
            out[i:i + 2] = [f"{flag}={out[i + 1]}"]
            i += 1
        else:
            i += 2
    return out


class _Refused(argparse.Action):
    """A spark-submit option that means nothing for a scheduled Python job: one line saying why."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        parser.error(f"{option_string} is spark-submit's option that {_REFUSED[str(option_string)]}")


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
    if args.supervise:
        print("sparkyard: warning: --supervise has no effect: a failed task is re-run when the job has --retries",
              file=sys.stderr)
    conf = [*(properties_conf(parser, args.properties_file) if args.properties_file else []), *(args.conf or [])]
    for flag, key in {**CONF_LISTS, **CONF_VALUES}.items():
        values = getattr(args, f"alias_{key}", None)
        if values:
            conf.append(f"{key}={_conf_value(flag, values)}")
    args.conf = conf or args.conf
    if args.verbose:
        print("sparkyard: Spark conf of the job: " + (", ".join(conf) if conf else "none (the worker's own)"),
              file=sys.stderr)


def _conf_value(flag: str, values: list[str]) -> str:
    """The conf value of a spark-submit option given ``values`` (in order), local paths made absolute."""
    items = [v for value in values for v in value.split(",") if v] if flag in CONF_LISTS else [values[-1]]
    if flag in _LOCAL_PATHS:
        sep = _LOCAL_PATHS[flag]
        items = [sep.join(map(_absolute, item.split(sep))) if sep else _absolute(item) for item in items]
    return ",".join(items)


def _absolute(path: str) -> str:
    return path if not path or "://" in path or path.startswith("/") else os.path.abspath(path)


def properties_conf(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """The ``spark.*`` keys of a properties file as ``k=v`` items, read as spark-submit reads
    ``--properties-file`` (Java properties: ``k=v``, ``k:v`` or ``k v``; ``#``/``!`` comments; other keys
    ignored with a warning, as spark-submit ignores them)."""
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        parser.error(f"--properties-file {path}: {getattr(exc, 'strerror', None) or exc}")
    items, ignored = [], []
    for line in lines:
        text = line.strip()
        if not text or text[0] in "#!":
            continue
        found = _PROPERTY.match(text)
        key, value = (found.group(1), found.group(2)) if found else (text, "")
        if key.startswith("spark."):
            items.append(f"{key}={value.strip()}")
        else:
            ignored.append(key)
    if ignored:
        print(f"sparkyard: warning: --properties-file {path}: ignoring {', '.join(ignored)}: not Spark conf "
              "(spark.*), as spark-submit ignores it", file=sys.stderr)
    return items


# A Java properties line: the key ends at the first unescaped '=', ':' or blank.
_PROPERTY = re.compile(r"((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)")
