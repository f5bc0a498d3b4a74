"""One frozen config per process, filled from defaults < config file (TOML) < environment < flags.

The TOML file has one table per process (``[master]``, ``[worker]``, ``[client]``) whose keys are the
field names below. Environment variables are ``SPARKYARD_`` + the field name in upper case
(``SPARKYARD_TOKEN``, ``SPARKYARD_MASTER``). Every default is a named constant with the reason for it.

The layering is pydantic-settings' (its sources, in order: flags, environment, the file's table); the
values are pydantic's: a ``*_s`` setting takes seconds or a duration (``15s``, ``500ms``, ``1h30m``), a
``*_bytes`` setting bytes or a size (``64m``, ``2g``), labels and Spark conf ``k=v,k2=v2`` or a TOML table.
Every bad value is one :class:`ConfigError` line naming where it came from.
"""

from __future__ import annotations

import os
import socket
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping, TypeVar

from pydantic import BeforeValidator, Field, ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from sparkyard.flags import env_of, flag_of
from sparkyard.keys import DEFAULT_NAMESPACE
from sparkyard.runners import DEFAULT_RUNNER, RUNNER_NAMES
from sparkyard.spec import DEFAULT_GROUP, parse_conf, webhook_problem
from sparkyard.timeutil import parse_duration, parse_size

