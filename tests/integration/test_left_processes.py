"""A warm driver whose attempt left a child process running retires (worker/py_state.py ``left_processes``):
its attempts share one log file (worker/logs.py), and the child, writing on, would write into the next
attempt's range. A child that has exited, waited for or not, does not count; nor do those the driver had
before the attempt (its JVM)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from sparkyard.worker.py_state import child_processes, left_processes

EXIT_WAIT_S = 30.0  # a child exiting at once; bounded for a loaded machine


def left(before: frozenset[int]) -> set[int]:
    return {int(pid) for pid in re.findall(r"\d+", left_processes(before))}


def test_a_child_left_running_is_named_and_one_that_exited_is_not() -> None:
    before = child_processes()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + EXIT_WAIT_S
        while exited.pid in left(before):  # a zombie until waited for: not left running
            assert time.monotonic() < deadline, "the exited child still counts as running"
            time.sleep(0.05)
        assert exited.pid in child_processes()  # listed, not waited for
        assert left_processes(before) == f"the program left child processes running (pids {running.pid})"
        assert left_processes(before | {running.pid}) == ""
    finally:
        running.kill()
        running.wait()
        exited.wait()
    assert left_processes(before) == ""
