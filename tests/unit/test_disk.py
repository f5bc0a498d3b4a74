"""The worker's disk (worker/disk.py): a work directory with too little room is a problem, said in one line,
until it has room again; a write refused for want of space makes it one at once."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Callable

import pytest

from sparkyard.worker import disk as disk_module
from sparkyard.worker.disk import REFUSED_HOLD_S, Disk, no_space


def quota(limit: int) -> Callable[[Path], tuple[int, int]]:
    """Free space as a quota of ``limit`` bytes over the files under a directory (a real filled directory,
    without a file system of that size)."""

    def free(path: Path) -> tuple[int, int]:
        return limit - sum(f.stat().st_size for f in path.rglob("*") if f.is_file()), -1

    return free


def test_a_full_work_directory_is_a_problem_until_it_has_room(tmp_path: Path) -> None:
    changes: list[str] = []
    disk = Disk(tmp_path, min_free_bytes=1000, free=quota(4000), on_change=changes.append)
    assert disk.check() == ""
    (tmp_path / "attempts").mkdir()
    (tmp_path / "attempts" / "big").write_bytes(b"x" * 3500)
    assert disk.check() == f"work directory {tmp_path} is full (0.0 MiB free, 0 MiB needed to start an attempt)"
    disk.check()  # still full: not news
    (tmp_path / "attempts" / "big").unlink()
    assert disk.check() == ""
    assert changes == [changes[0], ""] and changes[0].startswith(f"work directory {tmp_path} is full")


def test_no_free_inodes_is_full_too(tmp_path: Path) -> None:
    disk = Disk(tmp_path, free=lambda path: (10**9, 3))
    assert disk.check() == f"work directory {tmp_path} is full (3 inodes free, 64 needed)"


def test_a_refused_write_makes_it_full_at_once_for_a_while_whatever_the_probe_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(disk_module.time, "monotonic", lambda: now[0])
    disk = Disk(tmp_path, free=lambda path: (10**9, -1))
    disk.refused(OSError(errno.ENOSPC, "No space left on device"))
    assert disk.problem == f"work directory {tmp_path} is full (No space left on device)"
    now[0] += REFUSED_HOLD_S - 0.1
    assert disk.check() == disk.problem != ""  # a probe with room does not clear it yet
    now[0] += 0.2
    assert disk.check() == ""


def test_a_missing_work_directory_is_not_full(tmp_path: Path) -> None:
    assert Disk(tmp_path / "not-yet").check() == ""


def test_which_errors_mean_no_space() -> None:
    assert no_space(OSError(errno.ENOSPC, "No space left on device"))
    assert no_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not no_space(OSError(errno.EACCES, "Permission denied"))
    assert not no_space(ValueError("no space"))


def test_before_an_attempt_the_room_is_measured_again_only_after_a_moment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(disk_module.time, "monotonic", lambda: now[0])
    free = [10**9]
    measured: list[int] = []

    def probe(path: Path) -> tuple[int, int]:
        measured.append(free[0])
        return free[0], -1

    disk = Disk(tmp_path, min_free_bytes=1000, free=probe)
    assert disk.check_recent() == "" and len(measured) == 1
    free[0] = 10
    now[0] += disk_module.START_CHECK_S / 2
    assert disk.check_recent() == "" and len(measured) == 1  # measured a moment ago: not again
    now[0] += disk_module.START_CHECK_S
    assert disk.check_recent().startswith(f"work directory {tmp_path} is full") and len(measured) == 2
