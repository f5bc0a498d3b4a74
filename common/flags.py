"""The command-line flags of a settings class (common/config.py), generated from its fields: a setting's
flag, environment variable, config-file key, default and help text all come from its one definition.

A field with a ``description`` is a flag named after the field without its unit (:func:`flag_of`:
``lease_s`` → ``--lease``); a field without one is set in the config file or the environment only. The
help is the description, then the default in the form the flag takes (``15s``, ``64m``) and the
environment variable. A field's ``json_schema_extra`` may add ``metavar``, ``choices`` and ``repeat`` (the
flag may be given again; the values arrive as a list). Flags the user did not give are None, so that
:func:`sparkyard.config.load` lets the file and the environment decide.

Flags can also be kept as plain rows (:data:`Row`, :func:`add_rows`): the CLI parses its command line from
rows generated from these definitions (common/cli/flag_table.py), so that parsing and ``--help`` import
neither pydantic nor grpc. This module imports pydantic only for its type hints, for the same reason.
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING, Any

from sparkyard.timeutil import format_duration

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

# One flag as data: (flag, in the mutually exclusive group?, add_argument's keyword arguments). An action
# "once" is :class:`Once`; every other value is as add_argument takes it.
Row = tuple[str, bool, dict[str, Any]]

# Setting name suffix → unit the flag leaves off; a bare number in a flag counts in that unit.
_UNIT = re.compile(r"_(s|bytes|mb)$")
_SIZES = (("g", 30), ("m", 20), ("k", 10))


def flag_of(name: str) -> str:
    """The command-line flag of a setting: the flags leave the unit off (--lease, --max-bundle, --task-memory)."""
    stem = _UNIT.sub("", name)
    return "--" + ("label" if stem == "labels" else stem).replace("_", "-")


def env_of(name: str) -> str:
    return f"SPARKYARD_{name.upper()}"


def _size_text(n: int) -> str:
    for unit, shift in _SIZES:
        if n and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _default_text(name: str, default: Any) -> str:
    """The default as a user would type it; '' when it is "none" (the description says what that means)."""
    if default is False or default == "" or default == {}:
        return ""
    if name.endswith("_s"):
        return format_duration(default)
    if name.endswith("_bytes"):
        return _size_text(default)
    return str(default)


def flag_help(cls: type[BaseModel], name: str) -> str:
    field = cls.model_fields[name]
    default = _default_text(name, field.default)
    shown = f"default {default}; " if default else ""
    return f"{field.description} ({shown}or {env_of(name)})"


def _metavar(name: str, field: FieldInfo) -> str:
    if name.endswith("_s"):
        return "DURATION"
    if name.endswith(("_bytes", "_mb")):
        return "SIZE"
    return "N" if field.annotation is int else flag_of(name)[2:].upper().replace("-", "_")


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def add_flags(parser: argparse.ArgumentParser, cls: type[BaseModel]) -> None:
    """One flag for each described field of ``cls``, storing the given text (or texts) under the field's name."""
    for name, field in cls.model_fields.items():
        if not field.description:
            continue
        extra = _extra(field)
        options: dict[str, Any] = {"dest": name, "default": None, "help": flag_help(cls, name)}
        if field.annotation is bool:
            options["action"] = "store_true"
        elif "choices" not in extra:
            options["metavar"] = _metavar(name, field)
        if extra.get("repeat"):
            options["action"] = "append"
        elif field.annotation is int and not field.metadata:
            options["type"] = int
        for key in ("metavar", "choices"):
            if key in extra:
                options[key] = extra[key]
        parser.add_argument(flag_of(name), **options)


class Once(argparse.Action):
    """A one-value option given twice is a mistake, not "the last one wins": ``--after P1 --after P2`` would
    otherwise keep P2 alone, and the child would run although P1 never did."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        before = getattr(namespace, self.dest, None)
        if before is not None:
            parser.error(f"{option_string} given twice ({before!r} and {values!r}): it takes one value")
        setattr(namespace, self.dest, values)


def add_rows(parser: argparse.ArgumentParser, rows: tuple[Row, ...] | list[Row]) -> None:
    """The flags of ``rows``; those marked exclusive go in one mutually exclusive group."""
    exclusive = parser.add_mutually_exclusive_group()
    for flag, in_group, options in rows:
        target = exclusive if in_group else parser
        target.add_argument(flag, **({**options, "action": Once} if options.get("action") == "once" else options))
