"""Sparkyard — a distributed scheduler for PySpark jobs.

The public surface is small on purpose: :class:`Client` (submit, inspect, wait, cancel), :class:`Pipeline` (a
graph of steps defined as code, ``sparkyard apply``), the errors they
raise, and the generated API under ``sparkyard.v1``. Everything else is internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "Client",
    "FailedPrecondition",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "Pipeline",
    "SparkyardError",
    "Unauthenticated",
    "Unavailable",
    "__version__",
]

if TYPE_CHECKING:
    from sparkyard.client import Client
    from sparkyard.pipeline import Pipeline
    from sparkyard.errors import (
        FailedPrecondition,
        InvalidArgument,
        NotFound,
        PermissionDenied,
        SparkyardError,
        Unauthenticated,
        Unavailable,
    )


def __getattr__(name: str) -> Any:
    # Imported lazily: the worker's driver bootstrap imports sparkyard.* without needing grpc.
    if name == "Client":
        from sparkyard.client import Client

        return Client
    if name == "Pipeline":
        from sparkyard.pipeline import Pipeline

        return Pipeline
    if name in __all__:
        from sparkyard import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'sparkyard' has no attribute {name!r}")
