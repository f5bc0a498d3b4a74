"""What an attempt leaves in a warm driver's Python (worker/py_state.py): logging put back as it was, the
program's non-daemon threads waited for, a daemon thread left running named, its atexit functions run, its
process-wide settings put back."""

from __future__ import annotations

import locale
import logging
import os
import random
import signal
import socket
import sys
import threading
import warnings
from pathlib import Path
from typing import Iterator

import pytest

from sparkyard.worker.py_state import (
    ExitHooks,
    ImportedModules,
    LoggingState,
    ProcessState,
    join_program_threads,
    left_running,
)


def test_a_programs_logging_configuration_is_undone(tmp_path: Path) -> None:
    kept = logging.getLogger("sparkyard.kept")
    kept.setLevel(logging.INFO)
    root = logging.getLogger()
    root_before = list(root.handlers), root.level
    before = LoggingState()
    root.addHandler(logging.StreamHandler())  # what the program's basicConfig does in a fresh interpreter
    root.setLevel(logging.DEBUG)
    app = logging.getLogger("fidelity.unit.app")
    handler = logging.FileHandler(tmp_path / "app.log")
    app.addHandler(handler)
    app.setLevel(logging.DEBUG)
    app.propagate = False
    kept.setLevel(logging.ERROR)
    kept.disabled = True
    app.info("a line")
    logging.disable(logging.CRITICAL)

    before.restore()

    assert (root.handlers, root.level, root.manager.disable) == (*root_before, logging.NOTSET)
    assert (app.handlers, app.level, app.propagate) == ([], logging.NOTSET, True)
    assert (kept.level, kept.disabled) == (logging.INFO, False)
    assert handler.stream is None  # closed: the program's file is let go
    assert (tmp_path / "app.log").read_text() == "a line\n"


def test_putting_logging_back_does_not_empty_every_cache_once_per_logger(monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm driver keeps every logger its programs made: a restore that set each one's level again emptied
    every logger's cache for each of them, a cost that grew with the square of the loggers, every attempt."""
    for i in range(200):
        logging.getLogger(f"unit.many.{i}")
    changed = logging.getLogger("unit.many.7")
    before = LoggingState()
    changed.setLevel(logging.ERROR)
    clears = 0
    original = logging.Manager._clear_cache

    def counted(manager: logging.Manager) -> None:
        nonlocal clears
        clears += 1
        original(manager)

    monkeypatch.setattr(logging.Manager, "_clear_cache", counted)
    before.restore()
    assert changed.level == logging.NOTSET
    assert clears == 1  # once for all, not once per logger


def test_a_level_a_program_set_directly_is_not_left_in_its_loggers_caches() -> None:
    lib = logging.getLogger("unit.cached")
    child = logging.getLogger("unit.cached.child")
    before = LoggingState()
    lib.setLevel(logging.DEBUG)
    assert child.isEnabledFor(logging.DEBUG)  # cached in the child
    lib.level = logging.NOTSET  # set back directly: no cache emptied
    before.restore()
    assert not child.isEnabledFor(logging.DEBUG)  # WARNING, the root's, as before the program


def test_the_programs_non_daemon_threads_are_waited_for_and_a_daemon_one_is_named() -> None:
    before = set(threading.enumerate())
    finished = threading.Event()
    release = threading.Event()

    def work() -> None:
        release.wait(0.3)
        finished.set()

    threading.Thread(target=work, name="unit-worker").start()
    idle = threading.Thread(target=release.wait, name="unit-idle", daemon=True)
    idle.start()
    join_program_threads(before)
    assert finished.is_set()
    assert left_running(before) == "the program left threads running (unit-idle), which would go on in the next attempt"
    release.set()
    idle.join(5)
    assert left_running(before) == ""


def test_the_programs_exit_hooks_run_when_its_attempt_ends_last_first(capsys: pytest.CaptureFixture[str]) -> None:
    import atexit

    ran: list[str] = []
    hooks = ExitHooks()
    hooks.install()
    try:
        atexit.register(ran.append, "first")
        atexit.register(lambda: 1 / 0)  # reported, and the others still run
        atexit.register(ran.append, "last")
        atexit.register(ran.append, "unregistered")
        atexit.unregister(ran.append)
        atexit.register(ran.append, "after unregister")
    finally:
        hooks.uninstall()
    assert atexit.register is not None and ran == []
    hooks.run()
    assert ran == ["after unregister"]
    assert "ZeroDivisionError" in capsys.readouterr().err


def test_a_thread_pools_idle_workers_are_neither_waited_for_nor_a_reason_to_retire() -> None:
    from concurrent.futures import ThreadPoolExecutor

    before = set(threading.enumerate())
    pool = ThreadPoolExecutor(1, thread_name_prefix="unit-pool")  # never shut down, as a program may leave it
    assert pool.submit(lambda: 1).result() == 1
    join_program_threads(before)  # returns: the idle worker is not the program's own code
    assert left_running(before) == ""
    pool.shutdown()


def test_a_programs_process_settings_are_put_back_and_its_alarm_cancelled() -> None:
    def settings() -> tuple[object, ...]:
        mask = os.umask(0)
        os.umask(mask)
        return (signal.getsignal(signal.SIGUSR1), signal.getsignal(signal.SIGALRM), list(warnings.filters),
                sys.getrecursionlimit(), socket.getdefaulttimeout(), mask, sys.excepthook, threading.excepthook,
                sys.stdout, sys.getswitchinterval(), signal.pthread_sigmask(signal.SIG_BLOCK, []),
                locale.setlocale(locale.LC_ALL))

    before = settings()
    state = ProcessState()
    signal.signal(signal.SIGUSR1, lambda *_: None)
    signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 600)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    warnings.filterwarnings("ignore", message="unit")
    sys.setrecursionlimit(5000)
    socket.setdefaulttimeout(7)
    os.umask(0o077)
    sys.excepthook = lambda *exc: None
    threading.excepthook = lambda args: None
    sys.stdout = open(os.devnull, "w")
    sys.setswitchinterval(0.5)
    random.seed(7)
    random.random()
    sequence = random.Random(7)
    sequence.random()

    state.restore()

    assert settings() == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert random.random() != sequence.random()  # seeded afresh, as a new interpreter is, not the program's


