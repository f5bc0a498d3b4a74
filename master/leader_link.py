"""Calls a standby master makes to the leader on behalf of a console user.

A standby reads what Redis holds (jobs, runs, tasks) itself, but only the leader can act (its epoch
fences every write) and only the leader has the workers (their slots, their logs). The console on a
standby therefore forwards actions, the live worker list and log streams to the leader over gRPC, with
the caller's own ``Authorization`` header as the call's token: the leader checks it as it checks any
client's, so a standby never acts with more rights than its caller has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, AsyncIterator

import grpc

from sparkyard import errors
from sparkyard.channel import open_channel
from sparkyard.config import MasterConfig
from sparkyard.master.leader import Leadership
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

# How long a forwarded unary call may take (a trigger writes a run and its tasks in one script).
CALL_TIMEOUT_S = 10.0


def _error(exc: grpc.aio.AioRpcError, leader: str) -> errors.SparkyardError:
    """The leader's refusal as the domain error of the same code (its message kept)."""
    if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return errors.Unavailable(f"the leader {leader} did not answer: {exc.details()}")
    cls = errors.BY_CODE_NAME.get(exc.code().name, errors.SparkyardError)
    return cls(exc.details() or exc.code().name)


@dataclass(frozen=True)
class PeerTls:
    """How this master reaches another one (channel.TlsSettings): over TLS when it serves TLS itself,
    trusting ``tls_ca`` (else the client CA: one CA signs everything in the usual set-up, as `sparkyard
    certs` makes it) and showing its own certificate where masters ask for one (mutual TLS)."""

    tls_ca: str
    tls_cert: str
    tls_key: str

    @classmethod
    def of(cls, cfg: MasterConfig) -> PeerTls | None:
        if not cfg.tls_cert:
            return None
        mutual = bool(cfg.tls_client_ca)
        return cls(cfg.tls_ca or cfg.tls_client_ca, cfg.tls_cert if mutual else "", cfg.tls_key if mutual else "")


class LeaderLink:
    def __init__(self, leadership: Leadership, tls: PeerTls | None = None) -> None:
        self._leadership = leadership
        self._tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}

    def _leader(self) -> str:
        address = self._leadership.view.address
        if not address:
            raise errors.Unavailable("no master leads yet (an election is under way); retry shortly")
        return address

    def _channel(self, address: str) -> grpc.aio.Channel:
        if address not in self._channels:
            if self._tls is None:
                self._channels[address] = grpc.aio.insecure_channel(address)
            elif not self._tls.tls_ca:
                raise errors.FailedPrecondition("this standby cannot reach the leader over TLS: start it with --tls-ca "
                                                "(the CA of the masters' certificates) or use the leader's console")
            else:
                self._channels[address] = open_channel(address, self._tls, asynchronous=True)
        return self._channels[address]

    async def call(self, service: str, method: str, request: Any, authorization: str) -> Any:
        """``service`` is ``jobs`` or ``cluster``; ``authorization`` the caller's header ('' for none)."""
        leader = self._leader()
        channel = self._channel(leader)
        stub = pbg.JobServiceStub(channel) if service == "jobs" else pbg.ClusterServiceStub(channel)
        metadata = (("authorization", authorization),) if authorization else ()
        try:
            return await getattr(stub, method)(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            raise _error(exc, leader) from None

    async def log(self, request: pb.StreamTaskLogRequest, authorization: str) -> AsyncIterator[pb.LogChunk]:
        leader = self._leader()
        metadata = (("authorization", authorization),) if authorization else ()
        try:
            async for chunk in pbg.JobServiceStub(self._channel(leader)).StreamTaskLog(request, metadata=metadata):
                yield chunk
        except grpc.aio.AioRpcError as exc:
            raise _error(exc, leader) from None

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
