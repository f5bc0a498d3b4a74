"""The client's settings, loaded without pydantic: defaults < the TOML file's ``[client]`` table <
``SPARKYARD_*`` variables < the values given (flags, or the Python client's arguments).

Their one definition is :class:`sparkyard.config.ClientConfig` (names, defaults, help, checks); what the
loader needs of it is generated as plain data into :mod:`sparkyard.client_fields` (deploy/gen_cli_table.py;
a unit test fails when it is stale). Why not load ``ClientConfig`` itself: importing pydantic-settings and
building every process's models took ~0.15 s of each CLI command's ~0.35 s (docs/benchmarks.md).
tests/unit/test_client_settings.py loads the same inputs both ways and requires the same values and the
same error lines.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

from sparkyard.client_fields import FIELDS, SECRETS
from sparkyard.config_source import (
    ConfigError,
    bad_value,
    check_tls_client,
    config_path,
    read_secret,
    read_table,
    source_of,
    sparkyard_environ,
    unknown_key,
    wrong_type,
)
from sparkyard.flags import env_of
from sparkyard.timeutil import parse_duration

SECTION = "client"


class ClientSettings:
    """The loaded values, read as attributes (``settings.master``, ``settings.call_timeout_s``); frozen."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"client settings are frozen ({name})")

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def __repr__(self) -> str:
        shown = {k: ("***" if k in SECRETS and v else v) for k, v in self._values.items()}
        return f"ClientSettings({shown})"


def _value(kind: str, value: Any) -> Any:
    """``value`` as the field's kind takes it (pydantic's lax mode, which ClientConfig's fields use); a
    ValueError (the parser's reason) or TypeError (the kind it is not) when it is not one."""
    if kind == "str":
        if isinstance(value, str):
            return value
        if isinstance(value, bytes):
            try:
                return value.decode()
            except UnicodeDecodeError:
                raise TypeError("string") from None
        raise TypeError("string")
    if kind == "seconds":
        if isinstance(value, str):
            return parse_duration(value)
        if isinstance(value, (int, float, bytes)):
            try:
                return float(value)
            except ValueError:
                raise TypeError("float") from None
        raise TypeError("float")
    raise AssertionError(f"no loader for the kind {kind!r}: deploy/gen_cli_table.py refuses it")


def load_client(*, config_file: str | None = None, environ: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> ClientSettings:
    """The client's settings, as ``sparkyard.config.load(ClientConfig, "client", …)`` would load them;
    ``overrides`` left None are not given."""
    env = os.environ if environ is None else environ
    path = config_path(config_file, env)
    table = read_table(path, SECTION)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    variables = sparkyard_environ(env)
    values: dict[str, Any] = {}
    for name, kind, default in FIELDS:
        var = env_of(name).lower()
        if name in flags:
            given = flags[name]
        elif var in variables:
            given = variables[var]
        elif name in table:
            given = table[name]
        else:
            values[name] = default
            continue
        try:
            values[name] = _value(kind, given)
        except ValueError as exc:
            raise ConfigError(bad_value(source_of(name, SECTION, path, env, flags, given)[0], str(exc))) from None
        except TypeError as exc:
            where, shown = source_of(name, SECTION, path, env, flags, given)
            raise ConfigError(wrong_type(where, shown, str(exc))) from None
    names = {name for name, _, _ in FIELDS}
    for key in table:
        if key not in names:
            raise ConfigError(unknown_key(path, SECTION, key))
    for key in flags:
        if key not in names:
            raise TypeError(f"no client setting {key!r}")
    check_tls_client(values["tls_ca"], values["tls_cert"], values["tls_key"])
    for name in SECRETS:
        if values[f"{name}_file"]:
            values[name] = read_secret(values[f"{name}_file"], name)
    return ClientSettings(values)
