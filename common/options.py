"""A job's options, defined once: :class:`JobOptions` drives the CLI's ``submit`` flags, the checks of
what a user typed, and the conversion to a :class:`pb.JobSpec`.

Each field carries an :class:`Option` in its metadata: help text, kind (how a value is read: a duration
``"30m"``, an instant ``"2026-11-22T03:00:00Z"``, a size ``"2g"``, ``K=V`` pairs, a choice …) and, where
the flag is not simply ``--field-name``, the flag. The Python client takes the same names as keyword
arguments (``client.submit("etl.py:main", retries=2, timeout="30m")``), the CLI the same values as flags
(``sparkyard submit etl.py:main --retries 2 --timeout 30m``): a new option is one field here (flag, keyword
argument, help and check) and its line in :meth:`JobOptions.to_spec` (where it goes in the ``JobSpec``).

Values are checked and put in one form when the options are made: a malformed one raises
:class:`InvalidArgument` naming the option. The master checks the resulting spec again
(:func:`sparkyard.spec.normalize`): it never trusts a client.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from sparkyard import errors
from sparkyard.bundle import Bundle
from sparkyard.bundle import build as build_bundle
from sparkyard.flags import Row, add_rows
from sparkyard.option_values import CHOICES, MISFIRES, OVERLAPS, ROUTINGS, Resolved, absolute_paths, parse_after
from sparkyard.runners import RUNNERS
from sparkyard.option_values import read as read_value
from sparkyard.timeutil import rfc3339_ms
from sparkyard.spec import DEFAULT_GROUP, parse_entrypoint, parse_input, resolve_entrypoint
from sparkyard.v1 import sparkyard_pb2 as pb

_METAVARS = {"int": "N", "count": "N", "duration": "DURATION", "instant": "TIME", "size": "SIZE", "paths": "PATH",
             "list": "ARG"}


# --after JOB[:WHEN]: the run ends that fire a child job.
# How far in the past an --at may be (the clocks of client and master differ a little; a time computed as
# "now" is past by the time it is read): beyond it, the time is a mistake, not a wish to run at once.
AT_PAST_GRACE_S = 60.0
# What build_specs keeps between the jobs of one call: (entrypoint, base, py_files, files, bundle, ship) →
# (the resolved entrypoint, its bundle).
CodeMemo = dict[tuple[Any, ...], tuple[str, "Bundle | None"]]

@dataclass(frozen=True)
class Option:
    """How one option is read and shown.

    ``kind``: str | int | count (an int ≥ 0) | flag (a bool) | duration | instant | size | spark_size
    (spark-submit's memory syntax, kept as a string) | choice
    | pairs (``K=V`` items or a mapping) | list (repeatable) | paths (repeatable or comma-separated)
    | path (one, a str or Path).
    """

    help: str
    kind: str = "str"
    flag: str = ""  # default: --field-name
    metavar: str | None = None
    when: bool = False  # one of the mutually exclusive triggers (--delay, --at, --cron, --every)
    cli: bool = True  # False: a Python-only option (the CLI has its own way to say it)
    # The JobSpec fields an update with this option changes (sparkyard.updates.UPDATABLE names); None: the
    # field of the same name.
    spec: tuple[str, ...] | None = None


def _option(default: Any, help: str, kind: str = "str", **more: Any) -> Any:
    meta = {"option": Option(help, kind, **more)}
    if isinstance(default, (list, dict)):
        return field(default_factory=type(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class JobOptions:
    """Everything a user can say about a job besides its entrypoint (see each field's help)."""

    args: list[str] = _option([], "argument for the job (repeatable)", "list", flag="--arg")
    name: str = _option("", "the job's name (default: the entrypoint's file or function name)")
    group: str = _option("", f"node group of the workers that may run it (default {DEFAULT_GROUP!r})")
    priority: int = _option(0, "-1000..1000, higher first (default 0)", "int")
    runner: str = _option("", "submit, session or connect (default: the worker's runner)", "choice")
    conf: dict[str, str] = _option({}, "Spark conf (repeatable)", "pairs", metavar="K=V")
    env: dict[str, str] = _option({}, "environment variable (repeatable)", "pairs", metavar="K=V")
    py_files: list[str] = _option([], ".py/.zip/.egg files put on the task's sys.path, shipped with the job "
                                      "(repeatable or comma-separated)", "paths", spec=("code",))
    files: list[str] = _option([], "data files shipped with the job, at their path relative to here, and "
                                   "handed to Spark (SparkFiles.get(name) on executors; repeatable or "
                                   "comma-separated)", "paths", spec=("code",))
    bundle: str = _option("", "ship this project directory (minus .sparkyardignore); it becomes the task's "
                              "working directory and is on sys.path", metavar="DIR", spec=("code",))
    cwd: str = _option("", "the task's working directory on the worker, absolute (default: see docs/runners.md)")
    task_memory: int = _option(0, "memory limit of each attempt, e.g. 2g (default: the worker's)", "size",
                               spec=("task_memory_mb",))
    driver_memory: str = _option("", "memory of the attempt's Spark driver, e.g. 2g (spark-submit's option; the "
                                     "session runner starts a driver with it; not the connect runner's)",
                                 "spark_size", metavar="MEM")
    executor_memory: str = _option("", "memory of each Spark executor, e.g. 4g (spark-submit's option; the "
                                       "session runner starts a driver with it; not the connect runner's)",
                                   "spark_size", metavar="MEM")
    executor_cores: int = _option(0, "cores of each Spark executor (spark-submit's option; the session runner "
                                     "starts a driver with it; not the connect runner's)", "count")
    num_executors: int = _option(0, "Spark executors to start, on YARN and Kubernetes (spark-submit's option; "
                                    "the session runner starts a driver with it; not the connect runner's)", "count")
    ship: bool = _option(True, "do not upload the entrypoint: it must be readable at its absolute path on the "
                               "workers", "flag", flag="--no-ship", spec=("code",))
    retries: int = _option(0, "retries after a failed attempt (default 0)", "count", spec=("retry.max_attempts",))
    backoff: float | None = _option(None, "delay before the first retry, doubling after (default 5s)", "duration",
                                    spec=("retry.initial_backoff",))
    max_backoff: float | None = _option(None, "largest retry delay (default 10m)", "duration",
                                        spec=("retry.max_backoff",))
    timeout: float | None = _option(None, "per-attempt timeout, e.g. 30m (default none)", "duration")
    delay: float | None = _option(None, "fire once after this delay, e.g. 10s", "duration", when=True,
                                  spec=("trigger.kind",))
    at: float | None = _option(None, "fire once at this ISO 8601 time, e.g. 2026-11-22T03:00:00Z", "instant",
                               when=True, spec=("trigger.kind",))
    cron: str = _option("", "cron expression: 5 fields, or 6 with seconds first", when=True, spec=("trigger.kind",))
    every: float | None = _option(None, "fire at a fixed rate, e.g. 10s", "duration", when=True, spec=("trigger.kind",))
    after: str = _option("", "a child job: fire when a run of job JOB (an id or a name) ends so (default succeeded)", when=True,
                         metavar="JOB[:succeeded|failed|always]", spec=("trigger.kind",))
    tz: str = _option("", "time zone of --cron (IANA name; default UTC)", spec=("trigger.kind",))
    fixed_delay: bool = _option(False, "with --every: count from the end of the previous run", "flag",
                                spec=("trigger.kind",))
    start_at: float | None = _option(None, "recurring jobs: no firing before this time", "instant",
                                     spec=("trigger.start_at",))
    end_at: float | None = _option(None, "recurring jobs: no firing after this time", "instant",
                                   spec=("trigger.end_at",))
    max_runs: int = _option(0, "recurring jobs: stop after this many runs", "count", spec=("trigger.max_runs",))
    misfire: str = _option("", "what to do with firings missed while the master was down or the job paused: "
                               "skip, fire-once (default) or catch-up", "choice")
    catch_up_limit: int = _option(0, "with --misfire catch-up: most missed runs replayed", "count",
                                  spec=("misfire_catch_up_limit",))
    overlap: str = _option("", "a firing while the previous run is active: allow (default), forbid (skip), "
                               "replace (cancel it)", "choice")
    max_active_runs: int = _option(0, "with --overlap forbid: runs active at once before a firing is skipped "
                                      "(default 1)", "count")
    inputs: list[str | tuple[str, str]] = _option(
        [], "an input to split over tasks (repeatable); MARK is its resource mark", "list", flag="--input",
        metavar="[MARK=]VALUE", spec=("split.inputs",))
    input_globs: list[str] = _option([], "inputs: the files matching a glob (repeatable)", "list",
                                     flag="--inputs", metavar="GLOB", spec=("split.inputs",))
    parallelism: int = _option(0, "number of tasks (default: one per input)", "count", spec=("split.parallelism",))
    max_bytes_per_sec: int = _option(0, "a run's total read rate limit, split over its tasks", "count",
                                     spec=("split.max_bytes_per_sec",))
    max_records_per_sec: int = _option(0, "a run's total record rate limit, split over its tasks", "count",
                                       spec=("split.max_records_per_sec",))
    task_bytes_per_sec: int = _option(0, "one task's read rate limit", "count", spec=("split.task_bytes_per_sec",))
    task_records_per_sec: int = _option(0, "one task's record rate limit", "count",
                                        spec=("split.task_records_per_sec",))
    max_concurrent: int = _option(0, "at most this many tasks of a run at once", "count",
                                  spec=("split.max_concurrent",))
    routing: str = _option("", "worker choice: least-loaded, round-robin, random, consistent-hash or "
                               "previous-worker (default: the previous worker if idle, else least-loaded)", "choice")
    routing_key: str = _option("", "key for --routing consistent-hash")
    labels: dict[str, str] = _option({}, "a label of the job (repeatable)", "pairs", flag="--label", metavar="K=V")
    on_failure: str = _option("", "POST a JSON body to this http(s) URL when a run fails (default: the master's "
                                  "--on-failure)", metavar="URL")
    on_success: str = _option("", "POST a JSON body to this http(s) URL when a run succeeds (default: the "
                                  "master's --on-success)", metavar="URL")
    base_dir: str = _option("", "where relative paths start (default: the current directory)", "path", cli=False,
                            spec=())

    def __post_init__(self) -> None:
        fields, triggers, _ = _reading()
        for name, kind, default in fields:
            value = getattr(self, name)
            # A default is in its one form already (tests/unit/test_options.py checks), and so is an empty
            # list or dict (what a list or dict option starts as).
            if value is default or (not value and type(value) in (list, dict)):
                continue
            read = read_value(kind, name, value)
            if read is not value:
                object.__setattr__(self, name, read)
        when = [name for name in triggers if getattr(self, name) not in (None, "")]
        if len(when) > 1:
            raise errors.InvalidArgument(f"trigger: choose one of --delay, --at, --cron, --every, --after "
                                         f"(got {', '.join(when)})")
        if self.after:
            parse_after(self.after)
        if self.tz and not self.cron:
            raise errors.InvalidArgument("tz: --tz applies to --cron")
        if self.fixed_delay and self.every is None:
            raise errors.InvalidArgument("fixed_delay: --fixed-delay applies to --every")
        if self.cwd and not self.cwd.startswith("/"):
            raise errors.InvalidArgument(f"cwd: {self.cwd!r} must be an absolute path (on the workers)")
        if not self.ship and (self.files or self.bundle):
            raise errors.InvalidArgument("files: --files and --bundle ship files, which --no-ship turns off")

    @classmethod
    def of(cls, options: Mapping[str, Any]) -> JobOptions:
        """Options from keyword arguments; an unknown name is refused, naming it."""
        unknown = sorted(set(options).difference(_reading()[2]))
        if unknown:
            raise errors.InvalidArgument(f"unknown job option(s): {', '.join(unknown)}")
        return cls(**{k: v for k, v in options.items() if v is not None})

    # ---- the command line --------------------------------------------------------------------------------

    @classmethod
    def flag_rows(cls) -> list[Row]:
        """One flag per option, as data (the CLI's parser is generated from these: common/cli/flag_table.py);
        every default is None (not given), so the options' own defaults apply."""
        rows: list[Row] = []
        for f in dataclasses.fields(cls):
            opt: Option = f.metadata["option"]
            if not opt.cli:
                continue
            flag = opt.flag or "--" + f.name.replace("_", "-")
            options: dict[str, Any] = {"dest": f.name, "help": opt.help, "default": None}
            if opt.kind == "flag":
                options["action"] = "store_false" if f.default else "store_true"
            else:
                metavar = opt.metavar or _METAVARS.get(opt.kind) or f.name.upper()
                if opt.kind == "choice":
                    metavar = "|".join(CHOICES[f.name])
                options["action"] = "append" if opt.kind in ("list", "paths", "pairs") else "once"
                options["metavar"] = metavar
            rows.append((flag, opt.when, options))
        return rows

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        add_rows(parser, cls.flag_rows())

    @classmethod
    def given(cls, namespace: argparse.Namespace) -> dict[str, Any]:
        """The options a command line parsed with :meth:`add_arguments` gave (as typed)."""
        return {f.name: getattr(namespace, f.name) for f in dataclasses.fields(cls)
                if f.metadata["option"].cli and getattr(namespace, f.name, None) is not None}

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace) -> JobOptions:
        """The options given on a command line parsed with :meth:`add_arguments`. On the command line an
        ``--input`` may name its resource mark (``MARK=VALUE``: :func:`sparkyard.spec.parse_input`)."""
        given = cls.given(namespace)
        if "inputs" in given:
            try:
                given["inputs"] = [(i.value, i.mark) for i in map(parse_input, given["inputs"])]
            except ValueError as exc:
                raise errors.InvalidArgument(str(exc)) from None
        return cls.of(given)

    # ---- the spec ----------------------------------------------------------------------------------------

    def to_update(self, given: Iterable[str], entrypoint: str = "") -> tuple[pb.JobSpec, list[str], Bundle | None]:
        """What an update with the options named in ``given`` sends (sparkyard update, UpdateJob): a spec
        holding them, the JobSpec fields they change (:data:`sparkyard.updates.UPDATABLE` names) and the
        bundle to upload. Shipped code changes only with its entrypoint given again: its files are
        bundled anew, as a submit does."""
        names = set(given)
        opts = {f.name: f.metadata["option"] for f in dataclasses.fields(self)}
        fields = {path for name in names for path in (opts[name].spec if opts[name].spec is not None else (name,))}
        if "code" in fields and not entrypoint:
            raise errors.InvalidArgument("entrypoint: give the job's entrypoint again to ship its code anew "
                                         "(--py-files, --files, --bundle and --no-ship change shipped code)")
        if entrypoint:
            fields.add("code")
        if not fields:
            raise errors.InvalidArgument("fields: give at least one option to change")
        spec, packed = self.to_spec(entrypoint)
        return spec, sorted(fields), packed

    def to_spec(self, entrypoint: str, code: CodeMemo | None = None) -> tuple[pb.JobSpec, Bundle | None]:
        """The JobSpec, and the bundle of files to upload with it (None: nothing is shipped). A file
        entrypoint, ``py_files``, ``files`` and ``bundle`` are shipped unless ``ship`` is False (see
        :mod:`sparkyard.bundle` for the layout). Without an entrypoint (an update that does not change
        the code) nothing is resolved or shipped. ``code``: what earlier calls of the same batch
        resolved and packed (:func:`build_specs`), taken as it is for the same entrypoint and files."""
        base = Path(self.base_dir or Path.cwd()).absolute()
        key: tuple[Any, ...] = ()
        if code is not None:
            key = (entrypoint, base, tuple(self.py_files), tuple(self.files), self.bundle, self.ship)
        if code is not None and key in code:
            entry, packed = code[key]
        else:
            try:
                entry = resolve_entrypoint(entrypoint, base) if entrypoint else ""
            except ValueError as exc:
                raise errors.InvalidArgument(str(exc)) from None
            packed = self._pack(entry, base) if entry else None
            if code is not None:
                code[key] = (entry, packed)
        spec = pb.JobSpec(
            name=self.name, entrypoint=entry, args=self.args, conf=self.conf, env=self.env, py_files=self.py_files,
            group=self.group, priority=self.priority, runner=RUNNERS.get(self.runner, pb.RUNNER_UNSPECIFIED),
            misfire=MISFIRES.get(self.misfire, pb.MISFIRE_UNSPECIFIED), misfire_catch_up_limit=self.catch_up_limit,
            overlap=OVERLAPS.get(self.overlap, pb.OVERLAP_UNSPECIFIED),
            routing=ROUTINGS.get(self.routing, pb.ROUTING_UNSPECIFIED), routing_key=self.routing_key,
            labels=self.labels, submit_dir=str(base), cwd=self.cwd, on_failure=self.on_failure,
            on_success=self.on_success,
            task_memory_mb=max(1, self.task_memory >> 20) if self.task_memory else 0,
            driver_memory=self.driver_memory, executor_memory=self.executor_memory,
            executor_cores=self.executor_cores, num_executors=self.num_executors,
            max_active_runs=self.max_active_runs,
        )
        if packed is not None:
            spec.entrypoint = packed.entrypoint or entry
            del spec.py_files[:]
            spec.py_files.extend(packed.py_files)
            spec.files.extend(packed.files)
            spec.bundle.digest, spec.bundle.size = packed.digest, len(packed.data)
        spec.retry.max_attempts = self.retries + 1
        for target, seconds in ((spec.retry.initial_backoff, self.backoff), (spec.retry.max_backoff, self.max_backoff),
                                (spec.timeout, self.timeout)):
            if seconds is not None:
                target.FromMilliseconds(int(seconds * 1000))
        self._trigger(spec.trigger)
        self._split(spec.split, base)
        return spec, packed

    def _pack(self, entry: str, base: Path) -> Bundle | None:
        """The bundle a resolved entrypoint ships (None: nothing is shipped)."""
        parsed = parse_entrypoint(entry)
        py_files, files = absolute_paths(self.py_files, base), absolute_paths(self.files, base)
        if not self.ship or not (parsed.is_file or self.bundle or py_files or files):
            return None
        return build_bundle(Path(parsed.path) if parsed.is_file else None, parsed.func, submit_dir=base,
                            bundle_dir=absolute_paths([self.bundle], base)[0] if self.bundle else None,
                            py_files=py_files, files=files)

    def _trigger(self, trig: pb.Trigger) -> None:
        if self.delay is not None:
            trig.delay.FromMilliseconds(int(self.delay * 1000))
        elif self.at is not None:
            if self.at < time.time() - AT_PAST_GRACE_S:
                raise errors.InvalidArgument(f"at: {rfc3339_ms(int(self.at * 1000))} is in the past; give a later time, "
                                             "or no --at to run it now")
            trig.at.FromMilliseconds(int(self.at * 1000))
        elif self.cron:
            trig.cron.expr, trig.cron.tz = self.cron, self.tz
        elif self.every is not None:
            trig.every.interval.FromMilliseconds(int(self.every * 1000))
            trig.every.fixed_delay = self.fixed_delay
        elif self.after:
            trig.after.job_id, trig.after.when = parse_after(self.after)
        else:
            trig.now = True
        for target, moment in ((trig.start_at, self.start_at), (trig.end_at, self.end_at)):
            if moment is not None:
                target.FromMilliseconds(int(moment * 1000))
        trig.max_runs = self.max_runs

    def _split(self, split: pb.SplitSpec, base: Path) -> None:
        for item in self.inputs:
            value, mark = item if isinstance(item, tuple) else (item, "")
            split.inputs.add(value=value, mark=mark)
        for pattern in self.input_globs:
            matches = sorted(glob.glob(pattern, root_dir=base, recursive=True))
            if not matches:
                raise errors.InvalidArgument(f"input_globs: no file matches {pattern!r}")
            resolved = Resolved(base)
            for match in matches:
                split.inputs.add(value=resolved.path(match))
        split.parallelism = self.parallelism
        split.max_bytes_per_sec, split.max_records_per_sec = self.max_bytes_per_sec, self.max_records_per_sec
        split.task_bytes_per_sec, split.task_records_per_sec = self.task_bytes_per_sec, self.task_records_per_sec
        split.max_concurrent = self.max_concurrent


@functools.cache
def _reading() -> tuple[tuple[tuple[str, str, Any], ...], tuple[str, ...], frozenset[str]]:
    """Each option's (name, kind, default: a sentinel for a list or dict), the trigger options and every
    option's name: what every JobOptions reads, taken from the fields once (a bulk submit of a million jobs
    makes a million)."""
    fields = dataclasses.fields(JobOptions)
    return (tuple((f.name, f.metadata["option"].kind, f.default) for f in fields),
            tuple(f.name for f in fields if f.metadata["option"].when), frozenset(f.name for f in fields))



def build_spec(entrypoint: str, **options: Any) -> pb.JobSpec:
    """A JobSpec from keyword options (the fields of :class:`JobOptions`); InvalidArgument names a bad one."""
    return JobOptions.of(options).to_spec(entrypoint)[0]


def build_specs(entrypoint: str, jobs: Iterable[Mapping[str, Any]], **common: Any) -> list[pb.JobSpec]:
    """The JobSpecs of many jobs of one entrypoint, each from its own options over ``common`` (as
    :func:`build_spec` takes them). The entrypoint is checked and its code packed once for the call, as the
    files are when the call starts: ``build_spec`` per job walks and stamps them each time, which was most of
    a bulk submitter's time (tests/bench/bench_scale.py)."""
    code: CodeMemo = {}
    return [JobOptions.of({**common, **each}).to_spec(entrypoint, code)[0] for each in jobs]
