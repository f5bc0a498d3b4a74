"""What a program's Python process looks like under spark-submit, and what a warm driver puts back after it.

Logging. A fresh interpreter's root logger has no handler and level WARNING, so a program's own
``logging.basicConfig(level=…, format=…)`` takes effect. Sparkyard's processes (a warm driver, the submit
runner's bootstrap) therefore never configure the root logger: their own lines, and ``ctx.logger``'s
(``sparkyard.task``), go through a handler on the ``sparkyard`` logger (:func:`own_logging`). A warm driver
takes a :class:`LoggingState` before each attempt and restores it afterwards: levels, handlers, filters,
``propagate`` and ``disabled`` of the root and of every logger, ``logging.disable``, the logger class and
record factory; loggers the attempt created go back to a new logger's defaults, and the handlers it added
are closed (a ``FileHandler`` flushes and lets its file go).

Threads and exit hooks. When a program's main code ends, Python waits for its non-daemon threads, then
runs the functions it registered with ``atexit`` (last first; one that raises is reported and the next
runs), before the process (and spark-submit's JVM) exits; daemon threads die with it. An attempt's end
does the same wait (:func:`join_program_threads`) and runs the attempt's own ``atexit`` functions
(:class:`ExitHooks`), which would otherwise wait for the driver's exit. A daemon thread the attempt leaves running cannot be stopped in Python: it
would go on into the next attempt with the Spark local properties (job group, pool) of its JVM thread and
whatever jobs it starts, so :func:`left_running` names it and the session runner retires that driver.

Modules. The modules an attempt imported from its own code are forgotten after it (:class:`ImportedModules`),
so the next attempt loads its own version; libraries it imported from site-packages stay loaded (C
extensions cannot be loaded twice).

Process settings. A program may change what its whole process does — signal handlers, the signal mask and
interval timers (``signal.alarm``), warnings filters, the recursion limit, the default socket timeout, the
umask, ``sys.excepthook`` and ``threading.excepthook``, ``sys.stdout``/``sys.stderr`` objects, the switch
interval, the locale, the ``random`` module's seed. Its process ends with it under spark-submit; in a warm
driver they would hold in every later attempt (an alarm would even fire in one), so :class:`ProcessState`
puts them back: a pending timer is cancelled, and ``random`` is seeded afresh, as a new interpreter is.
"""

from __future__ import annotations

import _signal  # signal's C module: see _handlers
import atexit
import locale
import logging
import os
import random
import signal
import socket
import sys
import threading
import traceback
import warnings
from typing import Any, Callable, Iterable

# The format of Sparkyard's own lines in a driver's and an attempt's log.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
# How often a wait for the program's threads looks whether the attempt was cancelled.
JOIN_POLL_S = 0.1


def own_logging() -> None:
    """Sparkyard's lines (``ctx.logger`` included) at INFO to stderr, leaving the root logger as a fresh
    interpreter has it."""
    logger = logging.getLogger("sparkyard")
    handler = logging.StreamHandler(sys.stderr)  # fd 2: the attempt's log while an attempt runs
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def _state(logger: logging.Logger) -> tuple[Any, ...]:
    return logger.level, list(logger.handlers), list(logger.filters), logger.propagate, logger.disabled


class LoggingState:
    """The logging configuration of the process when taken, and the means to return to it."""

    def __init__(self) -> None:
        self._loggers = {name: _state(logger) for name, logger in _loggers().items()}
        self._disable = logging.root.manager.disable
        self._logger_class = logging.getLoggerClass()
        self._factory = logging.getLogRecordFactory()

    def restore(self) -> None:
        known = {id(h) for _, handlers, *_ in self._loggers.values() for h in handlers}
        default: tuple[Any, ...] = (logging.NOTSET, [], [], True, False)
        for name, logger in _loggers().items():
            for handler in logger.handlers:
                if id(handler) not in known:
                    _close(handler)
            level, handlers, filters, propagate, disabled = self._loggers.get(name, default)
            logger.level = level  # not setLevel: it empties every logger's cache, per logger O(loggers²)
            logger.handlers[:] = handlers
            logger.filters[:] = filters
            logger.propagate, logger.disabled = propagate, disabled
        logging.disable(self._disable)  # and empties every logger's cache once (levels may have changed above,
        # or a program set a level directly after its loggers had cached what it enabled)
        logging.setLoggerClass(self._logger_class)
        logging.setLogRecordFactory(self._factory)


def _loggers() -> dict[str, logging.Logger]:
    """Every logger of the process by name, the root as ''."""
    found = {name: logger for name, logger in logging.root.manager.loggerDict.items()
             if isinstance(logger, logging.Logger)}
    found[""] = logging.root
    return found


def _close(handler: logging.Handler) -> None:
    try:
        handler.close()
    except Exception:
        logging.getLogger(__name__).debug("closing a handler the attempt added failed", exc_info=True)


