"""Process flags generated from the settings: one definition gives a setting's flag, environment variable,
config-file key, default and help text."""

from __future__ import annotations

import argparse

import pytest

from sparkyard.config import (
    DEFAULT_BUNDLE_CACHE_BYTES,
    DEFAULT_LEADER_LEASE_S,
    ClientConfig,
    ConfigError,
    MasterConfig,
    WorkerConfig,
    load,
)
from sparkyard.flags import add_flags, env_of, flag_help, flag_of
from sparkyard.master.main import parse_args as master_args
from sparkyard.timeutil import format_duration
from sparkyard.worker.main import parse_args as worker_args


def _worker(*argv: str) -> WorkerConfig:
    args = worker_args(list(argv))
    return load(WorkerConfig, "worker", environ={}, overrides={k: v for k, v in vars(args).items() if k != "config"})


def test_help_says_the_default_of_the_constant_and_the_variable() -> None:
    text = flag_help(MasterConfig, "leader_lease_s")
    assert f"default {format_duration(DEFAULT_LEADER_LEASE_S)};" in text and "SPARKYARD_LEADER_LEASE_S" in text
    assert "default 2g;" in flag_help(WorkerConfig, "bundle_cache_bytes") and DEFAULT_BUNDLE_CACHE_BYTES == 2 << 30


@pytest.mark.parametrize("config", [MasterConfig, WorkerConfig])
def test_every_described_setting_is_a_flag_that_sets_it(config: type[MasterConfig] | type[WorkerConfig]) -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser, config)
    described = {name for name, field in config.model_fields.items() if field.description}
    flags = {action.dest: action.option_strings for action in parser._actions if action.dest != "help"}
    assert set(flags) == described
    assert all(flags[name] == [flag_of(name)] for name in described)


def test_flags_that_took_their_values_converted_by_hand_are_read_by_the_config() -> None:
    cfg = _worker("--task-memory", "2g", "--bundle-cache", "512m", "--label", "zone=a,disk=ssd", "--label", "gpu=1",
                  "--conf", "spark.a=1,2", "--conf", "spark.b=x=y")
    assert cfg.task_memory_mb == 2048 and cfg.bundle_cache_bytes == 512 << 20
    assert cfg.labels == {"zone": "a", "disk": "ssd", "gpu": "1"}
    assert cfg.conf == {"spark.a": "1,2", "spark.b": "x=y"}  # one --conf is one pair: a value may hold commas
    assert _worker("--task-memory", "1024").task_memory_mb == 1024  # a bare number counts in MiB


@pytest.mark.parametrize(("argv", "message"), [
    (["--task-memory", "lots"], "^--task-memory: 'lots' is not a size"),
    (["--bundle-cache", "lots"], "^--bundle-cache: 'lots' is not a size"),
    (["--conf", "novalue"], "^--conf: 'novalue' is not key=value"),
])
def test_a_bad_flag_is_named_by_its_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _worker(*argv)


def test_the_environment_takes_the_same_forms_as_the_flag() -> None:
    cfg = load(WorkerConfig, "worker", environ={env_of("task_memory_mb"): "2g", env_of("conf"): "spark.a=1"})
    assert (cfg.task_memory_mb, cfg.conf) == (2048, {"spark.a": "1"})


def test_typed_flags_keep_argparse_checks() -> None:
    with pytest.raises(SystemExit):
        worker_args(["--runner", "warp"])
    with pytest.raises(SystemExit):
        master_args(["--keep-runs", "many"])
    assert master_args(["--insecure"]).insecure is True and master_args([]).insecure is None


def test_the_clients_connection_help_comes_from_its_settings() -> None:
    assert flag_help(ClientConfig, "master").startswith("HOST[:PORT] of the master")
    assert "SPARKYARD_MASTER" in flag_help(ClientConfig, "master")
