"""Where a setting comes from, read without pydantic: the TOML file's table, the files a setting names (a
certificate, a secret), and a bad value said as one line naming its source (the flag, the variable or the
file's key).

Apart from :mod:`sparkyard.config_load` (pydantic-settings' layering for masters and workers) because the
client reads its settings without pydantic (:mod:`sparkyard.client_settings`: the CLI then starts without
importing it), and both must say the same thing about the same bad value.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from sparkyard.flags import env_of, flag_of

# A value of the wrong type, in words: the key is the start of pydantic's error type ("int_parsing": "int").
_KINDS = {"int": "whole number", "float": "number", "bool": "boolean (true or false)"}


class ConfigError(ValueError):
    """A config value is malformed; the message names the source and the field."""


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


def config_path(config_file: str | None, environ: Mapping[str, str]) -> str | None:
    """The TOML file a process reads: the one given, else ``SPARKYARD_CONFIG``'s."""
    return config_file or environ.get("SPARKYARD_CONFIG")


def read_table(path: str | None, section: str) -> Mapping[str, Any]:
    """``[section]`` of the TOML file at ``path`` (none: empty)."""
    if not path:
        return {}
    import tomllib  # only when a file is given

    try:
        table = tomllib.loads(Path(path).read_text()).get(section, {})
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(f"config file {path}: {section} must be a table ([{section}])")
    return table


def sparkyard_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``SPARKYARD_*`` variables of ``environ`` (names in any case), keyed by their name in lower case."""
    return {k.lower(): v for k, v in environ.items() if k.upper().startswith("SPARKYARD_")}


def unknown_key(path: str | None, section: str, name: str) -> str:
    return f"config file {path}: [{section}] has no setting {name!r}"


def source_of(name: str, section: str, path: str | None, environ: Mapping[str, str],
              flags: Mapping[str, Any], value: Any) -> tuple[str, Any]:
    """Where the value of setting ``name`` came from (its flag, its variable, or the file's key), and the
    value as given there (``value``: the file's, when neither flag nor variable gave one)."""
    var = env_of(name)
    if name in flags:
        return flag_of(name), flags[name]
    given = {k.upper(): (k, v) for k, v in environ.items()}
    if var in given:
        return given[var]
    return f"{path} [{section}] {name}", value


def bad_value(where: str, reason: str) -> str:
    """A value its parser refused: the reason without the parser's own prefix (the source names the setting)."""
    for prefix in ("duration: ", "size: ", "pairs: "):
        reason = reason.removeprefix(prefix)
    return f"{where}: {reason}"


def wrong_type(where: str, value: Any, kind: str) -> str:
    """A value of the wrong type (``kind``: "int", "float", "bool", "string"…)."""
    return f"{where}: {value!r} is not a valid {_KINDS.get(kind, kind)}"


def check_cert_and_key(cert: str, key: str, prefix: str = "tls") -> None:
    if bool(cert) != bool(key):
        raise ConfigError(f"{prefix}_cert and {prefix}_key go together ({flag_of(prefix + '_cert')}, "
                          f"{flag_of(prefix + '_key')}): give both or neither")


def check_tls_client(tls_ca: str, tls_cert: str, tls_key: str) -> None:
    """A client's or worker's TLS settings: a certificate of its own goes with its key and a CA."""
    check_cert_and_key(tls_cert, tls_key)
    if tls_cert and not tls_ca:
        raise ConfigError("tls_cert needs tls_ca (--tls-ca): the CA that signed the master's certificate")
