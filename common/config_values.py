"""How a setting's value is read, as the settings of :mod:`sparkyard.config` declare it: a ``*_s`` setting takes
seconds or a duration (``15s``, ``500ms``, ``1h30m``), a ``*_bytes`` setting bytes or a size (``64m``, ``2g``), a
``*_mb`` one MiB or a size, labels and Spark conf ``k=v,k2=v2``, repeated flags or a TOML table.
deploy/gen_cli_table.py tells the client's kinds of setting by these parsers."""

from __future__ import annotations

from typing import Annotated, Any, Mapping

from pydantic import BeforeValidator
from pydantic_settings import NoDecode

from sparkyard.spec import parse_conf
from sparkyard.timeutil import parse_duration, parse_size


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
