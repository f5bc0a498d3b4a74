"""A warm driver's attempts share its log file, each its byte range of it (worker/logs.py): a request reads its
attempt's bytes and no other attempt's — by the closed range the result gave; by the open range the start
report gave, or by no path (sent before the master had the result), once the attempt has ended here (and,
past what the worker remembers, up to where the next attempt's log begins); by none while it is still on the
worker — and offsets count from the attempt's own start. A range is kept apart from a path that merely has an
``@`` in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker.logs import LogFiles, attempt_range, parse_range
from sparkyard.worker.runner.base import AttemptRun, log_tail
from sparkyard.worker.runner.driver_process import DriverProcess, Job
from sparkyard.worker.workspace import Workspace

NOW = 1_790_000_000.0


def test_a_range_and_a_path_read_back_as_they_were_made() -> None:
    assert parse_range(attempt_range("/l/driver-1-9.log", 12, 40)) == ("/l/driver-1-9.log", 12, 40)
    assert parse_range(attempt_range("/l/driver-1-9.log", 12)) == ("/l/driver-1-9.log", 12, None)
    for whole in ("/l/t.a1.log", "/l/user@host/t.a1.log", "/l/t@x.log", "/l/t.a1.log@", "/l/t@1-x"):
        assert parse_range(whole) == (whole, 0, None)


# A first attempt whose output ends without a newline, then the next attempt's log.
FIRST = b"sparkyard: attempt 1 of task t (token 1)\nhello, no newline"
SECOND = b"sparkyard: attempt 2 of task t (token 2)\nworld\n"


def two_attempts(tmp_path: Path, remembered: bool = True) -> tuple[LogFiles, str, str, str]:
    """A driver's file holding a first attempt's log and a second one's: (logs, file, first's open range,
    second's open range); the first's end remembered as its result gave it, or not."""
    logs = LogFiles(tmp_path)
    path = logs.driver_file("driver-1-4242", NOW)
    Path(path).write_bytes(FIRST + SECOND)
    first, second = attempt_range(path, 0), attempt_range(path, len(FIRST))
    if remembered:
        logs.ended("t", 1, attempt_range(path, 0, len(FIRST)))
    return logs, path, first, second


async def read(logs: LogFiles, log_path: str, offset: int = 0, current: str | None = None,
               attempt: int = 1) -> pb.LogData:
    request = pb.LogRequest(request_id="r", task_id="t", attempt=attempt, log_path=log_path, offset=offset)
    return await logs.answer(request, lambda task_id, attempt: current)


async def test_an_attempt_s_range_reads_its_bytes_alone_from_its_own_offsets(tmp_path: Path) -> None:
    logs, path, first, second = two_attempts(tmp_path)
    closed = await read(logs, attempt_range(path, 0, len(FIRST)))
    assert (closed.data, closed.eof) == (FIRST, True)
    # The start report's form, or no path at all, the attempt over: its end is known, the next is not read.
    assert (await read(logs, first)).data == FIRST
    assert (await read(logs, "")).data == FIRST
    assert (await read(logs, first, offset=len(FIRST) - 10)).data == b"no newline"
    assert (await read(logs, first, offset=len(FIRST))).data == b""
    # Still running (the worker names its range): to the file's end, and not at its end yet.
    running = await read(logs, "", current=second, attempt=2)
    assert (running.data, running.eof) == (SECOND, False)
    assert (await read(logs, second, offset=len(SECOND) - 6, attempt=2)).data == b"world\n"


async def test_an_open_range_the_worker_no_longer_remembers_ends_where_the_next_attempt_begins(
        tmp_path: Path) -> None:
    logs, path, first, second = two_attempts(tmp_path, remembered=False)
    assert (await read(logs, first)).data == FIRST
    assert (await read(logs, "")).data == FIRST  # found once, remembered
    ended = await read(logs, second, attempt=2)  # the last in its file: to the end
    assert (ended.data, ended.eof) == (SECOND, True)


async def test_a_range_outside_the_log_directory_is_refused(tmp_path: Path) -> None:
    logs, _, _, _ = two_attempts(tmp_path)
    refused = await read(logs, attempt_range(str(tmp_path.parent / "elsewhere.log"), 0, 5), attempt=3)
    assert refused.error == "path is outside the worker's log directory"


@pytest.mark.parametrize("closed", [True, False])
def test_the_tail_of_a_dead_driver_s_attempt_is_of_its_range(tmp_path: Path, closed: bool) -> None:
    _, path, _, _ = two_attempts(tmp_path)
    whole = (FIRST + SECOND).decode().rstrip("\n")
    assert log_tail(attempt_range(path, 0, len(FIRST) if closed else None), 9) == (FIRST.decode() if closed else whole)
    assert log_tail(attempt_range(path, len(FIRST)), 9) == SECOND.decode().rstrip("\n")


async def test_a_path_that_is_no_log_or_a_bad_offset_is_answered_not_raised(tmp_path: Path) -> None:
    logs, path, _, _ = two_attempts(tmp_path)
    folder = str(Path(path).parent)
    assert (await read(logs, attempt_range(folder, 0, 5), attempt=3)).data == b""  # a directory: no bytes
    assert parse_range(f"{path}@²") == (f"{path}@²", 0, None)  # a digit int() does not take: no range
    assert (await read(logs, f"{path}@²", attempt=3)).data == b""
    assert (await read(logs, attempt_range(path, 10**30), attempt=3)).data == b""  # past any file
    assert (await read(logs, attempt_range(path, 0, 5), offset=-3)).error == "offset -3 is negative"


class Pool:
    """What a driver process reads of its pool for its attempts' logs."""

    def __init__(self, root: Path) -> None:
        self.drivers_dir = root / "drivers"
        self.logs = LogFiles(root)


def test_an_attempt_a_driver_did_not_run_names_no_range_and_a_set_aside_file_renames_the_next(
        tmp_path: Path) -> None:
    """A refused attempt (for a fresh driver, or its log could not be written) wrote nothing: the range it was
    handed is the next attempt's, so it names none. One that overwrote the file has it set aside as its log,
    and the driver's next attempts go to a file of another name (the old ranges must name nothing)."""
    driver = DriverProcess(Pool(tmp_path), 1)  # type: ignore[arg-type]
    run = AttemptRun(pb.TaskAssignment(task_id="t", attempt=1), "w", "", "", 1 << 20, Workspace("", "", (), ()))
    job = Job(run, lambda outcome: None, "k")
    run.log_path = driver.attempt_log()
    assert run.log_path.endswith("/driver-1-0.log@0")
    driver.attempt_logged(job, {"op": "done", "id": "k", "fresh": ["spark.driver.memory"]})
    assert run.log_path == ""
    run.log_path = driver.attempt_log()
    driver.attempt_logged(job, {"op": "done", "id": "k", "ok": True, "log_start": 0, "log_end": 40})
    assert run.log_path.endswith("/driver-1-0.log@0-40") and driver.attempt_log().endswith("/driver-1-0.log@40")
    aside = str(tmp_path / "driver-1-0.overwritten-at-40.log")
    driver.attempt_logged(job, {"op": "done", "id": "k", "ok": True, "log_start": 0, "log_end": 9, "log_file": aside})
    assert run.log_path == f"{aside}@0-9" and driver.attempt_log().endswith("/driver-1-0-1.log@0")
