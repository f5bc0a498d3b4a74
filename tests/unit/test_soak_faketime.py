"""The soak's clean-up of libfaketime's files (tests/soak/nemesis.py): version 0.9.10 leaves a pair in /dev/shm
for every process it was preloaded into, and the soak's skewed workers, drivers and JVMs left ~190 of them on
this machine over a few days of soaks. Only the pairs of processes that have ended, made during the soak, go."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "soak"))

from nemesis import remove_faketime_files  # noqa: E402


def _pair(shm: Path, pid: int, mtime: float | None = None) -> list[str]:
    names = [f"faketime_shm_{pid}", f"sem.faketime_sem_{pid}"]
    for name in names:
        (shm / name).write_bytes(b"\0" * 8)
        if mtime is not None:
            os.utime(shm / name, (mtime, mtime))
    return names


def test_only_the_files_of_ended_processes_made_since_the_soak_began_are_removed(tmp_path: Path) -> None:
    began = 1_000_000.0
    never_a_pid = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    ended = _pair(tmp_path, never_a_pid)
    running = _pair(tmp_path, os.getpid())
    earlier = _pair(tmp_path, never_a_pid + 1, mtime=began - 1)
    (tmp_path / "faketime_shm_notapid").write_text("")
    (tmp_path / "other").write_text("")

    assert remove_faketime_files(began, tmp_path) == sorted(ended)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*running, *earlier, "faketime_shm_notapid", "other"])
    assert remove_faketime_files(began, tmp_path) == []
