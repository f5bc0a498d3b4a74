"""The worker's durable outbox: results not yet acknowledged by a master, kept on disk.

A result stays pending until a master acknowledges it (accepted, or refused as stale); pending results are
resent after every reconnect. Kept only in memory they would die with the worker process — a worker that
crashes or is restarted right after a task ended would have the master requeue that task and run it again.
So every result is appended to ``outbox.log`` in the worker's directory before it is sent, and every
acknowledgement after it arrives; a restarted worker (same ``--id`` and ``--work-dir``) reads the log back,
declares those results' leases when it registers and sends them again.

One append-only file, written with ``os.write`` (no buffer in this process: a record is in the kernel
once the call returns, so it survives the process being killed — not a power loss, which would need an
fsync per result); it is emptied whenever nothing is pending and rewritten with only the pending records
when it grows past COMPACT_BYTES. The results of a ``Reports`` message are written together just before it
leaves, the acknowledgements of a ``ResultAcks`` message together when it arrives: a write per message, not
per result (worker/ledger.py).

Record: 4-byte big-endian length, 1 byte kind (``R`` result: a serialized TaskResult; ``A`` ack:
``task_id <TAB> token``), then the payload.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Iterable

from sparkyard.v1 import sparkyard_pb2 as pb

log = logging.getLogger(__name__)

COMPACT_BYTES = 4 * 1024 * 1024
_HEADER = struct.Struct(">IB")
_RESULT, _ACK = ord("R"), ord("A")


class Outbox:
    def __init__(self, directory: Path) -> None:
        self.path = directory / "outbox.log"
        self._fd = -1
        self._size = 0

    def load(self) -> list[pb.TaskResult]:
        """The results recorded and not acknowledged (a torn last record, from a crash mid-write, is
        dropped), and open the log for appending."""
        pending: dict[tuple[str, int], pb.TaskResult] = {}
        data = self.path.read_bytes() if self.path.exists() else b""
        pos = 0
        while pos + _HEADER.size <= len(data):
            length, kind = _HEADER.unpack_from(data, pos)
            body = data[pos + _HEADER.size: pos + _HEADER.size + length]
            if len(body) < length:
                break
            pos += _HEADER.size + length
            if kind == _RESULT:
                result = pb.TaskResult.FromString(body)
                pending[(result.task_id, result.fencing_token)] = result
            elif kind == _ACK:
                task_id, _, token = body.decode().partition("\t")
                pending.pop((task_id, int(token)), None)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._rewrite(list(pending.values()))
        if pending:
            log.info("outbox: %d results from before the restart not yet acknowledged; they are sent again",
                     len(pending))
        return list(pending.values())

    def add(self, results: Iterable[pb.TaskResult]) -> None:
        """Record results, in one write."""
        self._write(b"".join(_record(_RESULT, r.SerializeToString()) for r in results))

    def ack(self, acked: Iterable[tuple[str, int]], pending_left: int) -> None:
        """Record acknowledgements (task id, token), in one write; with nothing left pending the log is emptied."""
        if pending_left == 0:
            self._rewrite([])
        else:
            self._write(b"".join(_record(_ACK, f"{task_id}\t{token}".encode()) for task_id, token in acked))

    def compact(self, pending: Iterable[pb.TaskResult]) -> None:
        """Rewrite the log with only ``pending`` once it has grown past COMPACT_BYTES."""
        if self._size > COMPACT_BYTES:
            self._rewrite(list(pending))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _write(self, records: bytes) -> None:
        if self._fd < 0 or not records:
            return
        try:
            os.write(self._fd, records)
            self._size += len(records)
        except OSError as exc:  # a full disk must not stop results from being sent
            log.warning("outbox: cannot record results (%s); they are kept in memory only", exc)

    def _rewrite(self, results: list[pb.TaskResult]) -> None:
        if self._fd < 0:
            return
        os.ftruncate(self._fd, 0)
        self._size = 0
        self.add(results)


def _record(kind: int, body: bytes) -> bytes:
    return _HEADER.pack(len(body), kind) + body
