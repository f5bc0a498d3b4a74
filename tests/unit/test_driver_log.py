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
