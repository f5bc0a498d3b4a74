"""One frozen config per process, filled from defaults < config file (TOML) < environment < flags.

The TOML file has one table per process (``[master]``, ``[worker]``, ``[client]``) whose keys are the
field names below. Environment variables are ``SPARKYARD_`` + the field name in upper case
(``SPARKYARD_TOKEN``, ``SPARKYARD_MASTER``). Every default is a named constant with the reason for it.

The layering is pydantic-settings' (its sources, in order: flags, environment, the file's table); the
values are pydantic's: a ``*_s`` setting takes seconds or a duration (``15s``, ``500ms``, ``1h30m``), a
``*_bytes`` setting bytes or a size (``64m``, ``2g``), labels and Spark conf ``k=v,k2=v2`` or a TOML table.
Every bad value is one :class:`ConfigError` line naming where it came from. The defaults are in
:mod:`sparkyard.defaults`, the loading in :mod:`sparkyard.config_load` (its sources in
:mod:`sparkyard.config_source`), how a value's text is read in :mod:`sparkyard.config_values`. The client loads :class:`ClientConfig`'s fields without pydantic, from data
generated out of them (:mod:`sparkyard.client_settings`).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import Field

from sparkyard.addresses import check_host_port, connect_address, master_addresses
from sparkyard.config_load import Settings, load
from sparkyard.config_source import ConfigError, check_cert_and_key, check_tls_client, read_file, read_secret
from sparkyard.config_values import Bytes, Labels, Megabytes, Seconds, SparkConf
from sparkyard.defaults import (
    DEFAULT_BUNDLE_CACHE_BYTES,
    DEFAULT_CALL_TIMEOUT_S,
    DEFAULT_DATA_DIR,
    DEFAULT_DEAD_AFTER_HEARTBEATS,
    DEFAULT_DISPATCH_BATCH,
    DEFAULT_DRAIN_TIMEOUT_S,
    DEFAULT_DRIVER_FROZEN_LIMIT_S,
    DEFAULT_DRIVER_MAX_TASKS,
    DEFAULT_FIRE_AHEAD_S,
    DEFAULT_HEARTBEAT_S,
    DEFAULT_HISTORY_MAX_AGE_S,
    DEFAULT_IDEMPOTENCY_TTL_S,
    DEFAULT_KEEP_RUNS,
    DEFAULT_LEADER_LEASE_S,
    DEFAULT_LEASE_S,
    DEFAULT_LISTEN,
    DEFAULT_LOG_RETENTION_S,
    DEFAULT_MASTER,
    DEFAULT_MAX_ARGS_BYTES,
    DEFAULT_MAX_BUNDLE_BYTES,
    DEFAULT_MAX_CONF_BYTES,
    DEFAULT_MAX_ENV_BYTES,
    DEFAULT_MAX_INPUTS,
    DEFAULT_MAX_LOST,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MISFIRE_THRESHOLD_S,
    DEFAULT_OUTBOUND_QUEUE,
    DEFAULT_PREFETCH_MAX,
    DEFAULT_PRELOAD_HORIZON_S,
    DEFAULT_PRIORITY_AGING_S,
    DEFAULT_REAPER_INTERVAL_S,
    DEFAULT_REDIS_CONNECT_WAIT_S,
    DEFAULT_RESULT_MAX_BYTES,
    DEFAULT_RETENTION_INTERVAL_S,
    DEFAULT_RUNNER_WAIT_MAX_S,
    DEFAULT_SELF_FENCE_MARGIN_S,
    DEFAULT_SHUTDOWN_GRACE_S,
    DEFAULT_SLOTS,
    DEFAULT_TIMEOUT_GRACE_S,
    DEFAULT_WAIT_MAX_S,
)
from sparkyard.flags import env_of, flag_of
from sparkyard.keys import DEFAULT_NAMESPACE
from sparkyard.runners import DEFAULT_RUNNER, RUNNER_NAMES
from sparkyard.spec import DEFAULT_GROUP, webhook_problem
from sparkyard.timeutil import format_duration

# Imported from here by callers that load a config: the loading (config_load) and address parsing
# (addresses) live in their own modules.
__all__ = ["ClientConfig", "ConfigError", "MasterConfig", "WorkerConfig", "connect_address", "load",
           "master_addresses", "read_file", "read_secret"]


S = TypeVar("S", bound="_Secrets")



class _Secrets(Settings):
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
        check_tls_client(self.tls_ca, self.tls_cert, self.tls_key)


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
    fire_ahead_s: Seconds = Field(DEFAULT_FIRE_AHEAD_S, description="fire a scheduled run (create it, lease its "
                                  "task) this long before its time, longer in a burst; the worker starts it at its "
                                  "time (0: fire at the time)")
    misfire_threshold_s: Seconds = Field(DEFAULT_MISFIRE_THRESHOLD_S, description="how late a firing may be before "
                                         "it counts as missed")
    priority_aging_s: Seconds = DEFAULT_PRIORITY_AGING_S
    outbound_queue: int = DEFAULT_OUTBOUND_QUEUE
    shutdown_grace_s: Seconds = DEFAULT_SHUTDOWN_GRACE_S
    result_max_bytes: Bytes = Field(DEFAULT_RESULT_MAX_BYTES, description="largest task result (a task's "
                                    "returned JSON) the master stores, e.g. 1m: a larger one fails its attempt")
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
                                    "about this long after the leader's host dies or is cut off, half as long after "
                                    "its process dies")
    redis_connect_wait_s: Seconds = Field(DEFAULT_REDIS_CONNECT_WAIT_S, description="a start waits for Redis as "
                                          "long as it takes, saying so every this long (naming Redis)")
    redis_min_replicas: int = Field(0, description="use no write (a submit's or trigger's reply, a fencing token, "
                                    "a leader epoch) until this many Redis replicas have it (WAIT)")
    advertise: str = Field("", description="HOST:PORT clients and workers reach this master at (none: --listen)")
    http: str = Field("", description="HOST:PORT to serve /metrics (Prometheus) and the web console on (none: no "
                      "HTTP; port 0 = any free)")
    on_failure: str = Field("", description="POST a JSON body here when a run of a job that names no --on-failure "
                            "fails", json_schema_extra={"metavar": "URL"})
    on_success: str = Field("", description="POST a JSON body here when a run of a job that names no --on-success "
                            "succeeds", json_schema_extra={"metavar": "URL"})
    log_level: str = Field("INFO", description="DEBUG, INFO, WARNING or ERROR")

    def validate(self) -> MasterConfig:
        _positive(self, "lease_s", "heartbeat_s", "reaper_interval_s", "dispatch_batch", "outbound_queue",
                  "preload_horizon_s", "wait_max_s", "dead_after_heartbeats", "max_bundle_bytes", "idempotency_ttl_s",
                  "leader_lease_s", "redis_connect_wait_s", "keep_runs", "history_max_age_s", "retention_interval_s",
                  "max_message_bytes", "max_args_bytes", "max_env_bytes", "max_conf_bytes", "max_inputs")
        _finite(self, "lease_s", "heartbeat_s", "reaper_interval_s", "timeout_grace_s", "idempotency_ttl_s",
                "preload_horizon_s", "wait_max_s", "misfire_threshold_s", "priority_aging_s", "shutdown_grace_s",
                "fire_ahead_s", "leader_lease_s", "history_max_age_s", "retention_interval_s", "redis_connect_wait_s")
        if self.heartbeat_s * 2 > self.lease_s:
            raise ConfigError(f"{_said(self, 'heartbeat_s')} must be at most half of {_said(self, 'lease_s')}")
        if self.leader_lease_s >= self.lease_s:
            raise ConfigError(f"{_said(self, 'leader_lease_s')} must be shorter than {_said(self, 'lease_s')}: "
                              "running tasks must keep their leases while a standby takes over")
        if self.fire_ahead_s >= min(self.lease_s, self.preload_horizon_s / 2):
            raise ConfigError(f"{_said(self, 'fire_ahead_s')} must be shorter than {_said(self, 'lease_s')} and "
                              f"half of {_said(self, 'preload_horizon_s')}")
        if self.advertise:
            check_host_port(self.advertise, "advertise")
        _not_negative(self, "max_lost", "redis_min_replicas")
        check_host_port(self.listen, "listen")
        check_cert_and_key(self.tls_cert, self.tls_key)
        if self.tls_client_ca and not self.tls_cert:
            raise ConfigError(f"{_named(self, 'tls_client_ca')} needs {_named(self, 'tls_cert')} and "
                              f"{_named(self, 'tls_key')}: mutual TLS is TLS first")
        if self.http:
            check_host_port(self.http, "http")
        for name in ("on_failure", "on_success"):
            problem = webhook_problem(getattr(self, name))
            if problem:
                raise ConfigError(f"{_named(self, name)}: {problem}")
        cfg = self._with_secret_files()
        tokens = [t for t in (cfg.token, cfg.worker_token, cfg.viewer_token) if t]
        if tokens and not cfg.token:
            raise ConfigError(f"{_named(cfg, 'worker_token')} and {_named(cfg, 'viewer_token')} need "
                              f"{_named(cfg, 'token')} (or {flag_of('token_file')}): without an admin token nobody "
                              "could submit")
        if len(set(tokens)) != len(tokens):
            raise ConfigError(f"{_named(cfg, 'token')}, {_named(cfg, 'worker_token')} and "
                              f"{_named(cfg, 'viewer_token')} must differ: a token names its role")
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
    result_max_bytes: Bytes = Field(DEFAULT_RESULT_MAX_BYTES, description="largest task result a task may "
                                    "return, e.g. 1m: a larger one fails its attempt")
    log_retention_s: Seconds = Field(DEFAULT_LOG_RETENTION_S, description="how long attempt logs and scratch "
                                     "directories are kept, e.g. 7d")
    task_memory_mb: Megabytes = Field(0, description="memory limit of one attempt's processes, e.g. 2g; 0 = none "
                                      "(a job's --task-memory wins)")
    driver_max_tasks: int = Field(DEFAULT_DRIVER_MAX_TASKS, description="session runner: a warm driver runs at "
                                  "most this many attempts (1: a fresh driver for every attempt)")
    driver_frozen_limit_s: Seconds = Field(DEFAULT_DRIVER_FROZEN_LIMIT_S, description="session and connect runners: "
                                           "a driver that sees this worker stopped (SIGSTOP) this long stops its "
                                           "attempt itself; keep it well under the master's --lease")
    runner_wait_max_s: Seconds = Field(DEFAULT_RUNNER_WAIT_MAX_S, description="how long an attempt waits for a "
                                       "runner that cannot run it (no driver starts, no Spark Connect server) "
                                       "before it fails with the reason, to be retried")
    prefetch_max: int = Field(DEFAULT_PREFETCH_MAX, description="most tasks queued on this worker beyond its "
                              "slots, so a slot never waits a round trip for its next task (it asks for fewer: "
                              "slots x refill time / task time); 0 = off")
    bundle_cache_bytes: Bytes = Field(DEFAULT_BUNDLE_CACHE_BYTES, description="disk kept for fetched bundles of "
                                      "shipped code, e.g. 2g")
    class_archive_dir: str = Field("", description="directory of the archive of Spark's classes the worker's "
                                   "JVMs start from, made once per Java and pyspark, ~150 MB (none: "
                                   "~/.cache/sparkyard/class-archive, shared by the user's workers; off: none)")
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

    def validate(self) -> WorkerConfig:
        _positive(self, "slots", "drain_timeout_s", "result_max_bytes", "log_retention_s", "driver_max_tasks",
                  "runner_wait_max_s", "bundle_cache_bytes", "driver_frozen_limit_s")
        _finite(self, "drain_timeout_s", "self_fence_margin_s", "log_retention_s", "runner_wait_max_s",
                "driver_frozen_limit_s")
        _not_negative(self, "task_memory_mb", "prefetch_max")
        if self.runner not in RUNNER_NAMES:
            raise ConfigError(f"{_named(self, 'runner')} {self.runner!r}: use {', '.join(RUNNER_NAMES[:-1])} or "
                              f"{RUNNER_NAMES[-1]}")
        if self.connect_url:
            connect_address(self.connect_url)
        master_addresses(self.master)  # each names a port, or gets the default one
        if self.metrics:
            check_host_port(self.metrics, "metrics")
        check_cert_and_key(self.metrics_tls_cert, self.metrics_tls_key, "metrics_tls")
        self._check_tls()
        cfg = self._with_secret_files()
        if cfg.metrics_token and cfg.metrics_token == cfg.token:
            raise ConfigError(f"{_named(cfg, 'metrics_token')} must differ from {_named(cfg, 'token')}: it is "
                              "the one a scraper may hold")
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

    def validate(self) -> ClientConfig:
        self._check_tls()
        return self._with_secret_files()


def _said(cfg: object, name: str) -> str:
    """A duration setting as a message names it: its flag, its field (the TOML key), its value."""
    return f"{_named(cfg, name)} {format_duration(getattr(cfg, name))}"


def _named(cfg: object, name: str) -> str:
    """A setting as a message names it: its flag and its field (the config file's key), or for a setting with
    no flag its field and its environment variable."""
    field = type(cfg).model_fields.get(name)  # type: ignore[attr-defined]
    if field is not None and field.description:
        return f"{flag_of(name)} ({name})"
    return f"{name} ({env_of(name)})"


def _positive(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{_named(cfg, name)} must be positive (got {getattr(cfg, name)})")


def _not_negative(cfg: Any, *names: str) -> None:
    for name in names:
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{_named(cfg, name)} must not be negative (got {getattr(cfg, name)})")


def _finite(cfg: Any, *names: str) -> None:
    """A duration from a TOML file or code is a float that may be negative, inf or nan (the text forms are
    refused by parse_duration already)."""
    for name in names:
        value = getattr(cfg, name)
        if not 0 <= value < float("inf"):
            raise ConfigError(f"{_named(cfg, name)}: {value} must be a finite, non-negative duration")


