"""A server of ours asks whether its address is taken before it listens (issue 25 item 1), and names the
holder: gRPC's own error is a multi-line core log naming nobody."""

from __future__ import annotations

import os
import socket

from sparkyard.addresses import in_use


def test_a_taken_address_names_the_process_that_listens_there() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        said = in_use("127.0.0.1", port)
        assert said.startswith(f"address in use by pid {os.getpid()} ("), said
        assert in_use("0.0.0.0", port).startswith("address in use")  # every interface includes loopback's port


def test_a_free_address_or_port_0_is_not_in_use() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: closed again below
    assert in_use("127.0.0.1", port) == ""
    assert in_use("127.0.0.1", 0) == ""