# Threads that run only what they are handed, never a program's own code on their own: py4j's and
# PySpark's (a connection for the JVM's calls back into Python: foreachBatch, listeners; the Spark Connect
# client's release pool) and the workers of a thread pool, idle once the program has stopped handing them
# work (Python ends a ThreadPoolExecutor's at exit by shutting every executor down, which a warm driver
# cannot do for the next attempt: they go when the program's executor is collected).
POOL_MODULES = ("py4j", "pyspark", "grpc", "concurrent.futures", "multiprocessing")


def _is_pool(thread: threading.Thread) -> bool:
    target = getattr(thread, "_target", None)
    return str(getattr(target, "__module__", "") or type(thread).__module__).startswith(POOL_MODULES)


def program_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    """The threads started since ``before`` that still run, the pools' workers left out."""
    return [t for t in threading.enumerate() if t not in before and t.is_alive() and not _is_pool(t)]


def join_program_threads(before: set[threading.Thread]) -> None:
    """Wait for the program's non-daemon threads, as Python does when a program's main code ends (in short
    waits, so that a cancel raised in the waiting thread is seen)."""
    while waiting := [t for t in program_threads(before) if not t.daemon]:
        waiting[0].join(JOIN_POLL_S)


def left_running(before: set[threading.Thread]) -> str:
    """Why a process must run no other attempt because of threads this one left running ('' if none)."""
    names = sorted(t.name for t in program_threads(before))
    if not names:
        return ""
    return f"the program left threads running ({', '.join(names)}), which would go on in the next attempt"


class ChildProcesses:
    """The processes the main thread started, and those an attempt left running: they could go on writing to the
    log file the next attempt's range is of (worker/logs.py). Read from Linux's ``children`` list of the thread,
    kept open and read again each time (a tenth of opening it); none without /proc."""

    def __init__(self) -> None:
        try:
            self._fd = os.open(f"/proc/self/task/{threading.main_thread().native_id}/children", os.O_RDONLY)
        except OSError:
            self._fd = -1
        self._before: frozenset[int] = frozenset()  # the process's own (a driver's JVM): mark()

    def mark(self) -> None:
        """The children there are now are the process's own."""
        self._before = self.listed()

    def listed(self) -> frozenset[int]:
        """The children started and not waited for."""
        if self._fd < 0:
            return frozenset()
        try:
            return frozenset(int(pid) for pid in os.pread(self._fd, 1 << 16, 0).split())
        except OSError:
            return frozenset()

    def left_running(self) -> str:
        """Why a process must run no other attempt because of child processes this one left running ('' if none)."""
        left = sorted(pid for pid in self.listed() - self._before if not _ended(pid))
        if not left:
            return ""
        return f"the program left child processes running (pids {', '.join(map(str, left))})"


def _ended(pid: int) -> bool:
    """A child that exited and was not waited for (a zombie) writes nothing more."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[:1] == [b"Z"]
    except OSError:
        return True


class ExitHooks:
    """The ``atexit`` functions a program registers while its attempt runs, kept for the attempt's end
    instead of the process's (``atexit.register``/``unregister`` are replaced meanwhile)."""

    def __init__(self) -> None:
        self._hooks: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self._saved = atexit.register, atexit.unregister

    def install(self) -> None:
        def register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
            self._hooks.append((func, args, kwargs))
            return func

        def unregister(func: Callable[..., Any]) -> None:
            self._hooks[:] = [hook for hook in self._hooks if hook[0] != func]

        atexit.register, atexit.unregister = register, unregister  # type: ignore[assignment]

    def uninstall(self) -> None:
        atexit.register, atexit.unregister = self._saved

    def run(self) -> None:
        """Run the program's hooks as Python does at exit: last registered first, each one's exception
        printed (to the attempt's log) without stopping the others."""
        while self._hooks:
            func, args, kwargs = self._hooks.pop()
            try:
                func(*args, **kwargs)
            except Exception:
                print("Exception ignored in atexit callback", func, file=sys.stderr)
                traceback.print_exc()


# The signals whose handlers a process may set (as plain numbers: Signals members are slow to make), and the
# interval timers a program may leave armed.
SIGNALS = tuple(sorted(int(s) for s in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}))
TIMERS = (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)


