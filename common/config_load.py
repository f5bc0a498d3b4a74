"""How a config is loaded: its sources (flags, the environment, the TOML file's table) and every bad value
as one line naming where it came from.

Apart from :mod:`sparkyard.config` (which says what the settings are) because the sources are
pydantic-settings machinery: the environment and table a :func:`load` call was given reach its sources
through a context variable.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from typing import Any, Mapping, TypeVar

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from sparkyard.config_source import (
    ConfigError,
    bad_value,
    config_path,
    read_table,
    source_of,
    sparkyard_environ,
    unknown_key,
    wrong_type,
)

C = TypeVar("C", bound="Settings")


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
        return dict(given.environ) if given else {}


class _FileTable(PydanticBaseSettingsSource):
    """The process's table of the TOML config file."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        given = _GIVEN.get()
        return (given.table.get(field_name) if given else None), field_name, False

    def __call__(self) -> dict[str, Any]:
        given = _GIVEN.get()
        return dict(given.table) if given else {}


class Settings(BaseSettings):
    """A process's settings, read by :func:`load` from flags, environment and the file's table, in that order."""

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


def load(cls: type[C], section: str, *, config_file: str | None = None,
         environ: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None) -> C:
    """Build ``cls`` from its defaults, then ``[section]`` of the TOML file, env vars, then overrides.

    ``overrides`` holds command-line flags; entries whose value is None (flag not given) are ignored.
    """
    env = os.environ if environ is None else environ
    path = config_path(config_file, env)
    table = read_table(path, section)
    flags = {k: v for k, v in (overrides or {}).items() if v is not None}
    token = _GIVEN.set(_Given(sparkyard_environ(env), path, table))
    try:
        cfg = cls(**flags)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, cls, section, path, env, flags)) from None
    finally:
        _GIVEN.reset(token)
    return cfg.validate()


def _explain(exc: ValidationError, cls: type[C], section: str, path: str | None, env: Mapping[str, str],
             flags: Mapping[str, Any]) -> str:
    """The first error as one line naming its source: the flag, the variable or the file's key."""
    error = exc.errors()[0]
    name = str(error["loc"][0]) if error["loc"] else ""
    if error["type"] == "extra_forbidden":
        return unknown_key(path, section, name)
    where, value = source_of(name, section, path, env, flags, error.get("input"))
    if error["type"] == "value_error":
        return bad_value(where, str(error.get("ctx", {}).get("error", error["msg"])))
    return wrong_type(where, value, str(error["type"]).split("_", 1)[0])