# The master's gRPC address when none is given; loopback so a fresh install exposes nothing.
DEFAULT_LISTEN = "127.0.0.1:7070"
DEFAULT_MASTER = "127.0.0.1:7070"
# Where an embedded Redis and the master's files live (relative to the working directory).
DEFAULT_DATA_DIR = ".sparkyard"
# Task lease and worker heartbeat: a lease must survive several missed heartbeats and a master failover
# (a standby takes over after DEFAULT_LEADER_LEASE_S), so 15 s with a 3 s heartbeat.
DEFAULT_LEASE_S = 15.0
DEFAULT_HEARTBEAT_S = 3.0
# A worker that misses this many heartbeats is marked dead (its leases then expire on their own).
DEFAULT_DEAD_AFTER_HEARTBEATS = 3
# How often the reaper looks for expired leases and master-side timeouts; bounds requeue delay.
DEFAULT_REAPER_INTERVAL_S = 1.0
# A task whose lease expires more than this many times is a poison task and goes DEAD.
DEFAULT_MAX_LOST = 3
# The master fails an attempt this long after its task timeout if the worker has not (worker hung).
DEFAULT_TIMEOUT_GRACE_S = 10.0
# A client retrying a submit within this window with the same idempotency key gets the same job.
DEFAULT_IDEMPOTENCY_TTL_S = 24 * 3600.0
# Upper bound of tasks claimed in one dispatch round (one Lua call); keeps one call under ~10 ms.
DEFAULT_DISPATCH_BATCH = 512
# Schedule entries due within this horizon are preloaded into the timing wheel (LTS PreLoader).
DEFAULT_PRELOAD_HORIZON_S = 60.0
# The longest a WaitRun call may block; clients loop for longer waits.
DEFAULT_WAIT_MAX_S = 3600.0
# A firing that happens this much later than its scheduled time is a misfire (master was down, job
# paused) and the job's misfire policy decides what to do with it.
DEFAULT_MISFIRE_THRESHOLD_S = 5.0
# Ready-queue aging: one priority point is worth this much waiting (see master/store.py ready_score).
DEFAULT_PRIORITY_AGING_S = 1.0
# Messages queued for one worker's stream before the master stops dispatching to it (backpressure).
DEFAULT_OUTBOUND_QUEUE = 1024
# Leader election (master/leader.py): the leader's lease in Redis. A standby takes over about this long
# after the leader dies; it must stay well inside the task lease so running tasks keep their leases across
# a change of leader.
DEFAULT_LEADER_LEASE_S = 3.0
# How long a master's start waits for a given Redis to answer: a first start should fail soon on a wrong
# address; a master that lost the leadership (often because Redis went away) comes back as a standby and
# waits as long as it takes, logging at this interval.
DEFAULT_REDIS_CONNECT_WAIT_S = 30.0
# Grace given to in-flight RPCs on shutdown.
DEFAULT_SHUTDOWN_GRACE_S = 5.0
# Largest bundle of shipped code (a job's files, zipped) the master stores: big enough for a project with
# its helper modules and small data files, small enough that Redis memory stays bounded.
DEFAULT_MAX_BUNDLE_BYTES = 64 * 1024 * 1024
# Retention (master/retention.py): a job keeps at most this many ended runs (with their tasks, attempts and
# log metadata), newest first — enough to see a recurring job's recent pattern of failures, while a 1 s job
# no longer grows Redis without bound (Redis runs with noeviction: growth ends in OOM errors).
DEFAULT_KEEP_RUNS = 100
# Ended runs, and ended (completed or cancelled) jobs, older than this are deleted: a week of history covers
# the usual "what happened last weekend" question; the workers keep attempt logs as long (log_retention_s).
DEFAULT_HISTORY_MAX_AGE_S = 7 * 24 * 3600.0
# How long the retention loop rests after a full pass over the jobs that found nothing more to delete.
DEFAULT_RETENTION_INTERVAL_S = 5.0
# Size limits of what the master accepts (docs/limits.md). Each is a flag (--max-message, --max-args, ...)
# and over it a call is refused with RESOURCE_EXHAUSTED naming the limit and its flag.
# One gRPC message: far above a bulk submit of thousands of jobs or a worker's batch of 500 results, while
# a runaway client cannot make the master hold more than this per call (bundles stream in 1 MiB chunks).
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# A job's arguments, all together: they are stored with the job and sent with every task; data belongs in
# a file, a bundle or --inputs. (A 16 MB argument is refused.)
DEFAULT_MAX_ARGS_BYTES = 1024 * 1024
# A job's environment (names and values): it is set in every task's processes, and Linux refuses a
# single environment string over 128 KiB.
DEFAULT_MAX_ENV_BYTES = 64 * 1024
# A job's Spark conf (keys and values): real confs are a few KiB; it is stored with the job.
DEFAULT_MAX_CONF_BYTES = 256 * 1024
# Inputs of one run (--inputs): each is stored in its task's record; runs are cut into at most 10,000
# tasks, so this allows 10 inputs per task at the largest split.
DEFAULT_MAX_INPUTS = 100_000
# Worker: disk kept for extracted bundles (least recently used ones beyond it are removed).
DEFAULT_BUNDLE_CACHE_BYTES = 2 * 1024 * 1024 * 1024
# Largest task result kept (JSON bytes); larger results fail the attempt with a clear error.
DEFAULT_RESULT_MAX_BYTES = 1024 * 1024
# Worker: slots (its node group and runner: DEFAULT_GROUP, DEFAULT_RUNNER); how long a draining worker lets
# running tasks finish.
DEFAULT_SLOTS = 2
# The port of a Spark Connect URL that names none (Spark's own default).
DEFAULT_CONNECT_PORT = 15002
DEFAULT_DRAIN_TIMEOUT_S = 60.0
# Worker: kill a task when its lease could not be renewed for (lease - margin) — before the master
# can give the task to another worker (self-fencing).
DEFAULT_SELF_FENCE_MARGIN_S = 2.0
# Worker, session runner: a warm driver process is replaced after this many attempts (bounds what user
# code can leak into a long-lived process). A replacement costs a JVM start (~10 CPU-seconds on a small
# machine), so for short tasks this is ~1 ms per task amortised; the old driver serves until it is warm.
DEFAULT_DRIVER_MAX_TASKS = 10_000
# How long an attempt waits for a runner that cannot run it (no driver starts, no Spark Connect server)
# before it fails with the runner's reason, so that its retry can go to another worker.
DEFAULT_RUNNER_WAIT_MAX_S = 300.0
# Worker: most tasks held beyond its slots, queued locally so a slot never waits a round trip for its next
# task (the worker asks for fewer, by Little's law: worker/prefetch.py). 0 turns prefetch off.
DEFAULT_PREFETCH_MAX = 256
# How long a worker keeps attempt logs and scratch directories (swept at start and then periodically).
DEFAULT_LOG_RETENTION_S = 7 * 24 * 3600.0
# Client: deadline of a unary call (WaitRun sets its own).
DEFAULT_CALL_TIMEOUT_S = 30.0

