"""Loading and calling a task's entrypoint — the same code under both runners.

* ``/path/job.py:func`` — the file is loaded as a module once per version of the file (a changed file is
  loaded again by the next attempt, without restarting the worker; under the session runner attempts of
  one version share the module's globals) with its directory on ``sys.path`` (so it can import its
  siblings); ``func(spark, ctx)`` is called.
* ``/path/job.py`` — a program written for ``spark-submit``: run as ``__main__`` with
  ``sys.argv = [script, *args]`` (and ``spark`` and ``ctx`` in its globals); ``sys.exit(0)`` or the end of
  the script is success, any other exit code a failure (:class:`ScriptExit`).
* ``package.module:func`` — imported normally (cached, like any import).

The return value is the task's result: it must be JSON-serialisable and at most ``max_bytes`` encoded.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import json
import os
import runpy
import socket
import sys
from stat import S_ISREG
from pathlib import Path
from typing import Any, Callable

from sparkyard.spec import Entrypoint, SpecError, parse_entrypoint
from sparkyard.worker.context import SKIP_KEY, StepSkipped, TaskContext


class EntrypointError(Exception):
    """The entrypoint cannot be loaded on this worker (file missing, no such function, import error)."""


class ScriptExit(Exception):
    """A plain script ended with a non-zero exit code (``sys.exit(3)``, ``sys.exit("message")``)."""

    def __init__(self, script: str, code: object) -> None:
        self.exit_code = code if isinstance(code, int) else 1
        detail = f": {code}" if not isinstance(code, int) else ""
        super().__init__(f"{Path(script).name} exited with exit code {self.exit_code}{detail}")


class LazySpark:
    """The ``spark`` global of a plain script: built on first use, so a script that makes its own
    ``SparkContext(appName=…)`` is not pre-empted by one made for it."""

    __slots__ = ("_factory", "_value")

    def __init__(self, factory: Callable[[], Any]) -> None:
        self._factory = factory
        self._value: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._value is None:
            self._value = self._factory()
        return getattr(self._value, name)


class ResultError(Exception):
    """The task's return value cannot be stored (not JSON, too large)."""


def _load_file_function(path: str, func: str, mtime_ns: int, size: int) -> Callable[..., Any]:
    module = _load_file_module(path, mtime_ns, size)
    target = getattr(module, func, None)
    if not callable(target):
        raise EntrypointError(f"{path} has no function {func!r}")
    return target


@functools.lru_cache(maxsize=256)
def _load_file_module(path_text: str, mtime_ns: int, size: int) -> Any:
    """The module of one version of a task file (cached: reloading per attempt costs a compile)."""
    path = Path(path_text)
    name = "sparkyard_task_" + hashlib.blake2b(f"{path}:{mtime_ns}".encode(), digest_size=6).hexdigest()
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise EntrypointError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=1024)
def _parsed(entrypoint: str) -> Entrypoint:
    """Entrypoints repeat across attempts: parse each text once (a bad one raises every time)."""
    return parse_entrypoint(entrypoint)


def invoke(entrypoint: str, spark: Any, ctx: TaskContext) -> Any:
    """Run the task's code and return what it returned (None for a plain script; for a task that called
    ``ctx.skip(reason)``, ``{"$skip": reason}``)."""
    try:
        return _invoke(entrypoint, spark, ctx)
    except StepSkipped as exc:
        ctx.logger.info("task skipped: %s", exc)
        return {SKIP_KEY: str(exc)}


def _invoke(entrypoint: str, spark: Any, ctx: TaskContext) -> Any:
    try:
        entry = _parsed(entrypoint)
    except SpecError as exc:
        raise EntrypointError(str(exc)) from None
    if entry.is_file:
        try:
            stat = os.stat(entry.path)  # every attempt: a changed file is loaded again
        except OSError:
            stat = None
        if stat is None or not S_ISREG(stat.st_mode):
            raise EntrypointError(f"entrypoint file not found on worker host {socket.gethostname()}: {entry.path}")
        if not entry.func:
            run_script(entry.path, spark, ctx)
            return None
        return _load_file_function(entry.path, entry.func, stat.st_mtime_ns, stat.st_size)(spark, ctx)
    try:
        module = importlib.import_module(entry.module)
    except ImportError as exc:
        raise EntrypointError(f"cannot import {entry.module} on worker host {socket.gethostname()}: {exc}") from None
    target = getattr(module, entry.func, None)
    if not callable(target):
        raise EntrypointError(f"module {entry.module} has no function {entry.func!r}")
    return target(spark, ctx)


def run_script(path: str, spark: Any, ctx: TaskContext) -> None:
    """Run a plain script as ``spark-submit`` would: ``__main__``, ``sys.argv = [script, *args]``."""
    saved_argv = sys.argv
    sys.argv = [path, *ctx.args]
    try:
        runpy.run_path(path, init_globals={"spark": spark, "ctx": ctx}, run_name="__main__")
    except SystemExit as exc:  # a script's sys.exit(0) is success, any other code a failure
        if exc.code not in (None, 0):
            raise ScriptExit(path, exc.code) from None
    finally:
        sys.argv = saved_argv


def encode_result(value: Any, max_bytes: int) -> str:
    """The result as JSON text, or ResultError naming what is wrong."""
    if value is None:
        return ""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ResultError(f"the task returned a {type(value).__name__}, which is not JSON-serialisable: {exc}") from None
    if len(text.encode()) > max_bytes:
        raise ResultError(f"the task's result is {len(text.encode())} bytes, over the {max_bytes}-byte limit "
                          "(write large outputs to storage and return their location)")
    return text
