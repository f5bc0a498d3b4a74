"""Validation and defaults of a :class:`JobSpec` — shared by the client (early, friendly errors) and the
master (authoritative: it never trusts a client).

Every problem raises :class:`SpecError` carrying the field path (``trigger.cron.expr``) so the server can
answer INVALID_ARGUMENT with a message that names what is wrong.

Entrypoints:
  * ``/abs/path/job.py:func`` — a file; ``func(spark, ctx)`` is called.
  * ``/abs/path/job.py``      — a plain script, run as ``__main__`` with the context in environment variables.
  * ``package.module:func``  — an importable module on the workers.
The client turns a relative file path into an absolute one (master and workers have other working dirs),
so the master only accepts absolute paths.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sparkyard import ids, resources, wellformed
from sparkyard.errors import quote
from sparkyard.v1 import sparkyard_pb2 as pb

DEFAULT_GROUP = "default"
# Priorities run from -1000 (last) to 1000 (first); the ready queue score packs them next to a timestamp.
MIN_PRIORITY, MAX_PRIORITY = -1000, 1000
# Retries are opt-in: a Spark job is not always idempotent, so by default a failure is final.
DEFAULT_MAX_ATTEMPTS = 1
MAX_ATTEMPTS_LIMIT = 100
# Backoff before the 2nd attempt, growth per attempt, and cap.
DEFAULT_INITIAL_BACKOFF_S = 5.0
DEFAULT_BACKOFF_MULTIPLIER = 2.0
DEFAULT_MAX_BACKOFF_S = 600.0
# A recurring job firing more often than this would spend its life in Spark start-up and scheduling.
MIN_EVERY_INTERVAL_S = 0.1
# At most this many missed firings are replayed by the catch-up misfire policy.
DEFAULT_CATCH_UP_LIMIT = 10
MAX_CATCH_UP_LIMIT = 1000
MAX_ACTIVE_RUNS = 1000
MAX_NAME_LENGTH = 200
# A webhook URL (--on-failure, --on-success) longer than this is a mistake, not an endpoint.
MAX_WEBHOOK_URL = 2048
# A delay, interval, timeout or backoff longer than this is a typo (ms for s, a stray digit); bounding them
# also keeps every fire time computed from them a valid timestamp, which every listing must print.
MAX_SPEC_DURATION_S = 10 * 365 * 24 * 3600
# Backoff growth per attempt: with at most MAX_ATTEMPTS_LIMIT attempts, multiplier ** attempts stays a
# finite float below this (1000 ** 99 ≈ 1e297; a larger base overflows).
MAX_BACKOFF_MULTIPLIER = 1000.0
GROUP_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,64}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MODULE_PATH = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
FUNC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MARK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class SpecError(ValueError):
    """A job spec field is invalid; ``field`` is its dotted path."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Entrypoint:
    """A parsed entrypoint: either ``path`` (a .py file) or ``module``, and an optional function."""

    path: str = ""
    module: str = ""
    func: str = ""

    @property
    def is_file(self) -> bool:
        return bool(self.path)

    def __str__(self) -> str:
        target = self.path or self.module
        return f"{target}:{self.func}" if self.func else target


def parse_entrypoint(text: str) -> Entrypoint:
    """Parse ``file.py[:func]`` or ``package.module:func`` (syntax only; no file system access)."""
    field = "entrypoint"
    raw = text.strip()
    if not raw:
        raise SpecError(field, "is empty (use path/to/job.py:main or package.module:main)")
    target, sep, func = raw.rpartition(":") if ":" in raw else (raw, "", "")
    if sep and not func:
        raise SpecError(field, f"{quote(text)} has ':' but no function name")
    if func and not FUNC_NAME.fullmatch(func):
        raise SpecError(field, f"{quote(func)} is not a Python function name")
    if target.endswith(".py"):
        return Entrypoint(path=target, func=func)
    if MODULE_PATH.fullmatch(target):
        if not func:
            raise SpecError(field, f"{quote(text)}: a module entrypoint needs a function (e.g. package.module:main)")
        return Entrypoint(module=target, func=func)
    raise SpecError(field, f"{quote(text)} is neither a .py file nor a package.module:function")


def resolve_entrypoint(text: str, base_dir: Path) -> str:
    """Client side: make a file entrypoint absolute and check the file and function exist.

    The check reads the file with ``ast`` (never imports it), so a typo in the function name is caught
    before the job is queued, not minutes later on a worker.
    """
    entry = parse_entrypoint(text)
    if not entry.is_file:
        return str(entry)
    path = Path(entry.path).expanduser()
    if not path.is_absolute():
        path = (base_dir / path).resolve()
    if not path.is_file():
        raise SpecError("entrypoint", f"file not found: {entry.path}")
    if entry.func:
        stat = path.stat()
        try:
            names = _top_level_names(str(path), stat.st_mtime_ns, stat.st_size)
        except SyntaxError as exc:
            raise SpecError("entrypoint", f"{entry.path} does not parse: {exc.msg} (line {exc.lineno})") from None
        if entry.func not in names:
            raise SpecError("entrypoint", f"{entry.path} has no top-level function {quote(entry.func)}")
    return str(Entrypoint(path=str(path), func=entry.func))


