"""The worker's outbox on disk: what a restarted worker reads back is every result not acknowledged."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.worker import outbox as outbox_module
from sparkyard.worker.outbox import Outbox


def result(task: str, token: int) -> pb.TaskResult:
    return pb.TaskResult(task_id=task, fencing_token=token, outcome=pb.ATTEMPT_SUCCEEDED, result_json='"ok"')


def test_a_restart_reads_back_exactly_the_unacknowledged_results(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    assert box.load() == []
    box.add([result("t0", 10)])
    box.add([result("t1", 11), result("t2", 12)])  # the results of one message: one write
    box.ack([("t1", 11)], pending_left=2)
    box.close()  # the worker dies here
    again = Outbox(tmp_path)
    assert sorted((r.task_id, r.fencing_token, r.result_json) for r in again.load()) == [
        ("t0", 10, '"ok"'), ("t2", 12, '"ok"')]
    again.close()


def test_the_log_is_emptied_when_nothing_is_pending(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.load()
    box.add([result("t0", 1), result("t1", 2)])
    box.ack([("t0", 1), ("t1", 2)], pending_left=0)
    assert box.path.stat().st_size == 0
    box.close()


def test_a_torn_last_record_is_dropped(tmp_path: Path) -> None:
    box = Outbox(tmp_path)
    box.load()
    box.add([result("t0", 1), result("t1", 2)])
    box.close()
    data = box.path.read_bytes()
    box.path.write_bytes(data[:-3])  # killed in the middle of a write
    again = Outbox(tmp_path)
    assert [r.task_id for r in again.load()] == ["t0"]
    again.close()


def test_a_grown_log_is_rewritten_with_only_what_is_pending(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    box = Outbox(tmp_path)
    box.load()
    for i in range(50):
        box.add([result(f"t{i}", i)])
        box.ack([(f"t{i}", i)], pending_left=1)  # one older result stays pending throughout
    grown = box.path.stat().st_size
    box.compact([result("keep", 7)])
    assert box.path.stat().st_size == grown  # below the threshold nothing is rewritten
    monkeypatch.setattr(outbox_module, "COMPACT_BYTES", 100)
    box.compact([result("keep", 7)])
    assert box.path.stat().st_size < grown
    box.close()
    again = Outbox(tmp_path)
    assert [(r.task_id, r.fencing_token) for r in again.load()] == [("keep", 7)]
    again.close()
