"""An UNAVAILABLE the master gives itself (a worker not connected, Redis down) reaches the user as the master's
reason, not as "no master reachable" with a TLS hint (a new user's `sparkyard logs` of a task whose worker had
gone said so although the master answered)."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from sparkyard import errors
from sparkyard.channel import translate
from sparkyard.master.services import _abort


class _Refused(grpc.RpcError):
    def __init__(self, details: str, trailing: tuple[tuple[str, str], ...] = ()) -> None:
        self._details, self._trailing = details, trailing

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._trailing


class _Context:
    def __init__(self) -> None:
        self.aborted: tuple[Any, ...] = ()

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: Any = ()) -> None:
        self.aborted = (code, details, tuple(trailing_metadata))
        raise grpc.RpcError()


async def test_the_masters_own_unavailable_is_marked_and_said_as_its_reason() -> None:
    context = _Context()
    with pytest.raises(grpc.RpcError):
        await _abort(context, errors.Unavailable("worker wk1 that ran attempt 1 of task t is not connected"), "logs")
    code, details, trailing = context.aborted
    assert code == grpc.StatusCode.UNAVAILABLE and (errors.ANSWERED_METADATA, "1") in trailing
    said = str(translate(_Refused(details, trailing), "127.0.0.1:7070", " (if the master uses TLS, give --tls-ca)"))
    assert said == "master 127.0.0.1:7070: worker wk1 that ran attempt 1 of task t is not connected"


def test_a_transport_failure_is_still_no_master_reachable() -> None:
    said = str(translate(_Refused("failed to connect to all addresses"), "127.0.0.1:7070", " (hint)"))
    assert said == "no master reachable at 127.0.0.1:7070: failed to connect to all addresses (hint)"
