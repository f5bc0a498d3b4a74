"""How a client's call reaches the leader among the masters it was given: a standby's refusal names the
leader and the call goes there; while no master leads (an election) the call waits; a master that does not
answer is followed by the next of the list. The Python client (sparkyard.client) makes every call through
one :class:`LeaderCalls`; the API it offers is its own concern."""

from __future__ import annotations

import time
from typing import Any, Protocol

import grpc

from sparkyard import errors
from sparkyard.channel import SERVICE_CONFIG, TlsSettings, open_channel, tls_hint, translate
from sparkyard.v1 import sparkyard_pb2 as pb
from sparkyard.v1 import sparkyard_pb2_grpc as pbg

# How long a call waits for a leader to be elected (standbys answer meanwhile), and how often it asks.
LEADER_WAIT_S = 15.0
ELECTION_POLL_S = 0.25
# After a call to one of several masters ran out of time: how long that master gets to answer a status
# call before it is taken for gone (paused, partitioned; its TCP port may still accept) and the call is
# made again on the next master. Calls safe to repeat only: a manual trigger is not.
PROBE_TIMEOUT_S = 1.0
_NOT_REPEATED = {"TriggerJob"}


class CallSettings(TlsSettings, Protocol):
    """The part of a client's settings (sparkyard.client_settings) its calls read."""

    token: str
    call_timeout_s: float


class LeaderCalls:
    """Channels to the masters (one per address, made on first use) and the master calls go to now."""

    def __init__(self, config: CallSettings, masters: list[str]) -> None:
        self._config = config
        self.masters = masters
        self.master = masters[0]  # the one calls go to; moves to the leader a standby names
        self.timeout = config.call_timeout_s
        self.metadata = [("authorization", f"Bearer {config.token}")] if config.token else []
        self._channels: dict[str, tuple[grpc.Channel, dict[str, Any]]] = {}
        self._answered: set[str] = set()  # masters that answered a call of this client

    def stubs(self, service: str) -> Any:
        """The stub of a service on the current master (channels are made once per address)."""
        if self.master not in self._channels:
            channel = open_channel(self.master, self._config, [
                ("grpc.service_config", SERVICE_CONFIG), ("grpc.enable_retries", 1),
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                # A master back after a restart or an election is dialled again within a second, not after
                # gRPC's default backoff (1 s growing to 120 s), while a call waits for it.
                ("grpc.initial_reconnect_backoff_ms", 250), ("grpc.max_reconnect_backoff_ms", 1000),
            ])
            stubs = {"jobs": pbg.JobServiceStub(channel), "cluster": pbg.ClusterServiceStub(channel),
                     "bundles": pbg.BundleServiceStub(channel)}
            self._channels[self.master] = (channel, stubs)
        return self._channels[self.master][1][service]

    def close(self) -> None:
        for channel, _ in self._channels.values():
            channel.close()
        self._channels.clear()

    def call(self, service: str, method: str, request: Any, timeout: float | None = None) -> Any:
        """Call the leader: a standby's refusal names it and the call goes there; while no master leads
        (an election under way) the call waits up to LEADER_WAIT_S; an unreachable master is followed by
        the next of the list. A list ``request`` is sent as a stream."""
        deadline = time.monotonic() + LEADER_WAIT_S
        unreachable: set[str] = set()
        while True:
            call = getattr(self.stubs(service), method)
            try:
                reply = call(iter(request) if isinstance(request, list) else request,
                             timeout=timeout or self.timeout, metadata=self.metadata)
                self._answered.add(self.master)
                return reply
            except grpc.RpcError as exc:
                if not self.follow(exc, unreachable, deadline, method):
                    raise translate(exc, ", ".join(self.masters) if unreachable else self.master,
                                    tls_hint(self._config)) from None

    def follow(self, exc: grpc.RpcError, unreachable: set[str], deadline: float, method: str) -> bool:
        """Where to send a call refused UNAVAILABLE, or out of time on a master that no longer answers,
        next (True: self.master now names it)."""
        code = exc.code() if hasattr(exc, "code") else None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED and method not in _NOT_REPEATED and self._gone(unreachable):
            return self._next_master(unreachable, deadline)
        if code != grpc.StatusCode.UNAVAILABLE:
            return False
        trailing = dict(exc.trailing_metadata() or ()) if hasattr(exc, "trailing_metadata") else {}
        if errors.LEADER_METADATA in trailing:  # a standby answered
            leader = str(trailing[errors.LEADER_METADATA])
            if leader and leader != self.master and leader not in unreachable and time.monotonic() < deadline:
                self.master = leader
                return True
            if time.monotonic() < deadline:  # no leader (or a dead one) yet: an election is under way
                time.sleep(ELECTION_POLL_S)
                return True
            return False
        return self._next_master(unreachable, deadline)

    def _gone(self, unreachable: set[str]) -> bool:
        """Whether the current master, one of several, fails to answer a status call in PROBE_TIMEOUT_S."""
        if len(self.masters) < 2 or self.master in unreachable:
            return False
        try:
            self.stubs("cluster").GetStatus(pb.GetStatusRequest(), timeout=PROBE_TIMEOUT_S, metadata=self.metadata)
        except grpc.RpcError:
            return True
        return False

    def _next_master(self, unreachable: set[str], deadline: float) -> bool:
        """The next master of the list to try. Once every master of several has failed, they are tried again
        from the first after ELECTION_POLL_S until ``deadline``: during a leader change the old leader is gone
        and the standby may refuse connections for a moment too (restarting, or its port not yet served).
        A single master that refuses is said at once (a master not running, not an election) unless it
        answered this client before: then it is restarting (a leader that lost its lease comes back as a
        standby, then leads again), and is waited for as an election is."""
        unreachable.add(self.master)
        rest = [m for m in self.masters if m not in unreachable]
        if rest:
            self.master = rest[0]
            return True
        if (len(self.masters) < 2 and self.master not in self._answered) or time.monotonic() >= deadline:
            return False
        time.sleep(ELECTION_POLL_S)
        unreachable.clear()
        self.master = self.masters[0]
        return True