C = TypeVar("C", bound="_Settings")
S = TypeVar("S", bound="_Secrets")


class ConfigError(ValueError):
    """A config value is malformed; the message names the source and the field."""


def _seconds(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


def _bytes(value: Any) -> Any:
    return parse_size(value) if isinstance(value, str) else value


def _pairs(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): str(v) for k, v in value.items()}
    if isinstance(value, str):
        pairs = [p.strip() for p in value.split(",") if p.strip()]
        if any("=" not in p for p in pairs):
            raise ValueError(f"{value!r}: use key=value,key2=value2")
        return {k.strip(): v.strip() for k, v in (p.split("=", 1) for p in pairs)}
    return value


def _megabytes(value: Any) -> Any:
    return parse_size(value, default_unit="m") >> 20 if isinstance(value, str) else value


def _labels(value: Any) -> Any:
    """Labels; from repeated flags a list, each item itself ``k=v`` or ``k=v,k2=v2``."""
    return _pairs(",".join(value) if isinstance(value, list) else value)


def _conf(value: Any) -> Any:
    """Spark conf; from repeated flags a list, each item one ``k=v`` (a value may hold commas)."""
    return parse_conf([str(item) for item in value], field="pairs") if isinstance(value, list) else _pairs(value)


Seconds = Annotated[float, BeforeValidator(_seconds)]
Bytes = Annotated[int, BeforeValidator(_bytes)]
Megabytes = Annotated[int, BeforeValidator(_megabytes)]
Labels = Annotated[dict[str, str], NoDecode, BeforeValidator(_labels)]
SparkConf = Annotated[dict[str, str], NoDecode, BeforeValidator(_conf)]


class _Given:
    """What one :func:`load` call reads besides flags: its environment and its file's table."""

    def __init__(self, environ: Mapping[str, str], path: str | None, table: Mapping[str, Any]) -> None:
        self.environ = environ
        self.path = path
        self.table = table


# The sources of the config being loaded (None: a config built in code reads no environment or file).
_GIVEN: ContextVar[_Given | None] = ContextVar("sparkyard_config_sources", default=None)


class _Environment(EnvSettingsSource):
    """pydantic-settings' environment source, over the mapping :func:`load` was given."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        given = _GIVEN.get()
        return {k.lower(): v for k, v in (given.environ if given else {}).items()}


class _FileTable(PydanticBaseSettingsSource):
    """The process's table of the TOML config file."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        given = _GIVEN.get()
        return (given.table.get(field_name) if given else None), field_name, False

    def __call__(self) -> dict[str, Any]:
        given = _GIVEN.get()
        return dict(given.table) if given else {}


class _Settings(BaseSettings):
    model_config = SettingsConfigDict(frozen=True, extra="forbid", env_prefix="SPARKYARD_", case_sensitive=False)

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _Environment(settings_cls), _FileTable(settings_cls)

    def validate(self: C) -> C:  # type: ignore[override]
        return self


