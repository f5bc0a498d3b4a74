"""The client rides through a leader change in which every master it knows refuses connections for a moment
(the old leader gone, the standby restarting), and still says at once that a lone master is not running."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from typing import Any

import grpc
import pytest

from harness import free_port
from sparkyard import leader_calls
from sparkyard import errors
from sparkyard.client import Client
from sparkyard.leader_calls import LEADER_WAIT_S, LeaderCalls
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg


class _Status(pbg.ClusterServiceServicer):
    def GetStatus(self, request: pb.GetStatusRequest, context: grpc.ServicerContext) -> pb.StatusResponse:
        return pb.StatusResponse(leased=7)


def test_a_call_waits_while_every_master_refuses_then_reaches_the_one_that_comes_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pbg.add_ClusterServiceServicer_to_server(_Status(), server)
    started = threading.Event()
    moved_on = LeaderCalls._next_master

    def start_once_every_master_refused(self: LeaderCalls, unreachable: set[str], *rest: Any) -> bool:
        if not started.is_set() and set(self.masters) <= unreachable | {self.master}:
            # The standby comes up only after both masters refused the call (a bound port would accept).
            server.add_insecure_port(second)
            server.start()
            started.set()
        return moved_on(self, unreachable, *rest)

    monkeypatch.setattr(LeaderCalls, "_next_master", start_once_every_master_refused)
    try:
        with Client(f"{first},{second}", tls_ca="", tls_cert="", tls_key="") as client:
            assert client.status().leased == 7
            assert started.is_set() and client.master == second
    finally:
        server.stop(None)


def test_a_lone_master_that_refuses_is_said_at_once() -> None:
    alone = f"127.0.0.1:{free_port()}"
    with Client(alone, tls_ca="", tls_cert="", tls_key="") as client:
        began = time.monotonic()
        with pytest.raises(errors.Unavailable, match="no master listening"):
            client.status()
        assert time.monotonic() - began < LEADER_WAIT_S  # not the election wait


def test_several_masters_that_never_come_up_are_given_up_after_the_election_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader_calls, "LEADER_WAIT_S", 2.0)
    masters = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    with Client(masters, tls_ca="", tls_cert="", tls_key="") as client:
        began = time.monotonic()
        with pytest.raises(errors.Unavailable, match="no master listening"):
            client.status()
        assert time.monotonic() - began >= 2.0


def test_a_lone_master_that_answered_before_and_restarts_is_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader that loses its lease (a stall past it) restarts as a standby and closes its port for a
    moment: a client it answered rides through that as through an election."""
    address = f"127.0.0.1:{free_port()}"

    def serve() -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pbg.add_ClusterServiceServicer_to_server(_Status(), server)
        server.add_insecure_port(address)
        server.start()
        return server

    servers = [serve()]
    moved_on = LeaderCalls._next_master

    def restart_once_refused(self: LeaderCalls, *rest: Any) -> bool:
        if len(servers) == 1:  # refused once: the master comes back
            servers.append(serve())
        return moved_on(self, *rest)

    monkeypatch.setattr(LeaderCalls, "_next_master", restart_once_refused)
    try:
        with Client(address, tls_ca="", tls_cert="", tls_key="") as client:
            assert client.status().leased == 7
            servers[0].stop(None).wait()
            assert client.status().leased == 7
            assert len(servers) == 2
    finally:
        for server in servers:
            server.stop(None)
