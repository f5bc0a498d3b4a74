"""Process config: defaults < TOML file < environment < command-line flags, and validation."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from sparkyard.config import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_LEASE_S,
    DEFAULT_LISTEN,
    DEFAULT_MASTER,
    DEFAULT_RUNNER,
    DEFAULT_SLOTS,
    ClientConfig,
    ConfigError,
    MasterConfig,
    WorkerConfig,
    connect_address,
    flag_of,
    load,
    master_addresses,
)
from sparkyard.master.main import parse_args, restart_argv

TomlWriter = Callable[[str], str]


@pytest.fixture
def toml(tmp_path: Path) -> TomlWriter:
    """Write a TOML config file under tmp_path and return its path."""
    def write(text: str) -> str:
        path = tmp_path / "sparkyard.toml"
        path.write_text(text)
        return str(path)

    return write


# ------------------------------------------------------------------------------------------------ precedence


def test_defaults_apply_when_nothing_is_given() -> None:
    cfg = load(MasterConfig, "master", environ={})
    assert cfg == MasterConfig()
    assert (cfg.listen, cfg.lease_s, cfg.heartbeat_s) == (DEFAULT_LISTEN, DEFAULT_LEASE_S, DEFAULT_HEARTBEAT_S)


def test_file_overrides_defaults(toml: TomlWriter) -> None:
    path = toml('[master]\ntoken = "from-file"\nlease_s = 20\n')
    cfg = load(MasterConfig, "master", config_file=path, environ={})
    assert cfg.token == "from-file"
    assert cfg.lease_s == 20.0
    assert cfg.heartbeat_s == DEFAULT_HEARTBEAT_S


def test_environment_overrides_the_file(toml: TomlWriter) -> None:
    path = toml('[master]\ntoken = "from-file"\nlease_s = 20\n')
    cfg = load(MasterConfig, "master", config_file=path, environ={"SPARKYARD_TOKEN": "from-env"})
    assert cfg.token == "from-env"
    assert cfg.lease_s == 20.0


def test_overrides_win_over_environment_and_file(toml: TomlWriter) -> None:
    path = toml('[master]\ntoken = "from-file"\n')
    cfg = load(MasterConfig, "master", config_file=path, environ={"SPARKYARD_TOKEN": "from-env"},
               overrides={"token": "from-flag"})
    assert cfg.token == "from-flag"


def test_override_of_none_is_ignored(toml: TomlWriter) -> None:
    path = toml('[master]\ntoken = "from-file"\n')
    cfg = load(MasterConfig, "master", config_file=path, environ={"SPARKYARD_TOKEN": "from-env"},
               overrides={"token": None, "lease_s": None})
    assert cfg.token == "from-env"
    assert cfg.lease_s == DEFAULT_LEASE_S


def test_each_process_reads_only_its_own_table(toml: TomlWriter) -> None:
    path = toml('[master]\ntoken = "m"\n\n[worker]\ntoken = "w"\nslots = 8\n\n[client]\ntoken = "c"\n'
                'call_timeout_s = 2.5\n')
    assert load(MasterConfig, "master", config_file=path, environ={}).token == "m"
    worker = load(WorkerConfig, "worker", config_file=path, environ={})
    assert (worker.token, worker.slots) == ("w", 8)
    client = load(ClientConfig, "client", config_file=path, environ={})
    assert (client.token, client.call_timeout_s) == ("c", 2.5)


def test_a_missing_table_leaves_the_defaults(toml: TomlWriter) -> None:
    path = toml('[master]\ntoken = "m"\n')
    assert load(WorkerConfig, "worker", config_file=path, environ={}) == WorkerConfig()


def test_config_file_path_may_come_from_the_environment(toml: TomlWriter) -> None:
    path = toml('[client]\nmaster = "10.0.0.1:7070"\n')
    cfg = load(ClientConfig, "client", environ={"SPARKYARD_CONFIG": path})
    assert cfg.master == "10.0.0.1:7070"


def test_environment_values_are_converted_to_the_field_type() -> None:
    cfg = load(WorkerConfig, "worker", environ={"SPARKYARD_SLOTS": "6", "SPARKYARD_DRAIN_TIMEOUT_S": "1.5",
                                                "SPARKYARD_MASTER": "m1:7070"})
    assert (cfg.slots, cfg.drain_timeout_s, cfg.master) == (6, 1.5, "m1:7070")


def test_override_values_are_converted_to_the_field_type() -> None:
    cfg = load(WorkerConfig, "worker", environ={}, overrides={"slots": "3", "labels": "zone=eu"})
    assert cfg.slots == 3
    assert cfg.labels == {"zone": "eu"}


def test_unrelated_environment_variables_are_ignored() -> None:
    assert load(ClientConfig, "client", environ={"SPARKYARD_NOPE": "x", "HOME": "/root"}) == ClientConfig()


def test_explicit_environ_replaces_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKYARD_TOKEN", "from-process")
    assert load(ClientConfig, "client", environ={}).token == ""
    assert load(ClientConfig, "client").token == "from-process"


# -------------------------------------------------------------------------------------------- file errors


def test_unknown_key_in_the_file_is_refused_naming_it(toml: TomlWriter) -> None:
    path = toml("[master]\nlease_seconds = 20\n")
    with pytest.raises(ConfigError, match=r"\[master\] has no setting 'lease_seconds'") as err:
        load(MasterConfig, "master", config_file=path, environ={})
    assert path in str(err.value)


def test_missing_config_file_is_refused_naming_it(tmp_path: Path) -> None:
    path = str(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="not found") as err:
        load(MasterConfig, "master", config_file=path, environ={})
    assert path in str(err.value)


def test_malformed_toml_is_refused_naming_the_file(toml: TomlWriter) -> None:
    path = toml("[master\ntoken = \n")
    with pytest.raises(ConfigError) as err:
        load(MasterConfig, "master", config_file=path, environ={})
    assert str(err.value).startswith(f"config file {path}: ")


def test_bad_value_in_the_file_names_file_table_and_key(toml: TomlWriter) -> None:
    path = toml('[worker]\nslots = "many"\n')
    with pytest.raises(ConfigError) as err:
        load(WorkerConfig, "worker", config_file=path, environ={})
    assert f"{path} [worker] slots" in str(err.value)
    assert "'many'" in str(err.value)


def test_fractional_number_for_an_integer_setting_is_refused(toml: TomlWriter) -> None:
    path = toml("[worker]\nslots = 2.5\n")
    with pytest.raises(ConfigError, match="slots"):
        load(WorkerConfig, "worker", config_file=path, environ={})


def test_bad_value_in_the_environment_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"^SPARKYARD_LEASE_S: 'soon' is not a duration \(use e.g. 500ms"):
        load(MasterConfig, "master", environ={"SPARKYARD_LEASE_S": "soon"})


def test_bad_value_in_a_flag_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="^--dispatch-batch: 'lots' is not a valid whole number"):
        load(MasterConfig, "master", environ={}, overrides={"dispatch_batch": "lots"})
    with pytest.raises(ConfigError, match="^--lease: 'soon' is not a duration"):
        load(MasterConfig, "master", environ={}, overrides={"lease_s": "soon"})


# ----------------------------------------------------------------------------------------------- validate


@pytest.mark.parametrize(("heartbeat_s", "lease_s"), [(8.0, 15.0), (3.0, 5.0), (1.0, 1.0)])
def test_heartbeat_more_than_half_the_lease_is_refused(heartbeat_s: float, lease_s: float) -> None:
    with pytest.raises(ConfigError, match=r"^--heartbeat \(heartbeat_s\) .* must be at most half of --lease \(lease_s\) "):
        MasterConfig(heartbeat_s=heartbeat_s, lease_s=lease_s).validate()


@pytest.mark.parametrize(("fire_ahead_s", "said"), [(15.0, "15s"), (30.0, "30s"), (60.0, "1m")])
def test_a_fire_ahead_as_long_as_the_lease_or_half_the_preload_horizon_is_refused_naming_its_flag(
        fire_ahead_s: float, said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        MasterConfig(fire_ahead_s=fire_ahead_s).validate()
    assert str(refused.value) == (f"--fire-ahead (fire_ahead_s) {said} must be shorter than --lease "
                                  "(lease_s) 15s and half of --preload-horizon (preload_horizon_s) 1m")
    MasterConfig(fire_ahead_s=14.5).validate()


def test_heartbeat_of_exactly_half_the_lease_is_accepted() -> None:
    cfg = MasterConfig(heartbeat_s=7.5, lease_s=15.0)
    assert cfg.validate() is cfg


def test_load_validates_the_result() -> None:
    with pytest.raises(ConfigError, match="heartbeat_s"):
        load(MasterConfig, "master", environ={"SPARKYARD_HEARTBEAT_S": "10"})


@pytest.mark.parametrize("listen", ["7070", "localhost", ":7070", "host:", "host:port", "host:70700", "host:-1",
                                    "http://host:7070"])
def test_bad_listen_address_is_refused(listen: str) -> None:
    with pytest.raises(ConfigError, match=f"listen '{listen}' is not HOST:PORT"):
        MasterConfig(listen=listen).validate()


@pytest.mark.parametrize("url", ["127.0.0.1:15002", "http://spark:15002", "sc://", "sc://:15002", "sc://host:port",
                                 "sc://host:0", "sc://host:70000"])
def test_bad_connect_url_is_refused_naming_the_flag(url: str) -> None:
    with pytest.raises(ConfigError, match=f"connect_url \\(--connect-url\\) '{url}' is not sc://HOST:PORT"):
        load(WorkerConfig, "worker", environ={}, overrides={"runner": "connect", "connect_url": url})


@pytest.mark.parametrize("url, address", [("sc://spark.internal:15003", ("spark.internal", 15003)),
                                          ("sc://10.0.0.7", ("10.0.0.7", 15002)),
                                          ("sc://[::1]:15002/;user_id=etl", ("::1", 15002))])
def test_connect_url_names_host_and_port(url: str, address: tuple[str, int]) -> None:
    assert connect_address(load(WorkerConfig, "worker", environ={}, overrides={"connect_url": url}).connect_url) == address


def test_connect_url_comes_from_the_environment_like_other_worker_settings() -> None:
    cfg = load(WorkerConfig, "worker", environ={"SPARKYARD_RUNNER": "connect", "SPARKYARD_CONNECT_URL": "sc://h:1"})
    assert (cfg.runner, cfg.connect_url) == ("connect", "sc://h:1")


@pytest.mark.parametrize("listen", ["0.0.0.0:7070", "localhost:0", "[::1]:7070", "master.internal:65535"])
def test_host_port_listen_address_is_accepted(listen: str) -> None:
    assert MasterConfig(listen=listen).validate().listen == listen


@pytest.mark.parametrize("field", ["lease_s", "heartbeat_s", "reaper_interval_s", "dispatch_batch",
                                   "outbound_queue", "preload_horizon_s", "wait_max_s", "dead_after_heartbeats",
                                   "max_bundle_bytes", "idempotency_ttl_s", "max_message_bytes",
                                   "max_args_bytes", "max_env_bytes", "max_conf_bytes", "max_inputs"])
def test_master_durations_and_sizes_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{named(MasterConfig, field)} must be positive"):
        MasterConfig(**{field: 0}).validate()


def named(settings: type[MasterConfig] | type[WorkerConfig], field: str) -> str:
    """How an error names a setting, as a regex: its flag where it has one (the settings with no help text are
    file and environment only), else its environment variable."""
    if settings.model_fields[field].description:
        return f"{flag_of(field)} \\({field}\\)"
    return f"{field} \\(SPARKYARD_{field.upper()}\\)"


def test_a_setting_an_error_names_by_a_flag_has_that_flag() -> None:
    with pytest.raises(ConfigError, match=r"^dispatch_batch \(SPARKYARD_DISPATCH_BATCH\) must be positive"):
        MasterConfig(dispatch_batch=0).validate()  # no --dispatch-batch: the message said there was
    with pytest.raises(SystemExit):
        parse_args(["--dispatch-batch", "5"])
    with pytest.raises(ConfigError, match=r"^--lease \(lease_s\) must be positive"):
        MasterConfig(lease_s=0).validate()
    assert parse_args(["--lease", "5"]).lease_s == "5"  # the flag exists (its text is converted on load)


@pytest.mark.parametrize("value", [float("inf"), float("nan"), -1.0])
@pytest.mark.parametrize("field", ["misfire_threshold_s", "timeout_grace_s", "priority_aging_s", "shutdown_grace_s"])
def test_master_durations_must_be_finite_and_not_negative(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"^{named(MasterConfig, field)}: .* must be a finite, non-negative duration"):
        MasterConfig(**{field: value}).validate()


@pytest.mark.parametrize("field", ["drain_timeout_s", "self_fence_margin_s", "log_retention_s"])
def test_worker_durations_must_be_finite(field: str) -> None:
    with pytest.raises(ConfigError, match="finite, non-negative duration"):
        WorkerConfig(**{field: float("inf")}).validate()


@pytest.mark.parametrize(("setting", "flag"), [("lease_s", "--lease"), ("max_bundle_bytes", "--max-bundle"),
                                               ("task_memory_mb", "--task-memory"), ("max_inputs", "--max-inputs"),
                                               ("labels", "--label")])
def test_a_setting_is_named_by_its_command_line_flag(setting: str, flag: str) -> None:
    assert flag_of(setting) == flag


def test_size_limits_read_sizes_from_flags() -> None:
    cfg = load(MasterConfig, "master", environ={}, overrides={"max_args_bytes": "2m", "max_message_bytes": "8m"})
    assert (cfg.max_args_bytes, cfg.max_message_bytes) == (2 << 20, 8 << 20)


def test_a_bad_size_flag_is_named_by_its_flag() -> None:
    with pytest.raises(ConfigError, match="^--max-env: 'lots' is not a size"):
        load(MasterConfig, "master", environ={}, overrides={"max_env_bytes": "lots"})


def test_negative_max_lost_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_lost"):
        MasterConfig(max_lost=-1).validate()


@pytest.mark.parametrize("runner", ["yarn", "", "Session"])
def test_bad_runner_is_refused(runner: str) -> None:
    with pytest.raises(ConfigError, match=f"^--runner \\(runner\\) {runner!r}: use submit, session or connect"):
        WorkerConfig(runner=runner).validate()


@pytest.mark.parametrize("runner", ["submit", "session"])
def test_known_runners_are_accepted(runner: str) -> None:
    assert WorkerConfig(runner=runner).validate().runner == runner


@pytest.mark.parametrize("field", ["slots", "drain_timeout_s", "result_max_bytes", "log_retention_s",
                                   "driver_max_tasks", "bundle_cache_bytes"])
def test_worker_sizes_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{named(WorkerConfig, field)} must be positive"):
        WorkerConfig(**{field: 0}).validate()


def test_worker_defaults_are_valid() -> None:
    cfg = WorkerConfig().validate()
    assert (cfg.master, cfg.slots, cfg.runner) == (DEFAULT_MASTER, DEFAULT_SLOTS, DEFAULT_RUNNER)


# ------------------------------------------------------------------------------------------- worker fields


def test_masters_splits_the_comma_separated_list_and_drops_blanks() -> None:
    cfg = WorkerConfig(master=" m1:7070, m2:7070,,m3:7071 ,")
    assert cfg.masters == ["m1:7070", "m2:7070", "m3:7071"]


def test_a_single_master_is_a_list_of_one() -> None:
    assert WorkerConfig(master="m1:7070").masters == ["m1:7070"]


def test_every_master_address_is_validated() -> None:
    with pytest.raises(ConfigError, match="master 'm2:99999' is not HOST:PORT"):
        WorkerConfig(master="m1:7070,m2:99999").validate()


def test_labels_are_read_from_a_comma_separated_string() -> None:
    cfg = load(WorkerConfig, "worker", environ={"SPARKYARD_LABELS": "a=1,b=2"})
    assert cfg.labels == {"a": "1", "b": "2"}


def test_a_label_value_may_contain_equals() -> None:
    cfg = load(WorkerConfig, "worker", environ={"SPARKYARD_LABELS": "expr=x=y"})
    assert cfg.labels == {"expr": "x=y"}


def test_blanks_around_labels_are_ignored() -> None:
    cfg = load(WorkerConfig, "worker", environ={"SPARKYARD_LABELS": "a=1, b=2"})
    assert cfg.labels == {"a": "1", "b": "2"}


def test_labels_may_be_a_toml_table(toml: TomlWriter) -> None:
    path = toml("[worker]\nlabels = { zone = \"eu\", gpus = 2 }\n")
    assert load(WorkerConfig, "worker", config_file=path, environ={}).labels == {"zone": "eu", "gpus": "2"}


def test_a_label_without_equals_is_refused_naming_the_source() -> None:
    with pytest.raises(ConfigError, match="^SPARKYARD_LABELS: "):
        load(WorkerConfig, "worker", environ={"SPARKYARD_LABELS": "a=1,gpu"})


def test_empty_labels_string_gives_no_labels() -> None:
    assert load(WorkerConfig, "worker", environ={"SPARKYARD_LABELS": ""}).labels == {}


def test_worker_id_is_the_configured_id_when_given() -> None:
    assert WorkerConfig(id="w-7").worker_id == "w-7"


@pytest.mark.parametrize("field", ["task_memory_mb", "prefetch_max"])
def test_worker_limits_must_not_be_negative_but_zero_turns_them_off(field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{named(WorkerConfig, field)} must not be negative \\(got -1\\)"):
        WorkerConfig(**{field: -1}).validate()
    assert getattr(WorkerConfig(**{field: 0}).validate(), field) == 0


# ------------------------------------------------------------------------------------ durations and sizes


def test_durations_and_sizes_are_read_from_every_source(toml: TomlWriter) -> None:
    path = toml('[master]\nlease_s = "20s"\nmax_bundle_bytes = "32m"\nidempotency_ttl_s = "1h30m"\n')
    cfg = load(MasterConfig, "master", config_file=path, environ={"SPARKYARD_HEARTBEAT_S": "500ms"},
               overrides={"preload_horizon_s": "2m", "result_max_bytes": "1k"})
    assert (cfg.lease_s, cfg.heartbeat_s, cfg.idempotency_ttl_s, cfg.preload_horizon_s) == (20.0, 0.5, 5400.0, 120.0)
    assert (cfg.max_bundle_bytes, cfg.result_max_bytes) == (32 << 20, 1024)


def test_a_bad_size_names_its_source() -> None:
    with pytest.raises(ConfigError, match=r"^SPARKYARD_BUNDLE_CACHE_BYTES: 'lots' is not a size"):
        load(WorkerConfig, "worker", environ={"SPARKYARD_BUNDLE_CACHE_BYTES": "lots"})


def test_a_config_built_in_code_reads_no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKYARD_TOKEN", "from-process")
    assert MasterConfig().token == "" and MasterConfig(token="t").token == "t"


def test_configs_are_frozen() -> None:
    with pytest.raises(Exception, match="frozen"):
        MasterConfig().lease_s = 1.0  # type: ignore[misc]


def test_a_master_that_restarts_itself_keeps_the_port_it_got() -> None:
    """Told to listen on port 0 (any free port), it execs itself on the port it had: on a new one, the
    workers and clients that know it by its address could never reach it again."""
    argv = ["--listen", "127.0.0.1:0", "--namespace", "x"]
    assert parse_args(restart_argv(argv, "127.0.0.1:0", 41234)).listen == "127.0.0.1:41234"
    assert parse_args(restart_argv([], "0.0.0.0:0", 5000)).listen == "0.0.0.0:5000"  # port 0 from a file or env
    assert restart_argv(argv[2:], "127.0.0.1:7070", 7070) == argv[2:]  # a fixed port stays


def test_retention_flags_take_a_count_and_a_duration_and_refuse_what_would_keep_nothing() -> None:
    args = parse_args(["--keep-runs", "20", "--history-max-age", "12h"])
    cfg = load(MasterConfig, "master", environ={},
               overrides={"keep_runs": args.keep_runs, "history_max_age_s": args.history_max_age_s})
    assert (cfg.keep_runs, cfg.history_max_age_s) == (20, 12 * 3600)
    defaults = load(MasterConfig, "master", environ={})
    assert (defaults.keep_runs, defaults.history_max_age_s) == (100, 7 * 24 * 3600)
    with pytest.raises(ConfigError, match=r"--keep-runs \(keep_runs\) must be positive"):
        load(MasterConfig, "master", environ={}, overrides={"keep_runs": 0})
    with pytest.raises(ConfigError, match="^--history-max-age: 'a week' is not a duration"):
        load(MasterConfig, "master", environ={}, overrides={"history_max_age_s": "a week"})


# ------------------------------------------------------------------------------------------------ secrets, TLS


def _secret(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("cls, section", [(MasterConfig, "master"), (WorkerConfig, "worker"),
                                          (ClientConfig, "client")])
def test_a_token_file_is_read_into_the_token_without_surrounding_whitespace(
        cls: type[MasterConfig | WorkerConfig | ClientConfig], section: str, tmp_path: Path) -> None:
    path = _secret(tmp_path, "t", "  s3cret\n")
    assert load(cls, section, environ={}, overrides={"token_file": path}).token == "s3cret"
    assert load(cls, section, environ={"SPARKYARD_TOKEN_FILE": path, "SPARKYARD_TOKEN": "other"}).token == "s3cret"


def test_the_master_reads_each_role_s_token_file(tmp_path: Path, toml: TomlWriter) -> None:
    path = toml(f'[master]\ntoken_file = "{_secret(tmp_path, "a", "adm")}"\n'
                f'worker_token_file = "{_secret(tmp_path, "w", "wrk")}"\n'
                f'viewer_token_file = "{_secret(tmp_path, "v", "vw")}"\n')
    cfg = load(MasterConfig, "master", config_file=path, environ={})
    assert (cfg.token, cfg.worker_token, cfg.viewer_token) == ("adm", "wrk", "vw")


@pytest.mark.parametrize("content, error", [(None, "token_file .*: No such file"), ("\n", "token_file .* is empty")])
def test_a_missing_or_empty_token_file_is_refused_naming_the_setting(content: str | None, error: str,
                                                                     tmp_path: Path) -> None:
    path = tmp_path / "token"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=error):
        load(ClientConfig, "client", environ={"SPARKYARD_TOKEN_FILE": str(path)})


@pytest.mark.parametrize("env, error", [
    ({"SPARKYARD_VIEWER_TOKEN": "v"}, r"need --token \(token\) \(or --token-file\)"),
    ({"SPARKYARD_WORKER_TOKEN": "w"}, r"need --token \(token\)"),
    ({"SPARKYARD_TOKEN": "same", "SPARKYARD_WORKER_TOKEN": "same"}, "must differ"),
    ({"SPARKYARD_TOKEN": "a", "SPARKYARD_WORKER_TOKEN": "w", "SPARKYARD_VIEWER_TOKEN": "w"}, "must differ"),
])
def test_role_tokens_need_an_admin_token_and_must_differ(env: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load(MasterConfig, "master", environ=env)


@pytest.mark.parametrize("env, error", [
    ({"SPARKYARD_TLS_CERT": "c"}, "tls_cert and tls_key go together"),
    ({"SPARKYARD_TLS_KEY": "k"}, "tls_cert and tls_key go together"),
    ({"SPARKYARD_TLS_CLIENT_CA": "ca"}, r"needs --tls-cert \(tls_cert\) and --tls-key \(tls_key\)"),
])
def test_master_tls_settings_must_be_complete(env: dict[str, str], error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load(MasterConfig, "master", environ=env)


@pytest.mark.parametrize("env, error", [
    ({"SPARKYARD_TLS_CA": "ca", "SPARKYARD_TLS_CERT": "c"}, "tls_cert and tls_key go together"),
    ({"SPARKYARD_TLS_CERT": "c", "SPARKYARD_TLS_KEY": "k"}, "tls_cert needs tls_ca"),
])
def test_client_tls_settings_must_be_complete(env: dict[str, str], error: str) -> None:
    for cls, section in ((ClientConfig, "client"), (WorkerConfig, "worker")):
        with pytest.raises(ConfigError, match=error):
            load(cls, section, environ=env)  # type: ignore[type-var]


def test_tls_settings_come_from_the_environment() -> None:
    cfg = load(ClientConfig, "client", environ={"SPARKYARD_TLS_CA": "ca.crt", "SPARKYARD_TLS_CERT": "c.crt",
                                                "SPARKYARD_TLS_KEY": "c.key"})
    assert (cfg.tls_ca, cfg.tls_cert, cfg.tls_key) == ("ca.crt", "c.crt", "c.key")


@pytest.mark.parametrize("env, error", [
    ({"SPARKYARD_METRICS_TLS_CERT": "c"}, r"metrics_tls_cert and metrics_tls_key go together \(--metrics-tls-cert"),
    ({"SPARKYARD_TOKEN": "t", "SPARKYARD_METRICS_TOKEN": "t"},
     r"--metrics-token \(metrics_token\) must differ from --token \(token\)"),
])
def test_worker_metrics_settings_must_be_complete_and_the_scrape_token_its_own(env: dict[str, str],
                                                                               error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        load(WorkerConfig, "worker", environ=env)


def test_the_worker_metrics_token_may_come_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "scrape").write_text("s3cret\n")
    cfg = load(WorkerConfig, "worker", environ={"SPARKYARD_METRICS_TOKEN_FILE": str(tmp_path / "scrape")})
    assert cfg.metrics_token == "s3cret"


@pytest.mark.parametrize("given,expected", [
    ("localhost", ["localhost:7070"]),
    ("10.0.0.5:7071, m2", ["10.0.0.5:7071", "m2:7070"]),
    ("[::1]:7072", ["[::1]:7072"]),
    ("::1", ["[::1]:7070"]),
])
def test_a_master_without_a_port_gets_the_masters_default_port(given: str, expected: list[str]) -> None:
    assert master_addresses(given) == expected


@pytest.mark.parametrize("given", ["127.0.0.1:70700", "host:0", "host:x", ":7070", " , "])
def test_a_master_address_with_a_bad_port_is_refused_naming_it(given: str) -> None:
    with pytest.raises(ConfigError, match="master"):
        master_addresses(given)


@pytest.mark.parametrize("given", ["http://127.0.0.1:7070", "grpc://m1:7070", "m1:7070/api"])
def test_a_master_given_as_a_url_is_refused_with_the_address_to_give(given: str) -> None:
    with pytest.raises(ConfigError, match=f"master '{given}' is not HOST:PORT: give the address without a scheme"):
        master_addresses(given)


def test_the_client_and_the_worker_read_master_addresses_alike() -> None:
    assert WorkerConfig(master="localhost").validate().masters == ["localhost:7070"]
    with pytest.raises(ConfigError, match="70700"):
        WorkerConfig(master="127.0.0.1:70700").validate()