@functools.lru_cache(maxsize=256)
def _top_level_names(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    """Functions and assigned names at the top of a file (cached per version of the file: a bulk submit
    of many jobs of one entrypoint parses it once)."""
    tree = ast.parse(Path(path).read_text(), filename=path)
    return frozenset(
        {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        | {target.id for node in tree.body if isinstance(node, ast.Assign)
           for target in node.targets if isinstance(target, ast.Name)}
    )


@dataclass(frozen=True)
class SplitInput:
    """One opaque input (a file, a partition, a key range) and the resource it loads (``mark``, optional)."""

    value: str
    mark: str = ""


def parse_input(text: str) -> SplitInput:
    """Parse ``VALUE`` or ``MARK=VALUE`` (the ``--input`` syntax).

    ``MARK=VALUE`` is recognised only when the part before the first ``=`` is a name
    (``[A-Za-z_][A-Za-z0-9_.-]*``) — which implies no ``/`` or ``:`` before it — so paths and URLs such as
    ``s3://bucket/dt=2024-01-01/`` or ``data/dt=2024-01-01`` stay plain values. A value that itself looks
    like ``name=...`` (``dt=2024-01-01``) is written with a leading ``=``: ``=dt=2024-01-01`` means "no
    mark, the value is ``dt=2024-01-01``".
    """
    if text.startswith("="):
        value, mark = text[1:], ""
    else:
        head, sep, tail = text.partition("=")
        if sep and MARK_NAME.fullmatch(head):
            value, mark = tail, head
        else:
            value, mark = text, ""
    if not value:
        raise SpecError("split.inputs", f"input {quote(text)} has an empty value")
    return SplitInput(value=value, mark=mark)


def parse_conf(items: list[str], *, field: str = "conf") -> dict[str, str]:
    """``k=v`` strings to a dict; ValueError naming the malformed item."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(field, f"{quote(item)} is not key=value")
        out[key.strip()] = value
    return out


def _duration_s(d: object) -> float:
    return float(d.seconds) + float(d.nanos) / 1e9  # type: ignore[attr-defined]


def _check_duration(field: str, d: object) -> None:
    """A spec duration is 0..MAX_SPEC_DURATION_S (the caller has already refused ill-formed ones)."""
    seconds = _duration_s(d)
    if seconds < 0:
        raise SpecError(field, f"{seconds:g}s must not be negative")
    if seconds > MAX_SPEC_DURATION_S:
        raise SpecError(field, f"{seconds:g}s is longer than the maximum of {MAX_SPEC_DURATION_S}s (10 years)")


# The fields of a cron expression with what each takes (a 6-field one has seconds first).
_CRON_FIELDS = (("minute", "0-59"), ("hour", "0-23"), ("day of month", "1-31"), ("month", "1-12 or JAN-DEC"),
                ("day of week", "0-7 or SUN-SAT"))


def _bad_cron_field(fields: list[str]) -> str:
    """``: its minute field '61' is out of 0-59`` for the first field that is wrong alone ('' when none is)."""
    from croniter import croniter

    names = ((("second", "0-59"),) if len(fields) == 6 else ()) + _CRON_FIELDS
    for i, (name, allowed) in enumerate(names):
        alone = " ".join(f if j == i else "*" for j, f in enumerate(fields))
        if not croniter.is_valid(alone, second_at_beginning=len(fields) == 6):
            return f": its {name} field {quote(fields[i])} is not valid (takes {allowed}, with , - / *)"
    return ""


def validate_cron(expr: str, tz: str) -> None:
    """Raise SpecError unless ``expr`` is a 5- or 6-field (seconds first) cron and ``tz`` a known zone."""
    fields = expr.split()
    if len(fields) not in (5, 6):
        raise SpecError("trigger.cron.expr", f"{quote(expr)} has {len(fields)} fields; use 5 (min hour dom mon dow) "
                        "or 6 (sec min hour dom mon dow)")
    if parsed_cron(expr, len(fields) == 6) is None:
        raise SpecError("trigger.cron.expr", f"{quote(expr)} is not a valid cron expression{_bad_cron_field(fields)}")
    if tz:
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError):
            raise SpecError("trigger.cron.tz", f"unknown time zone {quote(tz)} (use an IANA name like Europe/Berlin)") from None


@functools.lru_cache(maxsize=4096)
def parsed_cron(expr: str, six: bool) -> Any:
    """The expression parsed by croniter (None: it is not valid), kept: parsing is most of croniter's cost,
    a bulk submit's jobs often share an expression, and the master's fire times (master/triggers.py) copy
    the same parse that validation made. Typed Any: croniter is imported only when a cron is met."""
    from croniter import CroniterError, croniter  # a CLI submit without --cron never loads it

    try:
        return croniter(expr, 0.0, second_at_beginning=six)
    except CroniterError:
        return None


def _validate_trigger(trigger: pb.Trigger) -> None:
    kind = trigger.WhichOneof("kind")
    if kind is None or (kind == "now" and not trigger.now):
        trigger.now = True
        kind = "now"
    if kind == "delay":
        _check_duration("trigger.delay", trigger.delay)
    for name in ("at", "start_at", "end_at"):
        if trigger.HasField(name) and getattr(trigger, name).seconds < 0:
            raise SpecError(f"trigger.{name}", "must not be before 1970-01-01T00:00:00Z")
    if kind == "cron":
        validate_cron(trigger.cron.expr, trigger.cron.tz)
    if kind == "every":
        _check_duration("trigger.every.interval", trigger.every.interval)
        interval = _duration_s(trigger.every.interval)
        if interval < MIN_EVERY_INTERVAL_S:
            raise SpecError("trigger.every.interval", f"{interval:g}s is below the minimum {MIN_EVERY_INTERVAL_S:g}s")
    if kind == "after":
        if not ids.JOB_ID.fullmatch(trigger.after.job_id):
            raise SpecError("trigger.after.job_id", f"{quote(trigger.after.job_id)} is not a job id (--after JOB: "
                            "the id of the parent job, e.g. j19a8c2f3a1b2c3d4e5f65)")
        if trigger.after.when not in pb.AfterWhen.values():
            raise SpecError("trigger.after.when", f"unknown value {trigger.after.when}")
        if trigger.after.when == pb.AFTER_WHEN_UNSPECIFIED:
            trigger.after.when = pb.AFTER_SUCCEEDED
    if trigger.max_runs < 0:
        raise SpecError("trigger.max_runs", "must not be negative")
    recurring = kind in ("cron", "every")
    if not recurring and (trigger.HasField("end_at") or trigger.max_runs or trigger.HasField("start_at")):
        raise SpecError("trigger", "start_at, end_at and max_runs apply only to --cron and --every jobs")
    if trigger.HasField("end_at") and trigger.HasField("start_at") and (
        trigger.end_at.ToMilliseconds() <= trigger.start_at.ToMilliseconds()
    ):
        raise SpecError("trigger.end_at", "must be after start_at")


def _validate_retry(retry: pb.RetryPolicy) -> None:
    if retry.max_attempts == 0:
        retry.max_attempts = DEFAULT_MAX_ATTEMPTS
    if not 1 <= retry.max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise SpecError("retry.max_attempts", f"{retry.max_attempts} is outside 1..{MAX_ATTEMPTS_LIMIT}")
    if not retry.HasField("initial_backoff"):
        retry.initial_backoff.FromMilliseconds(int(DEFAULT_INITIAL_BACKOFF_S * 1000))
    if not retry.HasField("max_backoff"):
        retry.max_backoff.FromMilliseconds(int(DEFAULT_MAX_BACKOFF_S * 1000))
    if retry.multiplier == 0:
        retry.multiplier = DEFAULT_BACKOFF_MULTIPLIER
    _check_duration("retry.initial_backoff", retry.initial_backoff)
    _check_duration("retry.max_backoff", retry.max_backoff)
    if not 1 <= retry.multiplier <= MAX_BACKOFF_MULTIPLIER:
        raise SpecError("retry.multiplier", f"{retry.multiplier:g} is outside 1..{MAX_BACKOFF_MULTIPLIER:g}")


def normalize(spec: pb.JobSpec, *, require_absolute_path: bool = True, wellformed_checked: bool = False) -> pb.JobSpec:
    """A validated copy of ``spec`` with defaults filled in; SpecError names the first bad field.
    ``wellformed_checked``: every value of the message was checked already (:mod:`sparkyard.wellformed`: the
    master's request guard checks each request whole), so it is not walked a second time."""
    out = pb.JobSpec()
    out.CopyFrom(spec)
    if not wellformed_checked:
        try:
            wellformed.check(out)
        except wellformed.MalformedField as exc:
            raise SpecError(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
    entry = parse_entrypoint(out.entrypoint)
    if out.HasField("bundle"):
        _validate_bundle(out, entry)
    elif entry.is_file and require_absolute_path and not entry.path.startswith("/"):
        raise SpecError("entrypoint", f"{quote(entry.path)} must be an absolute path (the client resolves relative ones)")
    if out.task_memory_mb < 0:
        raise SpecError("task_memory_mb", "must not be negative")
    field, problem = resources.check(out)
    if field:
        raise SpecError(field, problem)
    if out.cwd and not out.cwd.startswith("/"):
        raise SpecError("cwd", f"{quote(out.cwd)} must be an absolute path")
    out.entrypoint = str(entry)
    if len(out.name) > MAX_NAME_LENGTH:
        raise SpecError("name", f"longer than {MAX_NAME_LENGTH} characters")
    if not out.name:
        out.name = Path(entry.path).stem if entry.is_file else entry.module.rsplit(".", 1)[-1]
        if entry.func:
            out.name += f":{entry.func}"
    out.group = out.group or DEFAULT_GROUP
    if not GROUP_PATTERN.fullmatch(out.group):
        raise SpecError("group", f"{quote(out.group)}: use 1-64 of A-Z a-z 0-9 _ . -")
    if not MIN_PRIORITY <= out.priority <= MAX_PRIORITY:
        raise SpecError("priority", f"{out.priority} is outside {MIN_PRIORITY}..{MAX_PRIORITY}")
    for key in out.conf:
        if not key.strip():
            raise SpecError("conf", "empty Spark conf key")
    for name in out.env:
        if not ENV_NAME.fullmatch(name):
            raise SpecError("env", f"{quote(name)} is not an environment variable name")
    _check_duration("timeout", out.timeout)
    if out.routing == pb.ROUTING_CONSISTENT_HASH and not out.routing_key:
        raise SpecError("routing_key", "consistent-hash routing needs a routing key")
    if out.misfire_catch_up_limit < 0 or out.misfire_catch_up_limit > MAX_CATCH_UP_LIMIT:
        raise SpecError("misfire_catch_up_limit", f"must be within 0..{MAX_CATCH_UP_LIMIT}")
    if out.misfire == pb.MISFIRE_CATCH_UP and out.misfire_catch_up_limit == 0:
        out.misfire_catch_up_limit = DEFAULT_CATCH_UP_LIMIT
    if not 0 <= out.max_active_runs <= MAX_ACTIVE_RUNS:
        raise SpecError("max_active_runs", f"{out.max_active_runs} is outside 0..{MAX_ACTIVE_RUNS}")
    if out.max_active_runs > 1 and out.overlap != pb.OVERLAP_FORBID:
        raise SpecError("max_active_runs", "applies to --overlap forbid (other policies do not limit active runs)")
    if out.split.max_concurrent < 0:
        raise SpecError("split.max_concurrent", "must not be negative")
    for name in ("on_failure", "on_success"):
        problem = webhook_problem(getattr(out, name))
        if problem:
            raise SpecError(name, problem)
    _validate_trigger(out.trigger)
    _validate_retry(out.retry)
    return out


def webhook_problem(url: str) -> str:
    """What is wrong with a webhook URL ('' for nothing, and for no URL): an absolute http(s) URL with a
    host, of a sane length."""
    if not url:
        return ""
    if len(url) > MAX_WEBHOOK_URL:
        return f"longer than {MAX_WEBHOOK_URL} characters"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{quote(url)} is not an http(s) URL with a host"
    return ""


def _inside_bundle(path: str) -> bool:
    parts = path.split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts


def _validate_bundle(spec: pb.JobSpec, entry: Entrypoint) -> None:
    """With shipped code, file paths are relative to the bundle root and stay inside it."""
    digest = spec.bundle.digest
    if not _SHA256_HEX.fullmatch(digest):
        raise SpecError("bundle.digest", f"{quote(digest)} is not a sha256 (64 lowercase hex digits)")
    if spec.bundle.size <= 0:
        raise SpecError("bundle.size", "must be positive")
    if entry.is_file and not _inside_bundle(entry.path):
        raise SpecError("entrypoint", f"{quote(entry.path)} must be a path inside the bundle (relative, no '..')")
    for field in ("py_files", "files"):
        for path in getattr(spec, field):
            if not _inside_bundle(path):
                raise SpecError(field, f"{quote(path)} must be a path inside the bundle (relative, no '..')")


def backoff_seconds(retry: pb.RetryPolicy, failed_attempt: int) -> float:
    """Delay before the attempt after ``failed_attempt`` (1-based): initial × multiplier^(n-1), capped."""
    delay = _duration_s(retry.initial_backoff) * (retry.multiplier ** max(0, failed_attempt - 1))
    return min(delay, _duration_s(retry.max_backoff))
