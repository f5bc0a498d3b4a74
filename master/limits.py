"""The master's size limits on what a job may carry (docs/limits.md): its arguments, environment, Spark
conf and inputs per run. Each is a setting of :class:`MasterConfig` with its default and reason there;
over one a submit is refused with RESOURCE_EXHAUSTED naming the field, the limit and the flag that raises
it. The whole request's size is checked before it is decoded (:mod:`sparkyard.master.request_guard`), a
bundle's when it is uploaded (:mod:`sparkyard.master.bundles`).
"""

from __future__ import annotations

from typing import Iterable

from sparkyard.config import MasterConfig
from sparkyard.flags import flag_of
from sparkyard.errors import ResourceExhausted
from sparkyard.timeutil import format_size
from sparkyard.v1 import sparkyard_pb2 as pb


def _total(texts: Iterable[str]) -> int:
    return sum(len(text.encode()) for text in texts)


def check_sizes(spec: pb.JobSpec, cfg: MasterConfig) -> None:
    """Raise :class:`ResourceExhausted` for the first part of ``spec`` over its limit."""
    byte_limits = (
        ("args", _total(spec.args), "max_args_bytes", cfg.max_args_bytes),
        ("env", _total([*spec.env.keys(), *spec.env.values()]), "max_env_bytes", cfg.max_env_bytes),
        ("conf", _total([*spec.conf.keys(), *spec.conf.values()]), "max_conf_bytes", cfg.max_conf_bytes),
    )
    for field, size, setting, limit in byte_limits:
        if size > limit:
            raise ResourceExhausted(f"{field}: {format_size(size)} in all is over the master's limit of "
                                    f"{format_size(limit)} ({flag_of(setting)})")
    count = len(spec.split.inputs)
    if count > cfg.max_inputs:
        raise ResourceExhausted(f"split.inputs: {count:,} inputs are over the master's limit of "
                                f"{cfg.max_inputs:,} per run ({flag_of('max_inputs')})")
