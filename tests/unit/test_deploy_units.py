"""The systemd units and environment files in deploy/systemd/ against the code they configure.

They are text nobody runs in CI, so they would rot silently: a setting renamed in common/config.py, a flag
dropped from a parser, a drain timeout raised past the unit's stop timeout. These tests read them as
systemd does and hold every name in them to the code, and let ``systemd-analyze verify`` judge the units.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from sparkyard.config import MasterConfig, WorkerConfig, load
from sparkyard.master.main import parse_args as master_args
from sparkyard.worker.assembly import FLUSH_TIMEOUT_S
from sparkyard.worker.slots import STOP_TIMEOUT_S
from sparkyard.worker.main import parse_args as worker_args

SYSTEMD = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
PREFIX = "SPARKYARD_"

# unit file, its environment file, the settings it configures, the binary's parser, its config section
UNITS: list[tuple[str, str, type[MasterConfig] | type[WorkerConfig], Callable[[list[str]], argparse.Namespace], str]] = [
    ("sparkyard-master.service", "master.env", MasterConfig, master_args, "master"),
    ("sparkyard-worker.service", "worker.env", WorkerConfig, worker_args, "worker"),
]
IDS = [unit for unit, *_ in UNITS]


def read_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """Sections of a unit file, each key with all its values in order (systemd allows a key more than once,
    which configparser does not)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and current is not None, f"{path.name}:{number}: not KEY=VALUE inside a section: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def read_env(path: Path) -> dict[str, str]:
    """An EnvironmentFile as systemd reads these: KEY=VALUE lines, comments on lines of their own."""
    env: dict[str, str] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, sep, value = line.partition("=")
        assert sep and key and " " not in key, f"{path.name}:{number}: not KEY=VALUE: {raw!r}"
        assert key not in env, f"{path.name}:{number}: {key} given twice (systemd keeps the last, silently)"
        assert not value.startswith(("'", '"')), f"{path.name}:{number}: keep values unquoted"
        env[key] = value
    return env


def service(unit: str) -> dict[str, list[str]]:
    return read_unit(SYSTEMD / unit)["Service"]


def exec_start(unit: str) -> list[str]:
    (line,) = service(unit)["ExecStart"]
    return shlex.split(line)


@pytest.mark.parametrize(("unit", "env_file", "config", "parse", "section"), UNITS, ids=IDS)
def test_every_variable_is_a_setting(unit: str, env_file: str, config: type[MasterConfig] | type[WorkerConfig],
                                     parse: Callable[[list[str]], argparse.Namespace], section: str) -> None:
    """A SPARKYARD_* name that is no field would be ignored by pydantic-settings: a setting lost without a
    word."""
    names = [k for k in read_env(SYSTEMD / env_file) if k.startswith(PREFIX)]
    assert names, f"{env_file} sets nothing"
    unknown = [k for k in names if k[len(PREFIX):].lower() not in config.model_fields]
    assert not unknown, f"{env_file}: not settings of {config.__name__}: {unknown}"


@pytest.mark.parametrize(("unit", "env_file", "config", "parse", "section"), UNITS, ids=IDS)
def test_every_value_is_accepted(unit: str, env_file: str, config: type[MasterConfig] | type[WorkerConfig],
                                 parse: Callable[[list[str]], argparse.Namespace], section: str) -> None:
    """The example values load as the process loads them (durations, ports, addresses), with the settings
    that name files left out: those files exist only on the deployed machine."""
    env = {k: v for k, v in read_env(SYSTEMD / env_file).items()
           if k.startswith(PREFIX) and not k.endswith("_FILE") and "_TLS_" not in k}
    assert env, f"{env_file}: no value to check"
    load(config, section, environ=env)  # a ConfigError names the variable and what is wrong with it


