"""A warm driver whose attempt's log cannot be made (a disk filled since the worker last measured it) runs
nothing of the attempt and says so, so that the worker hands the attempt back instead of using it up."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest

from sparkyard.worker import driver as driver_module
from sparkyard.worker.driver import Driver


def test_an_attempt_whose_log_cannot_be_written_for_want_of_space_is_refused_unstarted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, _ = socket.socketpair()
    control, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    driver = Driver(run, control, "local[1]", {})
    cwd = os.getcwd()

    failure = [OSError(errno.ENOSPC, "No space left on device")]

    def refused(path: str, flags: int, mode: int = 0o777) -> int:
        raise failure[0]

    monkeypatch.setattr(driver_module.os, "open", refused)
    task = {"op": "run", "id": "t1.a1", "fresh": True, "log_path": str(tmp_path / "t1.a1.log"), "header": "h\n"}
    reply = driver._run(task)
    assert reply["op"] == "done" and reply["id"] == "t1.a1" and not reply["ok"] and reply["no_space"]
    assert "cannot be written" in reply["error"] and os.getcwd() == cwd  # nothing of the attempt ran
    failure[0] = PermissionError(errno.EACCES, "Permission denied")
    assert driver._run(task)["no_space"] is False  # another failure fails the attempt, as any start failure does


def test_an_attempt_s_bytes_are_its_range_and_a_file_it_overwrote_is_set_aside(tmp_path: Path) -> None:
    """A driver's attempts append to one file (worker/logs.py). One that truncates it (a program opening
    /dev/stdout for writing) would make the ranges of those before it read its output: the file is set aside
    whole as its log, and those ranges name nothing."""
    run, _ = socket.socketpair()
    control, _ = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    driver = Driver(run, control, "local[1]", {})
    path = tmp_path / "driver-1-7.log"
    start, stray = driver._open_log(str(path), "sparkyard: attempt 1\n")
    os.write(driver._log_fd, b"first's output\n")
    assert (start, stray) == (0, "") and driver._logged(start) == {"log_start": 0, "log_end": 36}
    start, stray = driver._open_log(str(path), "sparkyard: attempt 2\n")
    assert (start, stray) == (36, "")
    with open(f"/proc/self/fd/{driver._log_fd}", "w") as stdout:  # as open("/dev/stdout", "w") does to fd 1
        stdout.write("csv,of,the,second\n")
    logged = driver._logged(start)
    aside = tmp_path / "driver-1-7.overwritten-at-36.log"
    assert logged == {"log_start": 0, "log_end": 18, "log_file": str(aside)}
    assert aside.read_bytes() == b"csv,of,the,second\n" and not path.exists()
    # The next attempt begins a new file; bytes that reach a file between attempts retire the driver.
    start, stray = driver._open_log(str(tmp_path / "driver-1-7-1.log"), "sparkyard: attempt 3\n")
    assert driver._logged(start)["log_end"] == 21
    with open(tmp_path / "driver-1-7-1.log", "ab") as left_behind:
        left_behind.write(b"a grandchild's line\n")
    assert "20 bytes reached its log between attempts" in driver._open_log(str(tmp_path / "driver-1-7-1.log"),
                                                                         "sparkyard: attempt 4\n")[1]