def _handlers() -> dict[int, Any]:
    """The handler of every signal that has one Python can put back (None: set outside Python).

    Read through ``_signal``, the C module under ``signal``: ``signal.getsignal`` makes a ``Handlers`` enum
    member of every value (raising and catching a ValueError for each Python handler), which cost ~40 µs
    of every attempt for ~60 signals against ~2 µs (SIG_DFL and SIG_IGN come as the ints 0 and 1, which
    ``signal.signal`` takes back as they are)."""
    found: dict[int, Any] = {}
    for signum in SIGNALS:
        try:
            handler = _signal.getsignal(signum)
        except (OSError, ValueError):
            continue
        if handler is not None:
            found[signum] = handler
    return found


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class ProcessState:
    """Process-wide Python settings when taken (on the main thread), and the means to return to them (see the
    module docstring). A warm driver takes them once, before its first attempt, and returns to them after
    each: what it returns to is what the next attempt starts with."""

    def __init__(self) -> None:
        self._handlers = _handlers()
        self._mask = _signal.pthread_sigmask(signal.SIG_BLOCK, [])  # ints, no enum members (see _handlers)
        self._filters = list(warnings.filters)
        self._showwarning = warnings.showwarning
        self._recursion = sys.getrecursionlimit()
        self._timeout = socket.getdefaulttimeout()
        self._umask = _umask()
        self._switch = sys.getswitchinterval()
        self._hooks = sys.excepthook, sys.unraisablehook, sys.displayhook, threading.excepthook
        self._streams = sys.stdin, sys.stdout, sys.stderr
        self._locale = locale.setlocale(locale.LC_ALL)

    def restore(self) -> None:
        for timer in TIMERS:
            signal.setitimer(timer, 0)
        for signum, handler in self._handlers.items():
            if _signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        _signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        warnings.filters[:] = self._filters  # type: ignore[index]  # a list at run time
        warnings.showwarning = self._showwarning
        warnings.onceregistry.clear()  # type: ignore[attr-defined]
        warnings._filters_mutated()  # type: ignore[attr-defined]  # "once"/"default" warnings show again
        sys.setrecursionlimit(self._recursion)
        socket.setdefaulttimeout(self._timeout)
        os.umask(self._umask)
        sys.setswitchinterval(self._switch)
        sys.excepthook, sys.unraisablehook, sys.displayhook, threading.excepthook = self._hooks
        for stream in (sys.stdout, sys.stderr):
            if all(stream is not saved for saved in self._streams):  # the program's own: flushed, as at exit
                try:
                    stream.flush()
                except Exception:
                    logging.getLogger(__name__).debug("flushing the program's own stream failed", exc_info=True)
        sys.stdin, sys.stdout, sys.stderr = self._streams
        if locale.setlocale(locale.LC_ALL) != self._locale:
            locale.setlocale(locale.LC_ALL, self._locale)
        random.seed(os.urandom(32))  # a fresh seed, as a new interpreter has (its 2,496 bytes cost twice as long)


class ImportedModules:
    """The modules imported since the last :meth:`mark`, to forget those of an attempt's own code when it ends.

    One per process, marked before each attempt. The names are copied again only when the modules changed
    since the last mark: sys.modules is a dict, so a new entry goes after every old one, and with as many
    entries as then and the same newest one nothing was added — unless a program removed the newest and
    imported it again after others (as it did before this mark existed, those others then go unseen). An
    attempt whose own modules were forgotten leaves them so, and a mark costs two lookups instead of a copy
    of ~1,500 names.

    A thread importing while the names are walked (one the attempt left running) makes the walk raise; it is
    then done on a copy, which the interpreter makes at once."""

    def __init__(self, modules: dict[str, Any] = sys.modules) -> None:
        self._modules = modules  # sys.modules; a test gives its own
        self._before: tuple[str, ...] = ()
        self._count = -1
        self._last = ""
        self.mark()

    def mark(self) -> None:
        """An attempt starts: what it imports from now on is :meth:`added`."""
        try:
            unchanged = len(self._modules) == self._count and next(reversed(self._modules)) == self._last
        except RuntimeError:  # a thread imported between the two steps
            unchanged = False
        if not unchanged:
            self._before = tuple(self._modules)
            self._count = len(self._before)
            self._last = self._before[-1]

    def added(self) -> Iterable[str]:
        """The entries after the newest old one, walked back from the end, while that one is still at its place
        (nothing older was removed); else by the difference of the names (the set difference of ~1,500 names
        was ~70 µs of every attempt, the walk is as long as what the attempt imported)."""
        try:
            return self._after(reversed(self._modules), len(self._modules), self._modules)
        except RuntimeError:  # a thread imported during the walk
            names = tuple(self._modules)
            return self._after(reversed(names), len(names), names)

    def _after(self, newest_first: Iterable[str], count: int, names: Iterable[str]) -> Iterable[str]:
        newer: list[str] = []
        for name in newest_first:
            if name == self._last:
                if count - len(newer) == self._count:
                    newer.reverse()
                    return newer
                break
            newer.append(name)
        return set(names).difference(self._before)

    def forget(self, roots: list[str]) -> None:
        """Drop the added modules whose file is under one of ``roots`` (the attempt's own code)."""
        prefixes = tuple(os.path.join(r, "") for r in roots if r)
        if not prefixes:
            return
        for name in self.added():
            module = self._modules.get(name)
            origin = getattr(module, "__file__", None) or ""
            if origin.startswith(prefixes):
                del self._modules[name]