@pytest.mark.parametrize(("unit", "env_file", "config", "parse", "section"), UNITS, ids=IDS)
def test_exec_start_runs_the_binary_with_its_own_flags(unit: str, env_file: str,
                                                        config: type[MasterConfig] | type[WorkerConfig],
                                                        parse: Callable[[list[str]], argparse.Namespace],
                                                        section: str) -> None:
    """ExecStart runs the installed console script of this process, and its parser takes every flag
    (argparse exits on an unknown one); the unit reads the environment file the repository ships."""
    binary, *args = exec_start(unit)
    assert binary == f"/opt/sparkyard/.venv/bin/sparkyard-{section}"
    try:
        parse(args)
    except SystemExit:
        pytest.fail(f"{unit}: sparkyard-{section} does not take {args}")
    (env_path,) = service(unit)["EnvironmentFile"]
    assert env_path == f"/etc/sparkyard/{env_file}"


@pytest.mark.parametrize(("unit", "flag"), [("sparkyard-master.service", "data_dir"),
                                            ("sparkyard-worker.service", "work_dir")])
def test_the_process_writes_where_the_unit_lets_it(unit: str, flag: str) -> None:
    """With ProtectSystem=strict the only writable directories are ReadWritePaths (and a private /tmp): the
    data or work directory given in ExecStart must be under one of them, and so must HOME."""
    settings = service(unit)
    assert settings["ProtectSystem"] == ["strict"] and settings["PrivateTmp"] == ["yes"]
    writable = [Path(p) for line in settings["ReadWritePaths"] for p in line.split()]
    section = unit.removeprefix("sparkyard-").removesuffix(".service")
    parse = master_args if section == "master" else worker_args
    directory = Path(getattr(parse(exec_start(unit)[1:]), flag))
    home = Path(next(v for v in settings["Environment"] if v.startswith("HOME=")).removeprefix("HOME="))
    for path in (directory, home):
        assert any(path.is_relative_to(w) for w in writable), f"{unit}: {path} is not under {writable}"


def seconds(value: str) -> float:
    """A systemd time span as these units write it: seconds, bare or with an s."""
    return float(value.removesuffix("s"))


def test_the_worker_is_given_time_to_drain() -> None:
    """systemd SIGKILLs after TimeoutStopSec; the worker's drain takes up to its drain timeout, then the
    time its killed attempts get to end and the flush of its results. Only the worker gets the SIGTERM
    (KillMode=mixed): sent to its Spark drivers too it would kill the tasks it is draining."""
    settings = service("sparkyard-worker.service")
    env = {k: v for k, v in read_env(SYSTEMD / "worker.env").items() if k == "SPARKYARD_DRAIN_TIMEOUT_S"}
    drain = load(WorkerConfig, "worker", environ=env).drain_timeout_s
    assert settings["KillSignal"] == ["SIGTERM"] and settings["KillMode"] == ["mixed"]
    (stop,) = settings["TimeoutStopSec"]
    assert seconds(stop) > drain + STOP_TIMEOUT_S + FLUSH_TIMEOUT_S


@pytest.mark.parametrize("unit", IDS)
def test_units_restart_unprivileged_and_hardened(unit: str) -> None:
    """The properties docs/deploy.md promises of both units."""
    settings = service(unit)
    assert settings["User"] == ["sparkyard"] and settings["Restart"] == ["on-failure"]
    assert settings["NoNewPrivileges"] == ["yes"] and int(settings["LimitNOFILE"][0]) >= 65536
    assert not any(k.startswith(PREFIX) for v in settings.get("Environment", []) for k in [v.partition("=")[0]]), \
        "settings belong in the environment file"


@pytest.mark.parametrize("unit", IDS)
def test_systemd_analyze_verify(unit: str, tmp_path: Path) -> None:
    """systemd's own check of the unit: unknown keys, bad values, a missing binary. The binary it checks is
    this venv's (the unit names /opt/sparkyard's, which exists only where it is installed)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: apt-get install systemd)")
    binary, *args = exec_start(unit)
    here = Path(sys.executable).parent / Path(binary).name
    assert here.exists(), f"{here}: the venv has no {Path(binary).name}"
    text = (SYSTEMD / unit).read_text()
    assert text.count(f"ExecStart={binary} ") == 1
    (tmp_path / unit).write_text(text.replace(f"ExecStart={binary} ", f"ExecStart={here} "))
    result = subprocess.run([analyze, "verify", str(tmp_path / unit)], capture_output=True, text=True, timeout=60)
    # systemd-analyze exits 0 on a value it cannot parse and only says so: any output is a finding.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
