"""The runners a worker runs attempts with, by the one name that flags, the config, job specs and the
worker's runner table all use, and the API's enum of each."""

from __future__ import annotations

from sparkyard.v1 import sparkyard_pb2 as pb

RUNNERS = {"submit": pb.RUNNER_SUBMIT, "session": pb.RUNNER_SESSION, "connect": pb.RUNNER_CONNECT}
RUNNER_NAMES = tuple(RUNNERS)
# A worker's runner for jobs that name none: warm drivers start a task in milliseconds, not a JVM's seconds.
DEFAULT_RUNNER = "session"

_NAMES = {number: name for name, number in RUNNERS.items()}


def runner_name(number: int) -> str:
    """The name of an API runner enum value; '' for RUNNER_UNSPECIFIED (the worker's default applies)."""
    return _NAMES.get(number, "")
