"""The worker's result ledger (worker/ledger.py): a result is in the outbox before the message carrying it
leaves, the results of one message and the acknowledgements of one answer each in one write, and what a
stopping worker had not sent yet is kept for its restart."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Callable

import pytest

from sparkyard.clock import SystemClock
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker import outbox as outbox_module
from sparkyard.worker.ledger import ResultLedger


async def wait_until(condition: Callable[[], bool], timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def result(task: str, token: int) -> pb.TaskResult:
    return pb.TaskResult(task_id=task, fencing_token=token, outcome=pb.ATTEMPT_SUCCEEDED, result_json='"ok"')


def on_disk(work_dir: Path) -> list[tuple[str, int]]:
    """What a restart would read back, read without the restart's rewrite of the file."""
    data, pos = (work_dir / "outbox.log").read_bytes(), 0
    pending: set[tuple[str, int]] = set()
    while pos < len(data):
        length, kind = outbox_module._HEADER.unpack_from(data, pos)
        body = data[pos + outbox_module._HEADER.size: pos + outbox_module._HEADER.size + length]
        pos += outbox_module._HEADER.size + length
        if kind == ord("R"):
            r = pb.TaskResult.FromString(body)
            pending.add((r.task_id, r.fencing_token))
        else:
            task_id, _, token = body.decode().partition("\t")
            pending.discard((task_id, int(token)))
    return sorted(pending)


def test_results_are_written_together_before_their_message_leaves_and_acks_together_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes: list[int] = []
    real_write = os.write
    monkeypatch.setattr(outbox_module.os, "write", lambda fd, data: writes.append(len(data)) or real_write(fd, data))

    async def scenario() -> None:
        sent: list[tuple[list[tuple[str, int]], list[tuple[str, int]]]] = []

        def send(message: pb.WorkerMessage) -> bool:
            # What the outbox holds as the message leaves: every result in it must be there already.
            sent.append(([(r.task_id, r.fencing_token) for r in message.reports.results], on_disk(tmp_path)))
            return True

        ledger = ResultLedger(tmp_path, SystemClock(), send)
        await ledger.start()
        for i in range(3):
            ledger.record(result(f"t{i}", i + 1))
        assert writes == []  # nothing written per result
        ledger.flush()
        await wait_until(lambda: bool(sent), 10)
        carried, held = sent[0]
        assert carried == [("t0", 1), ("t1", 2), ("t2", 3)] and held == carried
        assert len(writes) == 1  # the three results, one write
        ledger.acknowledged(pb.ResultAcks(acks=[pb.ResultAck(task_id="t0", fencing_token=1, accepted=True),
                                                pb.ResultAck(task_id="t1", fencing_token=2, accepted=True)]))
        assert len(writes) == 2  # both acknowledgements, one write
        assert on_disk(tmp_path) == [("t2", 3)]
        ledger.record(result("t3", 4))  # ends as the worker stops: not sent, but kept for the restart
        await ledger.stop()
        assert ("t3", 4) in on_disk(tmp_path)

    asyncio.run(scenario())


def test_a_result_recorded_while_no_master_takes_it_is_on_disk_at_once(tmp_path: Path) -> None:
    """The reports wait out a backoff (seconds) while the master is unreachable: a result that ends meanwhile is
    written then, not when the next try leaves — a worker killed in between still has it."""

    async def scenario() -> None:
        ledger = ResultLedger(tmp_path, SystemClock(), lambda message: False)  # not connected
        await ledger.start()
        ledger.record(result("t0", 1))
        ledger.flush()
        await wait_until(lambda: ledger._reports.held_back, 10)  # the try failed: backing off
        ledger.record(result("t1", 2))
        assert ("t1", 2) in on_disk(tmp_path)
        await ledger.stop()
        assert on_disk(tmp_path) == [("t0", 1), ("t1", 2)]

    asyncio.run(scenario())
