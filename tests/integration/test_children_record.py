"""A worker's child whose record cannot be written (a full disk, say) is not left running unowned: found by
the nemesis soak (tests/soak, seed 22), where a session driver started while the worker's disk was full ran
on, with its JVM, beside the replacement the worker warmed for it."""

from __future__ import annotations

import asyncio
import secrets
from pathlib import Path

import pytest

from harness import wait_for
from sparkyard.worker.children import Children


def _running(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            pass
    return pids


def test_a_child_whose_record_cannot_be_written_is_ended_and_the_error_raised(tmp_path: Path) -> None:
    (tmp_path / "children").write_text("a file where the records' directory should be: writing a record fails")
    marker = f"sparkyard-orphan-{secrets.token_hex(4)}"

    async def spawn() -> None:
        await Children(tmp_path).spawn("sh", "-c", "sleep 60", marker, what="test child")

    with pytest.raises(OSError):
        asyncio.run(spawn())
    wait_for(lambda: not _running(marker), 10, "the child to be ended")
