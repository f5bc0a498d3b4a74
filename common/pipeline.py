"""Pipelines defined as code: ``from sparkyard import Pipeline``.

A module in the user's repository builds :class:`Pipeline` objects; ``sparkyard apply FILE…`` runs the
files, collects the pipelines they define (module-level names) and makes the master's match them. Nothing
here talks to a master: :meth:`Pipeline.to_spec` builds the spec (shipping each step's code as a submit
does), checking the graph first so a cycle or an unknown upstream is reported before anything is sent.

    etl = Pipeline("nightly-etl", cron="0 3 * * *")
    extract = etl.step("extract", "jobs/extract.py", args=["--date", "{ds}"])
    clean = etl.step("clean", "jobs/clean.py:main", after=[extract], retries=2)
    etl.step("report", "jobs/report.py", after=[clean], trigger_rule="all_done")

Relative entrypoints and files are relative to the directory of the file that creates the pipeline.
"""

from __future__ import annotations

import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from sparkyard import errors
from sparkyard.options import JobOptions
from sparkyard.pipeline_spec import RULES, check_graph, normalize_pipeline
from sparkyard.spec import SpecError
from sparkyard.v1 import sparkyard_pb2 as pb

# Pipeline options that are a job's (the rest, such as max_active_runs, are the pipeline's own).
_PIPELINE_OPTIONS = ("cron", "every", "at", "tz", "misfire", "catch_up_limit", "overlap", "start_at", "end_at",
                     "max_runs", "labels", "on_failure", "on_success", "priority", "group")
# What runs a Spark declarative pipeline step on the worker (worker/sdp.py).
SDP_ENTRYPOINT = "sparkyard.worker.sdp:run"
# Options that make a trigger: a step has none of its own.
_TRIGGERS = ("cron", "every", "at", "delay", "after", "tz", "fixed_delay", "start_at", "end_at", "max_runs",
             "max_active_runs", "misfire", "catch_up_limit", "overlap")


@dataclass
class Step:
    """One step of a pipeline (made by :meth:`Pipeline.step`); pass it in another step's ``after``."""

    name: str
    entrypoint: str
    after: list[str]
    trigger_rule: str
    options: dict[str, Any] = field(default_factory=dict)


