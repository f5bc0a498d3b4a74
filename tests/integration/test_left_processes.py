"""A warm driver whose attempt left a child process running retires (worker/py_state.py ``ChildProcesses``):
its attempts share one log file (worker/logs.py), and the child, writing on, would write into the next
attempt's range. A child that has exited, waited for or not, does not count; nor do those the driver had
before the attempt (its JVM)."""

from __future__ import annotations

import re
import subprocess
import sys

from harness import wait_for
from sparkyard.worker.py_state import ChildProcesses

EXIT_WAIT_S = 120.0  # a child that exits at once (~50 ms); the bound only keeps a broken check from hanging


def left(children: ChildProcesses) -> set[int]:
    return {int(pid) for pid in re.findall(r"\d+", children.left_running())}


def test_a_child_left_running_is_named_and_one_that_exited_is_not() -> None:
    children = ChildProcesses()
    children.mark()
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # A zombie until waited for: not left running once it has exited.
        wait_for(lambda: exited.pid not in left(children), EXIT_WAIT_S, "the exited child to stop counting as running")
        assert {running.pid, exited.pid} <= children.listed()  # both listed: neither waited for
        assert children.left_running() == f"the program left child processes running (pids {running.pid})"
        marked_later = ChildProcesses()
        marked_later.mark()  # the running child is its own, as a driver's JVM is
        assert marked_later.left_running() == ""
    finally:
        running.kill()
        running.wait()
        exited.wait()
    assert children.left_running() == "" and running.pid not in children.listed()