def read_file(path: str, setting: str) -> bytes:
    """The bytes of a file a setting names (a certificate, a key, a secret); a :class:`ConfigError` naming
    the setting when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting} {path}: {exc.strerror or exc}") from None


def read_secret(path: str, name: str) -> str:
    """The secret in the file ``path`` (surrounding whitespace removed), for ``name``'s ``*_file`` setting:
    a secret read from a file is not on the command line, where ``ps`` shows it to every user."""
    secret = read_file(path, f"{name}_file").decode(errors="replace").strip()
    if not secret:
        raise ConfigError(f"{name}_file {path} is empty")
    return secret


class _Secrets(_Settings):
    """Settings whose secrets may come from files: a ``<name>_file`` setting, when given, is read into
    ``<name>`` (and wins over it)."""

    _SECRETS: ClassVar[tuple[str, ...]] = ()

    def _with_secret_files(self: S) -> S:
        update = {name: read_secret(getattr(self, f"{name}_file"), name)
                  for name in self._SECRETS if getattr(self, f"{name}_file")}
        return self.model_copy(update=update) if update else self


class _TlsClient(_Secrets):
    """How a client or worker reaches masters: TLS when ``tls_ca`` is given (the CA that signed the
    masters' certificates), with a certificate of its own (``tls_cert``, ``tls_key``) for a master that
    requires one (mutual TLS); the admin token, or its file."""

    _SECRETS: ClassVar[tuple[str, ...]] = ("token",)
    token: str = Field("", description="the master's token; --token-file keeps it out of `ps`")
    token_file: str = Field("", description="file holding the token, kept out of `ps`")
    tls_ca: str = Field("", description="CA certificate the master's certificate is signed by: TLS")
    tls_cert: str = Field("", description="a certificate of this process's own, for a master that requires one "
                          "(mutual TLS)")
    tls_key: str = Field("", description="the key of --tls-cert")

    def _check_tls(self) -> None:
        _cert_and_key(self.tls_cert, self.tls_key)
        if self.tls_cert and not self.tls_ca:
            raise ConfigError("tls_cert needs tls_ca (--tls-ca): the CA that signed the master's certificate")


class MasterConfig(_Secrets):
    """A master's settings; those with a description are also flags of ``sparkyard-master`` (common/flags.py)."""

    _SECRETS: ClassVar[tuple[str, ...]] = ("token", "worker_token", "viewer_token")
    listen: str = Field(DEFAULT_LISTEN, description="HOST:PORT to serve gRPC on (port 0 = any free)")
    redis_url: str = Field("", description="redis://…, unix://… or redis+sentinel://h1:26379,h2:26379/SERVICE "
                           "(none: an embedded Redis in the data dir)")
    data_dir: str = Field(DEFAULT_DATA_DIR, description="directory of the embedded Redis and master files")
    namespace: str = Field(DEFAULT_NAMESPACE, description="Redis key prefix, to share one Redis between clusters")
    token: str = Field("", description="admin token: every call; --token-file keeps it out of `ps`")
    token_file: str = Field("", description="file holding the admin token")
    worker_token: str = Field("", description="workers' token: their stream and bundle fetches only (none: "
                              "workers use the admin token); --worker-token-file keeps it out of `ps`")
    worker_token_file: str = Field("", description="file holding the worker token")
    viewer_token: str = Field("", description="read-only token; --viewer-token-file keeps it out of `ps`")
    viewer_token_file: str = Field("", description="file holding the viewer token")
    tls_cert: str = Field("", description="this master's certificate (PEM): TLS on its port")
    tls_key: str = Field("", description="the key of --tls-cert")
    tls_client_ca: str = Field("", description="CA certificate callers' certificates must be signed by: mutual TLS")
    tls_ca: str = Field("", description="CA certificate of the other masters' certificates, for a standby's web "
                        "console to reach the leader (none: --tls-client-ca)")
    insecure: bool = Field(False, description="allow listening on a non-loopback address without TLS or a token")
    lease_s: Seconds = Field(DEFAULT_LEASE_S, description="task lease, e.g. 15s or 1m")
    heartbeat_s: Seconds = Field(DEFAULT_HEARTBEAT_S, description="worker heartbeat, at most half the lease")
    dead_after_heartbeats: int = DEFAULT_DEAD_AFTER_HEARTBEATS
    reaper_interval_s: Seconds = Field(DEFAULT_REAPER_INTERVAL_S, description="time between lease sweeps")
    max_lost: int = DEFAULT_MAX_LOST
    timeout_grace_s: Seconds = DEFAULT_TIMEOUT_GRACE_S
    idempotency_ttl_s: Seconds = DEFAULT_IDEMPOTENCY_TTL_S
    dispatch_batch: int = DEFAULT_DISPATCH_BATCH
    preload_horizon_s: Seconds = Field(DEFAULT_PRELOAD_HORIZON_S, description="how far ahead the schedule is loaded "
                                       "into the timing wheel (re-read every half of it)")
    wait_max_s: Seconds = DEFAULT_WAIT_MAX_S
    misfire_threshold_s: Seconds = Field(DEFAULT_MISFIRE_THRESHOLD_S, description="how late a firing may be before "
                                         "it counts as missed")
    priority_aging_s: Seconds = DEFAULT_PRIORITY_AGING_S
    outbound_queue: int = DEFAULT_OUTBOUND_QUEUE
    shutdown_grace_s: Seconds = DEFAULT_SHUTDOWN_GRACE_S
    result_max_bytes: Bytes = DEFAULT_RESULT_MAX_BYTES
    max_bundle_bytes: Bytes = Field(DEFAULT_MAX_BUNDLE_BYTES, description="largest bundle of shipped code a job "
                                    "may upload, e.g. 64m")
    keep_runs: int = Field(DEFAULT_KEEP_RUNS, description="ended runs each job keeps, newest first; older ones "
                           "are deleted")
    history_max_age_s: Seconds = Field(DEFAULT_HISTORY_MAX_AGE_S, description="ended runs and ended jobs older "
                                       "than this are deleted, e.g. 7d or 12h")
    retention_interval_s: Seconds = DEFAULT_RETENTION_INTERVAL_S
    max_message_bytes: Bytes = Field(DEFAULT_MAX_MESSAGE_BYTES, description="largest gRPC request the master "
                                     "accepts, e.g. 64m (docs/limits.md)")
    max_args_bytes: Bytes = Field(DEFAULT_MAX_ARGS_BYTES, description="largest total of a job's arguments")
    max_env_bytes: Bytes = Field(DEFAULT_MAX_ENV_BYTES, description="largest total of a job's environment")
    max_conf_bytes: Bytes = Field(DEFAULT_MAX_CONF_BYTES, description="largest total of a job's Spark conf")
    max_inputs: int = Field(DEFAULT_MAX_INPUTS, description="most inputs of one run")
    leader_lease_s: Seconds = Field(DEFAULT_LEADER_LEASE_S, description="the leader's lease; a standby takes over "
                                    "about this long after it dies")
    redis_connect_wait_s: Seconds = Field(DEFAULT_REDIS_CONNECT_WAIT_S, description="how long a start waits for "
                                          "Redis to answer (a master restarted after losing the leadership waits "
                                          "as long as it takes)")
    redis_min_replicas: int = Field(0, description="acknowledge a submit only once this many Redis replicas have "
                                    "it (WAIT)")
    advertise: str = Field("", description="HOST:PORT clients and workers reach this master at (none: --listen)")
    http: str = Field("", description="HOST:PORT to serve /metrics (Prometheus) and the web console on (none: no "
                      "HTTP; port 0 = any free)")
    on_failure: str = Field("", description="POST a JSON body here when a run of a job that names no --on-failure "
                            "fails", json_schema_extra={"metavar": "URL"})
    on_success: str = Field("", description="POST a JSON body here when a run of a job that names no --on-success "
                            "succeeds", json_schema_extra={"metavar": "URL"})
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")

    def validate(self) -> MasterConfig:  # type: ignore[override]
        _positive(self, "lease_s", "heartbeat_s", "reaper_interval_s", "dispatch_batch", "outbound_queue",
                  "preload_horizon_s", "wait_max_s", "dead_after_heartbeats", "max_bundle_bytes", "idempotency_ttl_s",
                  "leader_lease_s", "redis_connect_wait_s", "keep_runs", "history_max_age_s", "retention_interval_s",
                  "max_message_bytes", "max_args_bytes", "max_env_bytes", "max_conf_bytes", "max_inputs")
        _finite(self, "lease_s", "heartbeat_s", "reaper_interval_s", "timeout_grace_s", "idempotency_ttl_s",
                "preload_horizon_s", "wait_max_s", "misfire_threshold_s", "priority_aging_s", "shutdown_grace_s",
                "leader_lease_s", "history_max_age_s", "retention_interval_s", "redis_connect_wait_s")
        if self.heartbeat_s * 2 > self.lease_s:
            raise ConfigError(f"heartbeat_s ({self.heartbeat_s}) must be at most half of lease_s ({self.lease_s})")
        if self.leader_lease_s >= self.lease_s:
            raise ConfigError(f"leader_lease_s ({self.leader_lease_s}) must be shorter than lease_s ({self.lease_s}): "
                              "running tasks must keep their leases while a standby takes over")
        if self.advertise:
            _host_port(self.advertise, "advertise")
        if self.max_lost < 0:
            raise ConfigError("max_lost must not be negative")
        if self.redis_min_replicas < 0:
            raise ConfigError("redis_min_replicas must not be negative")
        _host_port(self.listen, "listen")
        _cert_and_key(self.tls_cert, self.tls_key)
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError("tls_client_ca (--tls-client-ca) needs tls_cert and tls_key: mutual TLS is TLS first")
        if self.http:
            _host_port(self.http, "http")
        for name in ("on_failure", "on_success"):
            problem = webhook_problem(getattr(self, name))
            if problem:
                raise ConfigError(f"{name} (--{name.replace('_', '-')}): {problem}")
        cfg = self._with_secret_files()
        tokens = [t for t in (cfg.token, cfg.worker_token, cfg.viewer_token) if t]
        if tokens and not cfg.token:
            raise ConfigError("worker_token and viewer_token need token (--token or --token-file): "
                              "without an admin token nobody could submit")
        if len(set(tokens)) != len(tokens):
            raise ConfigError("token, worker_token and viewer_token must differ: a token names its role")
        return cfg


class WorkerConfig(_TlsClient):
    """A worker's settings; those with a description are also flags of ``sparkyard-worker`` (common/flags.py)."""

    _SECRETS: ClassVar[tuple[str, ...]] = ("token", "metrics_token")
    master: str = Field(DEFAULT_MASTER, description="HOST[:PORT] of the master (port 7070 if none), or a "
                        "comma-separated list (tried in turn)")
    slots: int = Field(DEFAULT_SLOTS, description="tasks run at once")
    group: str = Field(DEFAULT_GROUP, description="node group this worker serves")
    runner: str = Field(DEFAULT_RUNNER, description="runner of jobs that do not choose one",
                        json_schema_extra={"choices": RUNNER_NAMES})
    spark_master: str = Field("", description="Spark master of every task's driver (none: local[1], one local "
                              "Spark per driver)")
    connect_url: str = Field("", description="connect runner: sc://HOST:PORT of a Spark Connect server to use "
                             "(none: the worker starts and supervises its own)")
    work_dir: str = Field("", description="directory for attempt logs and scratch (none: .sparkyard/worker-ID)")
    id: str = Field("", description="worker id, stable across restarts (none: HOST-PID)")
    token: str = Field("", description="the master's worker token, or its admin token; --token-file keeps it out "
                       "of `ps`")
    drain_timeout_s: Seconds = Field(DEFAULT_DRAIN_TIMEOUT_S, description="how long running tasks may take to "
                                     "finish on SIGTERM before they are handed back")
    self_fence_margin_s: Seconds = DEFAULT_SELF_FENCE_MARGIN_S
    result_max_bytes: Bytes = DEFAULT_RESULT_MAX_BYTES
    log_retention_s: Seconds = Field(DEFAULT_LOG_RETENTION_S, description="how long attempt logs and scratch "
                                     "directories are kept, e.g. 7d")
    task_memory_mb: Megabytes = Field(0, description="memory limit of one attempt's processes, e.g. 2g; 0 = none "
                                      "(a job's --task-memory wins)")
    driver_max_tasks: int = Field(DEFAULT_DRIVER_MAX_TASKS, description="session runner: replace a warm driver "
                                  "after this many attempts")
    runner_wait_max_s: Seconds = Field(DEFAULT_RUNNER_WAIT_MAX_S, description="how long an attempt waits for a "
                                       "runner that cannot run it (no driver starts, no Spark Connect server) "
                                       "before it fails with the reason, to be retried")
    prefetch_max: int = Field(DEFAULT_PREFETCH_MAX, description="most tasks queued on this worker beyond its "
                              "slots, so a slot never waits a round trip for its next task (it asks for fewer: "
                              "slots x refill time / task time); 0 = off")
    bundle_cache_bytes: Bytes = Field(DEFAULT_BUNDLE_CACHE_BYTES, description="disk kept for fetched bundles of "
                                      "shipped code, e.g. 2g")
    labels: Labels = Field({}, description="a label (repeatable)", json_schema_extra={"metavar": "K=V",
                                                                                     "repeat": True})
    conf: SparkConf = Field({}, description="Spark conf of every driver and spark-submit this worker starts "
                            "(repeatable; a job's wins)", json_schema_extra={"metavar": "K=V", "repeat": True})
    metrics: str = Field("", description="HOST:PORT to serve /metrics (Prometheus) on")
    metrics_tls_cert: str = Field("", description="certificate (PEM) to serve /metrics over HTTPS with")
    metrics_tls_key: str = Field("", description="the key of --metrics-tls-cert")
    metrics_token: str = Field("", description="a token that may read /metrics and nothing else (a scraper then "
                               "holds no worker token); --metrics-token-file keeps it out of `ps`")
    metrics_token_file: str = Field("", description="file holding --metrics-token")
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")

    def validate(self) -> WorkerConfig:  # type: ignore[override]
        _positive(self, "slots", "drain_timeout_s", "result_max_bytes", "log_retention_s", "driver_max_tasks",
                  "runner_wait_max_s", "bundle_cache_bytes")
        _finite(self, "drain_timeout_s", "self_fence_margin_s", "log_retention_s", "runner_wait_max_s")
        if self.task_memory_mb < 0:
            raise ConfigError("task_memory_mb must not be negative")
        if self.prefetch_max < 0:
            raise ConfigError("prefetch_max must not be negative")
        if self.runner not in RUNNER_NAMES:
            raise ConfigError(f"runner {self.runner!r}: use {', '.join(RUNNER_NAMES[:-1])} or {RUNNER_NAMES[-1]}")
        if self.connect_url:
            connect_address(self.connect_url)
        master_addresses(self.master)  # each names a port, or gets the default one
        if self.metrics:
            _host_port(self.metrics, "metrics")
        _cert_and_key(self.metrics_tls_cert, self.metrics_tls_key, "metrics_tls")
        self._check_tls()
        cfg = self._with_secret_files()
        if cfg.metrics_token and cfg.metrics_token == cfg.token:
            raise ConfigError("metrics_token must differ from token: it is the one a scraper may hold")
        return cfg

    @property
    def masters(self) -> list[str]:
        return master_addresses(self.master)

    @property
    def worker_id(self) -> str:
        return self.id or f"{socket.gethostname()}-{os.getpid()}"

    @property
    def work_path(self) -> Path:
        return Path(self.work_dir or Path(DEFAULT_DATA_DIR) / f"worker-{self.worker_id}").resolve()


class ClientConfig(_TlsClient):
    master: str = Field(DEFAULT_MASTER, description="HOST[:PORT] of the master (port 7070 if none), or a comma-separated list")
    call_timeout_s: Seconds = DEFAULT_CALL_TIMEOUT_S

    def validate(self) -> ClientConfig:  # type: ignore[override]
        self._check_tls()
        return self._with_secret_files()


def _cert_and_key(cert: str, key: str, prefix: str = "tls") -> None:
    if bool(cert) != bool(key):
        raise ConfigError(f"{prefix}_cert and {prefix}_key go together ({flag_of(prefix + '_cert')}, "
                          f"{flag_of(prefix + '_key')}): give both or neither")


def _positive(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{flag_of(name)} ({name}) must be positive (got {getattr(cfg, name)})")


def _finite(cfg: Any, *names: str) -> None:
    """A duration from a TOML file or code is a float that may be negative, inf or nan (the text forms are
    refused by parse_duration already)."""
    for name in names:
        value = getattr(cfg, name)
        if not 0 <= value < float("inf"):
            raise ConfigError(f"{flag_of(name)} ({name}): {value} must be a finite, non-negative duration")


def master_addresses(text: str) -> list[str]:
    """The masters a ``--master`` names (``HOST[:PORT]``, comma-separated): a host alone gets the masters'
    default port, not gRPC's 443; a port outside 1..65535 is refused naming it (gRPC would wrap it)."""
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or host.endswith(":") or (item.startswith("[") and not host.endswith("]")):
            host, port = item, DEFAULT_MASTER.rpartition(":")[2]  # a host alone, or a bare IPv6 address
            if ":" in host and not host.startswith("["):
                host = f"[{host}]"
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"master {item!r} is not HOST:PORT (a port is 1..65535; without one, "
                              f"{DEFAULT_MASTER.rpartition(':')[2]} is used)")
        out.append(f"{host}:{int(port)}")
    if not out:
        raise ConfigError("master: give HOST:PORT (or a comma-separated list of them)")
    return out


def _host_port(address: str, name: str) -> None:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"{name} {address!r} is not HOST:PORT")


