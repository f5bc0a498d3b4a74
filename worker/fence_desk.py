"""The worker's fence desk: a task's process asks it, before publishing fenced output, whether its attempt
still holds the task's current fencing token.

Task code never runs in the worker's process (a warm driver, a ``spark-submit``, a Spark Connect client
process), so the question travels over a Unix socket in the abstract namespace (Linux), named after the
worker's work directory and passed to the task in its context (``ctx.fence``): any process on the
worker's host can reach it whatever its runner, and no file is left behind. One JSON line in
(``{"task_id", "fencing_token"}``), one out (``{"current", "reason"}``).

The worker answers *not current* at once when it knows the attempt is fenced — it no longer runs that
attempt, it has killed it, or it has not renewed its lease for ``lease − margin`` — and otherwise asks the
master (``WorkerService.CheckFence``, answered from Redis). A worker that cannot reach a master answers
*not current*: publishing waits for a confirmation, it never assumes one. The question reveals nothing but
whether a given (task, token) pair is current, so the socket asks no token.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
from typing import TYPE_CHECKING, Awaitable, Callable

from sparkyard.startup import StartupError
from sparkyard.v1 import sparkyard_pb2 as pb

if TYPE_CHECKING:
    import grpc

log = logging.getLogger(__name__)

# How long a task waits for its worker's answer; the worker's own call to the master gets less.
ASK_TIMEOUT_S = 15.0
MASTER_TIMEOUT_S = 10.0
MAX_LINE_BYTES = 4096

Answer = Callable[[str, int], Awaitable[tuple[bool, str]]]


def desk_address(work_dir: str | os.PathLike[str]) -> str:
    """The abstract socket name of the worker with this work directory (one per directory: two workers
    on one host never share one)."""
    digest = hashlib.blake2b(os.path.realpath(work_dir).encode(), digest_size=8).hexdigest()
    return f"\0sparkyard-fence-{digest}"


class FenceDesk:
    """Serves the question on the worker's event loop; ``answer`` decides."""

    def __init__(self, address: str, answer: Answer) -> None:
        self.address = address
        self._answer = answer
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=self.address, limit=MAX_LINE_BYTES)
        except OSError as exc:
            raise StartupError(f"cannot open the fence desk ({exc.strerror}): is another worker running with "
                                 "this --work-dir?") from None

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            current, reason = await self._decide(await asyncio.wait_for(reader.readline(), ASK_TIMEOUT_S))
            writer.write(json.dumps({"current": current, "reason": reason}).encode() + b"\n")
            await writer.drain()
        except (OSError, ValueError) as exc:  # the asker went away or fell silent, or a line too long
            log.debug("fence question not answered: %s", exc)
        finally:
            writer.close()

    async def _decide(self, line: bytes) -> tuple[bool, str]:
        try:
            question = json.loads(line)
            task_id, token = question["task_id"], question["fencing_token"]
        except (ValueError, TypeError, KeyError):
            return False, 'bad question: want one JSON line {"task_id": str, "fencing_token": int}'
        if not isinstance(task_id, str) or not task_id or not isinstance(token, int) or token <= 0:
            return False, "bad question: task_id must be a non-empty string and fencing_token a positive integer"
        return await self._answer(task_id, token)


async def confirm_with_master(channel: grpc.aio.Channel | None, metadata: list[tuple[str, str]], task_id: str,
                              token: int) -> tuple[bool, str]:
    """(current, reason) as the master says (``WorkerService.CheckFence``); no master, no confirmation."""
    import grpc  # here, not at the top: task processes import this module for ask_worker and need no gRPC

    from sparkyard.v1 import sparkyard_pb2_grpc as pbg

    if channel is None:
        return False, "the worker is not connected to a master to confirm the fencing token"
    try:
        reply = await pbg.WorkerServiceStub(channel).CheckFence(
            pb.CheckFenceRequest(task_id=task_id, fencing_token=token), metadata=metadata, timeout=MASTER_TIMEOUT_S)
    except grpc.RpcError as exc:
        return False, f"the master did not confirm the fencing token: {exc.code().name}: {exc.details()}"
    return reply.current, reply.reason


def ask_worker(address: str, task_id: str, token: int, timeout_s: float = ASK_TIMEOUT_S) -> tuple[bool, str]:
    """(current, reason) from the worker at ``address``; an unreachable or silent worker is *not current*
    (the attempt cannot prove it still holds its token)."""
    if not address:
        return False, "this context names no worker to confirm its fencing token with"
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(address)
            sock.sendall(json.dumps({"task_id": task_id, "fencing_token": token}).encode() + b"\n")
            reply = sock.makefile("rb").readline(MAX_LINE_BYTES)
        answer = json.loads(reply)
        return bool(answer["current"]), str(answer.get("reason", ""))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"the worker did not confirm the fencing token ({type(exc).__name__}: {exc})"
