"""The tracer tests/bench/bench_shape.py puts in every Python process of a traced local cluster.

Python imports ``sitecustomize`` at start-up from the first directory on ``sys.path`` that has one, so
putting this directory first on PYTHONPATH reaches every process started with that environment: the CLI,
``sparkyard local``, the master, the worker, the worker's drivers and their PySpark Python workers. It
does nothing unless SHAPE_TRACE_DIR is set (the benchmark leaves it out of its own polling commands).

For every function (and module body) of a module named ``sparkyard`` or ``sparkyard.*`` that starts or
resumes, it records the wall-clock 50 ms bucket (``int(time.time() * 20)``), once per bucket and module,
separately for module bodies (imports) and functions (calls). The record goes to
``SHAPE_TRACE_DIR/trace-<pid>.json`` every second and at exit, so a process that ends with ``os._exit``
(a forked PySpark worker) still leaves what it recorded up to its last second. A process that makes
redis-py script objects (the master) also writes their SHA and source, which name the Lua scripts seen
by the benchmark's Redis MONITOR: redis-py's script classes are wrapped as they are imported (a scan of
the heap would miss them: the master freezes its start-up objects out of the collector's sight).

One work-around: on Python 3.11, ``PyThreadState_SetAsyncExc(thread, NULL)`` (the driver's way to drop
a pending cancel once an attempt's code is over) sets the interpreter's "async exception pending" flag
although no thread has one, and nothing clears it; with a profile function installed, every thread then
loops forever at its next function entry (the tracing path re-checks the flag and re-dispatches). So the
tracer wraps that ctypes function: after a NULL call it raises one exception of its own into the calling
thread and catches it, which clears the flag as a delivered async exception does.
"""

from __future__ import annotations

import os

if os.environ.get("SHAPE_TRACE_DIR"):
    import atexit
    import importlib.abc
    import importlib.util
    import json
    import sys
    import threading
    import time
    from types import CodeType, FrameType
    from typing import Any

    _OUT = os.environ["SHAPE_TRACE_DIR"]
    _MISS = object()
    _names: dict[CodeType, Any] = {}  # code object → (module name, is module body) or None
    _seen: dict[tuple[str, bool], set[int]] = {}
    _last: dict[tuple[str, bool], int] = {}
    _now = time.time

    def _module_of(frame: FrameType) -> tuple[str, bool] | None:
        g = frame.f_globals
        name = g.get("__name__") or ""
        if name == "__main__":  # python -m sparkyard.master.main: the module's real name is its spec's
            spec = g.get("__spec__")
            name = spec.name if spec is not None else name
        if name != "sparkyard" and not name.startswith("sparkyard."):
            return None
        return name, frame.f_code.co_name == "<module>"

    def _profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        hit = _names.get(code, _MISS)
        if hit is _MISS:
            hit = _names[code] = _module_of(frame)
        if hit is None:
            return
        bucket = int(_now() * 20)
        if _last.get(hit) != bucket:
            _last[hit] = bucket
            _seen.setdefault(hit, set()).add(bucket)

    def _cmdline() -> list[str]:
        try:
            with open(f"/proc/{os.getpid()}/cmdline", "rb") as f:
                return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
        except OSError:
            return list(sys.argv)

    _scripts: dict[str, str] = {}

    def _record_scripts(cls: type) -> None:
        init = cls.__init__  # type: ignore[misc]

        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            text = self.script
            _scripts[str(self.sha)] = text.decode(errors="replace") if isinstance(text, bytes) else str(text)

        cls.__init__ = __init__  # type: ignore[misc]

    class _ScriptsFinder(importlib.abc.MetaPathFinder):
        """Wraps redis-py's Script and AsyncScript when redis.commands.core is first imported."""

        def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
            if name != "redis.commands.core":
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            if spec is None or spec.loader is None:
                return spec
            exec_module = spec.loader.exec_module

            def exec_and_wrap(module: Any) -> None:
                exec_module(module)
                for cls in (getattr(module, "Script", None), getattr(module, "AsyncScript", None)):
                    if cls is not None:
                        _record_scripts(cls)

            spec.loader.exec_module = exec_and_wrap  # type: ignore[method-assign]
            return spec

    def _dump(final: bool = False) -> None:
        modules: dict[str, dict[str, Any]] = {}
        for (name, body), buckets in list(_seen.items()):
            entry = modules.setdefault(name, {"file": getattr(sys.modules.get(name), "__file__", None) or "",
                                              "imported": [], "called": []})
            entry["imported" if body else "called"] = sorted(buckets.copy())
        record = {"pid": os.getpid(), "ppid": os.getppid(), "cmdline": _cmdline(), "final": final,
                  "modules": modules, "scripts": _scripts}
        path = os.path.join(_OUT, f"trace-{os.getpid()}.json")
        tmp = f"{path}.{threading.get_ident()}.tmp"
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)

    def _flush_every_second() -> None:
        while True:
            time.sleep(1.0)
            try:
                _dump()
            except Exception:  # a full disk or a vanished dir must not disturb the traced process
                return

    def _start_flusher() -> None:
        threading.Thread(target=_flush_every_second, name="shape-trace-flush", daemon=True).start()

    def _after_fork() -> None:
        _seen.clear()
        _last.clear()
        _start_flusher()

    import ctypes

    class _Unstick(BaseException):
        """Raised into the calling thread only to clear the interpreter's stale async-exception flag."""

    _set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc

    def _set_async_exc_clearing(ident: Any, exc: Any) -> int:
        done = int(_set_async_exc(ident, exc))
        if exc is None:
            try:
                _set_async_exc(ctypes.c_ulong(threading.get_ident()), ctypes.py_object(_Unstick))
                while True:  # delivered at the next check of the flag, at the latest the next backward jump
                    pass
            except _Unstick:
                pass
        return done

    ctypes.pythonapi.PyThreadState_SetAsyncExc = _set_async_exc_clearing  # type: ignore[attr-defined]
    sys.meta_path.insert(0, _ScriptsFinder())
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    os.register_at_fork(after_in_child=_after_fork)
    atexit.register(_dump, True)
    _start_flusher()