def connect_address(url: str) -> tuple[str, int]:
    """(host, port) of a Spark Connect URL, ``sc://HOST[:PORT][/;param=value…]``."""
    problem = f"connect_url (--connect-url) {url!r} is not sc://HOST:PORT"
    if not url.startswith("sc://"):
        raise ConfigError(problem)
    authority = url[len("sc://"):].split("/", 1)[0]
    host, sep, port = authority.rpartition(":")
    if not sep:
        host, port = authority, str(DEFAULT_CONNECT_PORT)
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(problem)
    return host.strip("[]"), int(port)


def load(cls: type[C], section: str, *, config_file: str | None = None,
         environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None) -> C:
    """Build ``cls`` from its defaults, then ``[section]`` of the TOML file, env vars, then overrides.

    ``overrides`` holds command-line flags; entries whose value is None (flag not given) are ignored.
    """
    env = os.environ if environ is None else environ
    path = config_file or env.get("SPARKYARD_CONFIG")
    table: Mapping[str, Any] = {}
    if path:
        try:
            table = tomllib.loads(Path(path).read_text()).get(section, {})
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: {exc}") from None
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    token = _GIVEN.set(_Given({k: v for k, v in env.items() if k.upper().startswith("SPARKYARD_")}, path, table))
    try:
        cfg = cls(**flags)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, cls, section, path, env, flags)) from None
    finally:
        _GIVEN.reset(token)
    return cfg.validate()


_KINDS = {"int": "whole number", "float": "number", "bool": "boolean (true or false)"}


def _explain(exc: ValidationError, cls: type[C], section: str, path: str | None, env: Mapping[str, str],
             flags: Mapping[str, Any]) -> str:
    """The first error as one line naming its source: the flag, the variable or the file's key."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    var = env_of(name)
    if error["type"] == "extra_forbidden":
        return f"config file {path}: [{section}] has no setting {name!r}"
    if name in flags:
        where, value = flag_of(name), flags[name]
    elif var in env:
        where, value = var, env[var]
    else:
        where, value = f"{path} [{section}] {name}", error.get("input")
    if error["type"] == "value_error":
        reason = str(error.get("ctx", {}).get("error", error["msg"]))
        for prefix in ("duration: ", "size: ", "pairs: "):  # the source names the setting already
            reason = reason.removeprefix(prefix)
        return f"{where}: {reason}"
    kind = str(error["type"]).split("_", 1)[0]
    return f"{where}: {value!r} is not a valid {_KINDS.get(kind, kind)}"