class Pipeline:
    """A graph of Spark programs run once per logical time (docs/pipelines.md).

    The trigger is a job's (``cron=``, ``every=``, ``at=``; none: runs start only by ``sparkyard trigger``
    or a backfill), with ``tz=``, ``misfire=``, ``overlap=`` and ``max_active_runs=N`` (a run due while N are
    active is skipped: ``overlap="forbid"`` with a limit of N).
    """

    def __init__(self, name: str, *, max_active_runs: int = 0, base_dir: str | Path | None = None,
                 **options: Any) -> None:
        unknown = sorted(set(options) - set(_PIPELINE_OPTIONS))
        if unknown:
            raise errors.InvalidArgument(f"pipeline {name!r}: unknown option {unknown[0]!r} "
                                         f"(a pipeline takes {', '.join(_PIPELINE_OPTIONS)}, max_active_runs)")
        if max_active_runs:
            if options.get("overlap", "forbid") != "forbid":
                raise errors.InvalidArgument(f"pipeline {name!r}: max_active_runs limits runs with overlap='forbid', "
                                             f"not {options['overlap']!r}")
            options["overlap"] = "forbid"
            options["max_active_runs"] = max_active_runs
        self.name = name
        self.options = options
        self.steps: list[Step] = []
        self.base_dir = Path(base_dir) if base_dir is not None else _caller_dir()

    def step(self, name: str, entrypoint: str, *, after: Sequence[Step | str] = (),
             trigger_rule: str = "all_succeeded", **options: Any) -> Step:
        """Add a step running ``entrypoint`` (as ``sparkyard submit`` takes it) with a job's options
        (args, inputs/parallelism, runner, resources, retries, backoff, timeout, group, priority, files,
        py_files…). ``after``: the steps (or their names) it waits for; ``trigger_rule``: all_succeeded
        (default), all_done, one_failed or none_failed."""
        if trigger_rule not in RULES:
            raise errors.InvalidArgument(f"pipeline {self.name!r}, step {name!r}: trigger_rule {trigger_rule!r} is "
                                         f"not one of {', '.join(RULES)}")
        triggers = sorted(set(options) & set(_TRIGGERS))
        if triggers:
            raise errors.InvalidArgument(f"pipeline {self.name!r}, step {name!r}: {triggers[0]}= belongs to the "
                                         "pipeline (a step runs when its upstream steps let it)")
        ups = [u.name if isinstance(u, Step) else u for u in after]
        step = Step(name, entrypoint, ups, trigger_rule, options)
        self.steps.append(step)
        try:
            check_graph([(s.name, s.after) for s in self.steps])
        except SpecError as exc:
            self.steps.pop()
            raise errors.InvalidArgument(f"pipeline {self.name!r}: {exc}") from None
        return step

    def sdp_step(self, name: str, spec: str | Path, *, after: Sequence[Step | str] = (),
                 trigger_rule: str = "all_succeeded", full_refresh: bool | Sequence[str] = False,
                 refresh: Sequence[str] = (), **options: Any) -> Step:
        """Add a step that runs a Spark declarative pipeline (``pyspark.pipelines``): ``spec`` is its
        ``spark-pipeline.yml``; the directory holding it is shipped (``bundle``) and the pipeline runs on
        the worker's Spark Connect server (``runner="connect"``), each dataset's outcome in the step's result
        and log. ``full_refresh``: True for every dataset, or the datasets to reset; ``refresh``: only these."""
        spec_file = (self.base_dir / spec).resolve()
        if not spec_file.is_file():
            raise errors.InvalidArgument(f"pipeline {self.name!r}, step {name!r}: no pipeline spec {spec_file}")
        project = Path(options.pop("bundle", spec_file.parent)).resolve()
        if not spec_file.is_relative_to(project):
            raise errors.InvalidArgument(f"pipeline {self.name!r}, step {name!r}: the spec {spec_file} is not "
                                         f"inside the shipped directory {project}")
        args = [str(spec_file.relative_to(project))]
        if full_refresh is True:
            args.append("--full-refresh-all")
        elif full_refresh:
            args += ["--full-refresh", ",".join(full_refresh)]
        if refresh:
            args += ["--refresh", ",".join(refresh)]
        options.setdefault("runner", "connect")
        return self.step(name, SDP_ENTRYPOINT, after=after, trigger_rule=trigger_rule, args=args,
                         bundle=str(project), **options)

    def to_spec(self) -> pb.JobSpec:
        """The pipeline's spec, checked as the master checks it (the client uploads its steps' bundles)."""
        where = f"pipeline {self.name!r}"
        own, _ = _options(where, {**self.options, "name": self.name, "base_dir": str(self.base_dir)}).to_spec("")
        if own.trigger.WhichOneof("kind") == "now":  # no trigger given: runs start by hand or by a backfill
            own.trigger.manual = True
        for s in self.steps:
            spec, _ = _options(f"{where}, step {s.name!r}",
                               {**s.options, "base_dir": str(self.base_dir)}).to_spec(s.entrypoint)
            own.steps.add(name=s.name, spec=spec, after=s.after, trigger_rule=RULES[s.trigger_rule])
        try:
            normalize_pipeline(own)
        except SpecError as exc:
            raise errors.InvalidArgument(f"{where}: {exc}") from None
        return own


def _options(where: str, options: dict[str, Any]) -> JobOptions:
    try:
        return JobOptions.of(options)
    except errors.InvalidArgument as exc:
        raise errors.InvalidArgument(f"{where}: {exc}") from None


def _caller_dir() -> Path:
    """The directory of the file that called Pipeline() (where its relative paths start)."""
    frame = sys._getframe(2)
    file = frame.f_globals.get("__file__")
    return Path(file).resolve().parent if file else Path.cwd()


def load(paths: Sequence[str | Path]) -> list[Pipeline]:
    """Run each definition file and collect the pipelines it defines at module level (in file order).
    A name defined by two files, or twice, is an error naming both."""
    found: dict[str, tuple[Pipeline, str]] = {}
    for path in paths:
        file = Path(path)
        if not file.is_file():
            raise errors.InvalidArgument(f"{path}: no such file (sparkyard apply takes pipeline definition files)")
        try:
            namespace = runpy.run_path(str(file), run_name=f"sparkyard_apply_{file.stem}")
        except errors.SparkyardError as exc:
            raise type(exc)(f"{path}: {exc}") from None
        except Exception as exc:  # the user's file: say which and what, not our traceback
            hint = ""
            if isinstance(exc, SyntaxError) and file.suffix != ".py":  # e.g. someone who guessed YAML
                hint = " (a pipeline definition file is Python: `from sparkyard import Pipeline`, docs/pipelines.md)"
            raise errors.InvalidArgument(f"{path}: {type(exc).__name__}: {exc}{hint}") from None
        for value in namespace.values():
            if isinstance(value, Pipeline):
                if value.name in found and found[value.name][0] is not value:
                    raise errors.InvalidArgument(f"pipeline {value.name!r} is defined twice ({found[value.name][1]} "
                                                 f"and {path})")
                found[value.name] = (value, str(path))
    return [p for p, _ in found.values()]