def test_a_python_handler_the_program_replaced_by_sig_ign_is_put_back() -> None:
    def mine(*_: object) -> None:
        return None

    previous = signal.signal(signal.SIGUSR2, mine)
    try:
        state = ProcessState()
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
        state.restore()
        assert signal.getsignal(signal.SIGUSR2) is mine
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    finally:
        signal.signal(signal.SIGUSR2, previous)


def _module_file(root: Path, name: str) -> None:
    (root / f"{name}.py").write_text("VALUE = 1\n")


def test_an_attempts_own_modules_are_forgotten_and_libraries_stay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _module_file(tmp_path, "sy_attempt_own")
    monkeypatch.syspath_prepend(str(tmp_path))
    imported = ImportedModules()
    import sy_attempt_own  # noqa: F401  (the attempt's code)
    import colorsys  # noqa: F401  (a library it imported: stays)
    added = set(imported.added())
    assert "sy_attempt_own" in added
    imported.forget([str(tmp_path)])
    assert "sy_attempt_own" not in sys.modules and "colorsys" in sys.modules


def test_modules_an_attempt_removed_do_not_hide_the_ones_it_added(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The added modules are the entries after the newest old one while nothing older went; an attempt that
    removed an older one (here the newest) is answered by the set difference, with the same result."""
    for name in ("sy_old_a", "sy_old_b", "sy_new"):
        _module_file(tmp_path, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    import sy_old_a  # noqa: F401
    import sy_old_b  # noqa: F401
    imported = ImportedModules()
    del sys.modules["sy_old_b"]
    import sy_new  # noqa: F401
    assert set(imported.added()) == {"sy_new"}
    imported.forget([str(tmp_path)])
    assert "sy_new" not in sys.modules and "sy_old_a" in sys.modules
    del sys.modules["sy_old_a"]



def test_each_mark_counts_only_what_the_next_attempt_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One ImportedModules serves a driver's attempts, marked before each: a library the first one imported (it
    stays) is not the second's, and after an attempt that left the modules as they were nothing is counted."""
    own, lib = tmp_path / "own", tmp_path / "lib"
    own.mkdir()
    lib.mkdir()
    for root, name in ((own, "sy_first_own"), (lib, "sy_first_lib"), (own, "sy_second_own")):
        _module_file(root, name)
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.syspath_prepend(str(own))
    imported = ImportedModules()
    import sy_first_own  # noqa: F401
    import sy_first_lib  # noqa: F401
    imported.forget([str(own)])
    assert "sy_first_own" not in sys.modules and "sy_first_lib" in sys.modules
    imported.mark()
    import sy_second_own  # noqa: F401
    assert list(imported.added()) == ["sy_second_own"]
    imported.forget([str(own)])
    imported.mark()
    assert list(imported.added()) == []
    del sys.modules["sy_first_lib"]



class _ImportedDuringWalk(dict[str, None]):
    """Modules to which a thread adds one each time they are walked past the newest, as one the attempt left may."""

    imports = 0

    def __reversed__(self) -> Iterator[str]:
        walk = super().__reversed__()
        yield next(walk)
        self.imports += 1
        self[f"sy_thread_{self.imports}"] = None
        yield from walk  # raises: the dict changed size during iteration


def test_a_module_a_thread_imports_during_the_walk_does_not_end_it() -> None:
    modules = _ImportedDuringWalk({"sy_a": None, "sy_b": None})
    imported = ImportedModules(modules)
    modules["sy_own"] = None
    assert list(imported.added()) == ["sy_own", "sy_thread_1"]  # walked again on a copy
    del modules["sy_b"]  # the newest old one gone: the difference of the names, on a copy
    assert set(imported.added()) == {"sy_own", "sy_thread_1", "sy_thread_2"}
